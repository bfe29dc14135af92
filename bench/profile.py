"""Profile one quartzlite workload: where a node's time goes, by thread and span down
to each statement (:mod:`bench.probe`), which statements it sends (counted on the wire
by :mod:`bench.wire`), and optionally py-spy profiles. Not part of the measured runs:
the probe and the proxy slow a node down a little.

    python -m bench.profile burst  [--jobs 2000] [--nodes 2] [--capacity 5000]
    python -m bench.profile steady [--jobs 200] [--seconds 15] [--capacity 1000]
    python -m bench.profile idle   [--jobs 100000] [--seconds 30]
    options: --no-wire (no counting proxy), --spy (py-spy: CPU flame graph and
             wall-clock stacks of every thread, bench/logs/profile-*.svg/.raw/.txt)

Prints the summaries; the probe's raw spans are in bench/logs/probe-<workload>-<pid>.json.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from bench import ql, util
from bench.util import LOG_DIR, Server, log
from bench.wire import CountingProxy, difference, summary


def spy_path() -> str:
    found = shutil.which("py-spy") or str(Path(util.PY).with_name("py-spy"))
    if not Path(found).exists():
        raise SystemExit("py-spy is not installed: make bench installs it (pip install py-spy)")
    return found


class Sampler:
    """py-spy record on one process for ``seconds``: raw (collapsed) stacks of every
    thread including waiting ones (wall clock: a thread waiting for the database shows
    in a socket read), and a flame graph of CPU time (active threads only)."""

    def __init__(self, pid: int, name: str, seconds: float, rate: int = 200) -> None:
        self.raw = LOG_DIR / f"profile-{name}.raw"
        self.svg = LOG_DIR / f"profile-{name}.svg"
        common = [spy_path(), "record", "--pid", str(pid), "--rate", str(rate), "--duration",
                  str(max(1, math.ceil(seconds))), "--threads", "--nonblocking"]
        self.procs = [
            subprocess.Popen([*common, "--idle", "--format", "raw", "-o", str(self.raw)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
            subprocess.Popen([*common, "-o", str(self.svg)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
        ]

    def wait(self) -> None:
        for proc in self.procs:
            try:
                proc.wait(120)
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGINT)
                proc.wait(30)


def _thread_group(frame: str) -> str:
    """'thread (123): run-17' -> 'run-*'."""
    name = frame.split(":", 1)[1].strip() if ":" in frame else frame
    return re.sub(r"-\d+$", "-*", name)


def _short(frame: str) -> str:
    return frame.replace(str(util.ROOT) + "/", "")


def digest(raw: Path, top: int = 12) -> str:
    """Wall-clock samples by thread, and per busy thread where its time goes: the
    innermost quartzlite frame and the leaf (what it was doing there)."""
    if not raw.exists():
        return f"(no samples: {raw} missing)"
    by_thread: Counter[str] = Counter()
    places: dict[str, Counter[str]] = defaultdict(Counter)
    total = 0
    for line in raw.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        n = int(count)
        frames = stack.split(";")
        thread = _thread_group(next((f for f in frames if f.startswith("thread")), "?"))
        funcs = [_short(f) for f in frames if not f.startswith(("thread", "process"))]
        if not funcs:
            continue
        total += n
        by_thread[thread] += n
        ours = [f for f in funcs if "quartzlite/" in f or "bench/" in f]
        inner = ours[-1] if ours else funcs[-1]
        places[thread][f"{inner}  <- leaf {funcs[-1]}" if funcs[-1] != inner else inner] += n
    lines = [f"wall-clock samples: {total} (every thread, waiting ones included)"]
    for thread, n in by_thread.most_common():
        idle = sum(c for p, c in places[thread].items()
                   if re.search(r"Service\._sleep|WorkerPool\._work \(|wait \(threading", p))
        lines.append(f"\n[{thread}] {n} samples, {100 * (n - idle) / max(n, 1):.0f}% not waiting for work")
        for place, c in places[thread].most_common(top):
            lines.append(f"  {c:6d} {100 * c / n:5.1f}%  {place}")
    return "\n".join(lines)


def _proxy() -> CountingProxy:
    params = util.server_params()
    return CountingProxy(params["host"], params["port"])


def probe_report(path: Path, t0: float | None, top: int = 28) -> str:
    """The probe's spans: CPU by thread, where each thread's wall time went, and for a
    burst the timeline of the transactions around T0."""
    if not path.exists():
        return f"(no probe output: {path} missing)"
    data = json.loads(path.read_text())
    lines = ["CPU seconds by thread: " + ", ".join(f"{k} {v}" for k, v in data["thread_cpu_s"].items()),
             "", "wall time by thread and span (nested spans overlap: transaction > statement):",
             f"  {'thread':12} {'span':34} {'count':>7} {'total s':>8} {'mean ms':>8} {'max ms':>8}"]
    for row in data["totals"][:top]:
        lines.append(f"  {row['thread']:12} {row['span']:34} {row['count']:7d} {row['seconds']:8.3f} "
                     f"{1000 * row['seconds'] / row['count']:8.2f} {1000 * row['max_s']:8.1f}")
    if t0 is not None:
        lines += ["", "timeline around T0 (offsets from T0 in ms; spans that began within 3 s):"]
        interesting = ("NodeStore.fire", "NodeStore.complete", "NodeStore.prepare_due",
                       "wait node.mutex", "sql")
        shown = 0
        for thread, name, started, seconds in sorted(data["spans"], key=lambda s: s[2]):
            if not (t0 - 0.5 <= started <= t0 + 3) or not name.startswith(interesting):
                continue
            if name.startswith("sql") and thread not in ("firer", "results"):
                continue
            lines.append(f"  {1000 * (started - t0):8.1f} .. {1000 * (started + seconds - t0):8.1f}"
                         f"  {thread:10} {name}")
            shown += 1
            if shown >= 80:
                lines.append("  ...")
                break
        runs = sorted(s[2] for s in data["spans"] if s[1] == "run_callable" and s[2] >= t0 - 0.5)
        starts = sorted(s[2] for s in data["spans"] if s[1] == "Node.start_execution" and s[2] >= t0 - 0.5)
        hand = sum(s[3] for s in data["spans"] if s[1] == "Node.start_execution" and s[2] >= t0 - 0.5)
        if runs:
            lines.append(f"  run bodies: first entered at {1000 * (runs[0] - t0):.1f} ms, last at "
                         f"{1000 * (runs[-1] - t0):.1f} ms ({len(runs)})")
        if starts:
            lines.append(f"  start_execution: {len(starts)} calls from {1000 * (starts[0] - t0):.1f} "
                         f"to {1000 * (starts[-1] - t0):.1f} ms, {1000 * hand:.1f} ms inside them")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> dict[str, Any]:
    server = Server()
    proxy = _proxy() if args.wire else None
    name = f"profile_{args.workload}"
    cluster = ql.Cluster(server, name)
    launcher = ("-m", "bench.probe", str(LOG_DIR / f"probe-{args.workload}-{{pid}}.json"))
    port = proxy.port if proxy else None
    samplers: list[Sampler] = []
    t0: float | None = None

    def spy(seconds: float) -> None:
        if args.spy:
            samplers.extend(Sampler(n.pid, f"{args.workload}-node{i + 1}", seconds)
                            for i, n in enumerate(cluster.nodes))

    try:
        options = {"capacity": args.capacity}
        if args.workload == "burst":
            cluster.start(args.nodes, options, port=port, launcher=launcher)
            time.sleep(1.5)
            t0 = math.ceil(time.time() + 6)
            specs = [{"name": f"burst{i:05d}", "schedule": f"@at {ql._iso(t0)}",
                      "callable": ql.RECORD, "kwargs": {"path": str(cluster.records)}}
                     for i in range(args.jobs)]
            cluster.add_jobs(specs)
            util.sleep_until(t0 - 1)
            spy(4)
            before = proxy.snapshot() if proxy else None
            started = time.monotonic()
            deadline = t0 + 60
            while util.count_lines(cluster.records) < args.jobs and time.time() < deadline:
                time.sleep(0.05)
            time.sleep(1)
        else:
            if args.workload == "steady":
                cluster.add_jobs(ql.every_second_specs("tick", args.jobs, cluster.records))
            else:
                cluster.add_jobs(ql.idle_specs("idle", args.jobs))
            cluster.start(args.nodes, options, port=port, launcher=launcher)
            time.sleep(4 if args.workload == "steady" else 8)
            spy(args.seconds)
            before = proxy.snapshot() if proxy else None
            started = time.monotonic()
            time.sleep(args.seconds)
        after = proxy.snapshot() if proxy else None
        seconds = time.monotonic() - started
        for sampler in samplers:
            sampler.wait()
        records = util.read_records(cluster.records)
    finally:
        for sampler in samplers:
            sampler.wait()
        cluster.stop()
        cluster.drop()
        if proxy:
            proxy.close()
        server.close()
    window = [r for r in records if r.actual >= time.time() - seconds - 5] if t0 is None else records
    print(f"== {args.workload}: {len(records)} executions recorded; lateness "
          f"{util.lateness_stats(window)}")
    if proxy and before and after:
        wire = summary(difference(after[0], before[0]), difference(after[1], before[1]), seconds)
        fires = len(window)
        print(f"== statements on the wire: {wire['statements']} in {seconds:.1f} s "
              f"({wire['statements_per_s']} /s); commands {wire['commands']}")
        for row in wire["by_statement"]:
            per_fire = f"{row['count'] / fires:.3f}" if fires else "-"
            print(f"   {row['count']:7d} {per_fire:>7}/fire  {row['sql'][:200]}")
    for i, node in enumerate(cluster.nodes):
        report = probe_report(LOG_DIR / f"probe-{args.workload}-{node.pid}.json", t0)
        print(f"\n== node {i + 1} (pid {node.pid})\n{report}")
    for sampler in samplers:
        text = digest(sampler.raw)
        sampler.raw.with_suffix(".txt").write_text(text + "\n")
        print(f"\n== py-spy {sampler.raw.stem} (CPU flame graph: {sampler.svg})\n{text}")
    return {}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.profile", description=__doc__.split("\n")[0])
    parser.add_argument("workload", choices=("burst", "steady", "idle"))
    parser.add_argument("--jobs", type=int)
    parser.add_argument("--nodes", type=int, default=1)
    parser.add_argument("--capacity", type=int)
    parser.add_argument("--seconds", type=float, default=15)
    parser.add_argument("--no-wire", dest="wire", action="store_false",
                        help="connect the nodes to the server directly (no counting proxy)")
    parser.add_argument("--spy", action="store_true", help="also record py-spy profiles")
    args = parser.parse_args(argv)
    defaults = {"burst": (2000, 5000), "steady": (200, 1000), "idle": (100_000, 16)}
    jobs, capacity = defaults[args.workload]
    args.jobs = args.jobs or jobs
    args.capacity = args.capacity or capacity
    log(f"profiling {args.workload}: {args.jobs} jobs, {args.nodes} node(s), capacity {args.capacity}")
    run(args)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
