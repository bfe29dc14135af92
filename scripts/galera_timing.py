"""How long writes stall on a surviving Galera member when another member is killed -9,
for Galera's default failure detection and for tuned ``evs.*`` settings.

Each settings set gets a fresh private three-member cluster on loopback
(tests/cluster/galera.py; never the shared server). Per trial: a probe commits small
INSERTs on member 0 back to back; member 1 or 2 (alternately) is killed with SIGKILL; the
stall is the longest gap between two commits on member 0 across the kill, and "view" the
time until member 0 reports a Primary cluster of 2. The killed member then rejoins (IST)
before the next trial.

quartzlite's nodes fence after ``fence_after_s`` (5 s by default) without a successful
heartbeat, and a heartbeat may be up to ``heartbeat_interval_s`` (1 s) old when a stall
begins: a stall longer than ``fence_after_s - heartbeat_interval_s`` fences every node on
the surviving members (quartzlite/storage/safety.py).

Usage: python scripts/galera_timing.py [--trials 5] [--sets default,tuned,...]
       [--set NAME=OPTIONS ...] [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests.cluster.galera lives in the checkout

import pymysql  # noqa: E402

from tests.cluster.galera import GaleraCluster, WriteProbe  # noqa: E402

#: Galera's constraints on these (gcomm/src/evs_proto.cpp, checked when the provider
#: starts; a violation stops mariadbd with "parameter ... is out of range"):
#:   evs.keepalive_period      in [PT0.1S, suspect_timeout / 3)
#:   evs.inactive_check_period <= suspect_timeout / 2 (and not changeable at run time)
#:   evs.install_timeout       in [keepalive_period, inactive_timeout]
#:   evs.inactive_timeout >= evs.suspect_timeout (the docs' rule: a member is declared
#:   inactive unilaterally after inactive_timeout, by consensus after suspect_timeout)
#: So evs.suspect_timeout=PT2S alone does NOT start: the default keepalive_period PT1S
#: is out of range [PT0.1S, PT0.666667S).
SETS: dict[str, str] = {
    "default": "",
    "suspect2+keepalive": "evs.suspect_timeout=PT2S;evs.keepalive_period=PT0.5S",
    "tuned": ("evs.suspect_timeout=PT2S;evs.inactive_timeout=PT3S;evs.install_timeout=PT3S;"
              "evs.keepalive_period=PT0.5S;evs.inactive_check_period=PT0.5S"),
    "aggressive": ("evs.suspect_timeout=PT1S;evs.inactive_timeout=PT2S;evs.install_timeout=PT2S;"
                   "evs.keepalive_period=PT0.3S;evs.inactive_check_period=PT0.25S"),
}
DEFAULT_SETS = ["default", "tuned"]
FENCE_AFTER_S = 5.0
HEARTBEAT_INTERVAL_S = 1.0


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def wait(predicate: Any, timeout: float, what: str, interval: float = 0.05) -> float:
    """Poll until true; the monotonic time it became true."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if predicate():
                return time.monotonic()
        except pymysql.err.MySQLError:
            pass
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def trial(cluster: GaleraCluster, victim: int) -> dict[str, Any]:
    probe = WriteProbe(cluster, 0).start()
    try:
        wait(lambda: len(probe.commits) >= 30, 30, "probe commits before the kill")
        killed_at = time.monotonic()
        cluster.kill9(victim)

        def view_of_two() -> bool:
            status = cluster.status(0)
            return (status["wsrep_cluster_size"] == "2"
                    and status["wsrep_cluster_status"] == "Primary")

        view_at = wait(view_of_two, 90, "member 0 in a Primary cluster of 2")
        resumed = len(probe.commits)
        wait(lambda: len(probe.commits) >= resumed + 30, 60, "commits after the view change")
    finally:
        probe.stop()
    stall = probe.longest_gap(after=killed_at)
    rejoin_started = time.monotonic()
    kind = cluster.start(victim)
    rejoin_s = time.monotonic() - rejoin_started
    time.sleep(1.0)  # let the rejoined member settle before the next kill
    return {
        "victim": victim,
        "stall_s": round(stall, 3),
        "view_s": round(view_at - killed_at, 3),
        "errors": [e[2] for e in probe.errors],
        "rejoin": kind,
        "rejoin_s": round(rejoin_s, 2),
    }


def measure(name: str, options: str, trials: int) -> dict[str, Any]:
    started = time.monotonic()
    results: list[dict[str, Any]] = []
    with GaleraCluster(size=3, provider_options=options) as cluster:
        up_s = time.monotonic() - started
        effective = effective_evs(cluster)
        for n in range(trials):
            result = trial(cluster, victim=1 + n % 2)
            results.append(result)
            say(f"  {name} trial {n + 1}/{trials}: kill -9 member {result['victim']}: "
                f"stall {result['stall_s']:.2f}s, view after {result['view_s']:.2f}s, "
                f"rejoined by {result['rejoin']} in {result['rejoin_s']:.1f}s"
                + (f", errors {result['errors']}" if result["errors"] else ""))
    stalls = [r["stall_s"] for r in results]
    views = [r["view_s"] for r in results]
    return {
        "name": name, "options": options, "effective": effective, "startup_s": round(up_s, 1),
        "trials": results,
        "stall_median_s": round(statistics.median(stalls), 2), "stall_max_s": round(max(stalls), 2),
        "view_median_s": round(statistics.median(views), 2), "view_max_s": round(max(views), 2),
        "errors": sum(len(r["errors"]) for r in results),
    }


def effective_evs(cluster: GaleraCluster) -> str:
    """The evs.* values the provider runs with (defaults included)."""
    conn = cluster.connect(0)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT @@wsrep_provider_options")
            row = cur.fetchone()
    finally:
        conn.close()
    wanted = ("suspect_timeout", "inactive_timeout", "install_timeout", "keepalive_period",
              "inactive_check_period")
    found = {}
    for part in str(row[0] if row else "").split(";"):
        key, _, value = part.strip().partition(" = ")
        if key.startswith("evs.") and key[4:] in wanted:
            found[key[4:]] = value.strip()
    return " ".join(f"{k}={found.get(k, '?')}" for k in wanted)


def table(summaries: list[dict[str, Any]]) -> str:
    limit = FENCE_AFTER_S - HEARTBEAT_INTERVAL_S
    head = (f"| settings | trials | stall median (s) | stall max (s) | view median (s) "
            f"| view max (s) | probe errors | max stall < {limit:.0f} s |")
    lines = [head, "|---" * (head.count("|") - 1) + "|"]
    for s in summaries:
        ok = "yes" if s["stall_max_s"] < limit else "NO: nodes fence"
        lines.append(f"| {s['name']} | {len(s['trials'])} | {s['stall_median_s']:.2f} | "
                     f"{s['stall_max_s']:.2f} | {s['view_median_s']:.2f} | {s['view_max_s']:.2f} "
                     f"| {s['errors']} | {ok} |")
    lines.append("")
    for s in summaries:
        lines.append(f"- {s['name']}: {s['effective']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--sets", default=",".join(DEFAULT_SETS),
                        help=f"comma-separated names among {', '.join(SETS)}")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=OPTIONS",
                        help="an extra set of wsrep_provider_options (key=value;...)")
    parser.add_argument("--json", type=Path, help="write every trial here")
    args = parser.parse_args(argv)
    chosen: list[tuple[str, str]] = []
    for name in filter(None, args.sets.split(",")):
        if name not in SETS:
            parser.error(f"unknown set {name!r} (known: {', '.join(SETS)})")
        chosen.append((name, SETS[name]))
    for extra in args.set:
        name, _, options = extra.partition("=")
        chosen.append((name, options))
    summaries = []
    for name, options in chosen:
        say(f"{name}: {options or '(Galera defaults)'}")
        summaries.append(measure(name, options, args.trials))
    say("")
    say(table(summaries))
    if args.json:
        args.json.write_text(json.dumps(summaries, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
