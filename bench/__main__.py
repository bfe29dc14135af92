"""Run every workload on quartzlite and APScheduler, write bench/results.json and
docs/benchmarks.md, print the table.

    python -m bench [--only burst,steady,shell,failover,idle,cost,ui,galera] [--merge]

``BENCH_QUICK=1`` shrinks the windows (for iterating on the bench itself). ``--only``
runs some workloads; with ``--merge`` their results replace those parts of the existing
results.json instead of starting a new one.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
import traceback
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial
from typing import Any

from bench import aps, ql, report, ui, util
from bench.util import QUICK, Server, log

WORKLOADS = ("burst", "steady", "shell", "failover", "idle", "cost", "ui", "galera")

#: Sizes and durations: (full, quick).
PLAN = {
    "burst_jobs": (2000, 2000),
    "burst_capacity": (5000, 5000),
    "steady_jobs": (200, 200),
    "steady_s": (30, 10),
    "steady_capacity": (1000, 1000),
    "shell_jobs": (200, 200),
    "shell_s": (30, 10),
    "failover_jobs": (100, 100),
    "failover_kill_at": (10, 8),
    "failover_s": (40, 25),
    "failover_capacity": (500, 500),
    "idle_small": (1_000, 1_000),
    "idle_large": (100_000, 20_000),
    "idle_s": (30, 10),
    "cli_import": (100_000, 10_000),
    "cost_ns": ((50, 200, 1000, 5000), (50, 1000, 5000)),
    "cost_s": (15, 6),
    "ui_jobs": (100_000, 20_000),
    "ui_runs": (1_000_000, 200_000),
    "ui_timed": (ui.TIMED, 10),
}


def plan(key: str) -> Any:
    full, quick = PLAN[key]
    return quick if QUICK else full


def attempt(label: str, fn: Callable[[], dict[str, Any]], tries: int = 2) -> dict[str, Any]:
    """Run one measurement; a failure (say, the shared server restarted under it) is
    tried once more, then recorded, and the other measurements still run."""
    for attempt_no in range(1, tries + 1):
        util.wait_quiet()
        log(f"{label} ...")
        started = time.monotonic()
        try:
            result = fn()
        except Exception as error:  # noqa: BLE001 - reported in the results
            log(f"{label} FAILED: {error!r}")
            traceback.print_exc(file=sys.stderr)
            if attempt_no < tries:
                util.wait_server()
                continue
            return {"error": f"{type(error).__name__}: {error}"}
        log(f"{label} done in {time.monotonic() - started:.0f} s: " + _summary(result))
        if attempt_no > 1:
            result["attempts_after_failure"] = attempt_no
        return result
    raise AssertionError("unreachable")


def _summary(result: dict[str, Any]) -> str:
    keys = ("makespan_s", "lateness_p99_ms", "missed_slots", "duplicates", "recovery_gap_s",
            "statements_per_s", "statements_per_fire", "fires_per_s", "jobs_per_s", "clean")
    return ", ".join(f"{k}={result[k]}" for k in keys if k in result)


def burst(server: Server) -> dict[str, Any]:
    """Each quartzlite setup twice: with the defaults a user gets (``_defaults``), and
    tuned (capacity raised)."""
    jobs, capacity = plan("burst_jobs"), plan("burst_capacity")
    found: dict[str, Any] = {}
    for nodes in (1, 2):
        label = f"burst quartzlite {nodes} node{'s' if nodes > 1 else ''}"
        found[f"quartzlite_{nodes}_defaults"] = attempt(
            f"{label}, defaults", partial(ql.burst, server, nodes, jobs, None))
        found[f"quartzlite_{nodes}"] = attempt(
            f"{label}, capacity {capacity}", partial(ql.burst, server, nodes, jobs, capacity))
    found["apscheduler"] = attempt("burst APScheduler", lambda: aps.burst(server, jobs))
    return found


def steady(server: Server) -> dict[str, Any]:
    jobs, seconds, capacity = plan("steady_jobs"), plan("steady_s"), plan("steady_capacity")
    found: dict[str, Any] = {}
    for nodes in (1, 2):
        label = f"steady quartzlite {nodes} node{'s' if nodes > 1 else ''}"
        found[f"quartzlite_{nodes}_defaults"] = attempt(
            f"{label}, defaults",
            partial(ql.steady, server, f"steady{nodes}d", nodes, jobs, seconds, None))
        found[f"quartzlite_{nodes}"] = attempt(
            f"{label}, capacity {capacity}",
            partial(ql.steady, server, f"steady{nodes}", nodes, jobs, seconds, capacity))
    found["apscheduler"] = attempt("steady APScheduler",
                                   lambda: aps.steady(server, "aps_steady", jobs, seconds))
    return found


def shell(server: Server) -> dict[str, Any]:
    """Every-second shell jobs on 1 node with the defaults, beside the fork/exec floor."""
    jobs, seconds = plan("shell_jobs"), plan("shell_s")
    return {
        "floor": attempt("fork/exec floor", ql.spawn_floor),
        "quartzlite_1_defaults": attempt(
            f"shell quartzlite 1 node, {jobs} jobs, defaults",
            lambda: ql.shell(server, "shell1d", 1, jobs, seconds)),
    }


def failover(server: Server) -> dict[str, Any]:
    args = (plan("failover_jobs"), plan("failover_kill_at"), plan("failover_s"),
            plan("failover_capacity"))
    return {
        mode: attempt(f"failover {mode} settings", partial(ql.failover, server, mode, *args))
        for mode in ("default", "fast")
    }


def idle(server: Server) -> dict[str, Any]:
    small, large, seconds = plan("idle_small"), plan("idle_large"), plan("idle_s")
    found: dict[str, Any] = {"creation": {}}
    clusters: dict[str, ql.Cluster] = {}

    def create(key: str, make: Callable[[], tuple[ql.Cluster, dict[str, Any]]]) -> dict[str, Any]:
        cluster, result = make()
        clusters[key] = cluster
        return result

    try:
        found["creation"]["library"] = attempt(
            f"create {large:,} jobs (library)",
            lambda: create("large", lambda: ql.create_library(server, "idle_large", large)))
        found["creation"]["cli"] = attempt(
            f"create {plan('cli_import'):,} jobs (CLI import)",
            lambda: create("cli", lambda: ql.create_cli(server, "import", plan("cli_import"))))
        if "cli" in clusters:
            clusters.pop("cli").drop()
        found["creation"]["cli_small"] = attempt(
            f"create {small:,} jobs (CLI import)",
            lambda: create("small", lambda: ql.create_cli(server, "idle_small", small)))
        for key in ("small", "large"):
            if key in clusters:
                found[f"quartzlite_{key}"] = attempt(
                    f"idle quartzlite, {key}", partial(ql.idle, server, clusters[key], seconds))
            else:
                found[f"quartzlite_{key}"] = {"error": "its jobs could not be created"}
    finally:
        for cluster in clusters.values():
            cluster.drop()
    for key, n in (("small", small), ("large", large)):
        found[f"apscheduler_{key}"] = attempt(f"idle APScheduler, {n:,} jobs",
                                              partial(aps.idle, server, n, seconds))
    return found


def cost(server: Server) -> dict[str, Any]:
    seconds = plan("cost_s")
    curve: dict[str, Any] = {"quartzlite": {}, "apscheduler": {}}
    for n in plan("cost_ns"):
        curve["quartzlite"][str(n)] = attempt(
            f"cost quartzlite {n} jobs, 2 nodes, defaults",
            partial(ql.steady, server, f"cost{n}", 2, n, seconds, None))
        curve["apscheduler"][str(n)] = attempt(
            f"cost APScheduler {n} jobs", partial(aps.steady, server, f"aps_cost{n}", n, seconds))
    return curve


def ui_pages(server: Server) -> dict[str, Any]:
    """The dashboard's pages on a seeded database (server time of each, and its plans)."""
    jobs, runs = plan("ui_jobs"), plan("ui_runs")
    return attempt(f"dashboard pages, {jobs:,} jobs and {runs:,} runs",
                   partial(ui.measure, server, jobs, runs, ui.WARMUP, plan("ui_timed")))


def galera(server: Server) -> dict[str, Any]:
    """burst and steady, 1 and 2 nodes with the defaults, on a private three-member Galera
    cluster (bench/galera.py), to set beside the single server's ``_defaults`` figures
    (the burst and steady workloads); the single server's settings are stated too."""
    from bench.galera import GaleraServer, server_settings

    log("starting a private 3-member Galera cluster ...")
    try:
        cluster = GaleraServer()
    except Exception as error:  # noqa: BLE001 - reported in the results
        log(f"the Galera cluster did not start: {error!r}")
        return {"error": f"{type(error).__name__}: {error}"}
    jobs, steady_jobs, seconds = plan("burst_jobs"), plan("steady_jobs"), plan("steady_s")
    found: dict[str, Any] = {"measured_at": datetime.now(UTC).replace(microsecond=0).isoformat(),
                             "quick": QUICK, "quartzlite_commit": util.git_head(),
                             "single_server": server_settings(server),
                             "burst": {}, "steady": {}}
    try:
        found["cluster"] = cluster.describe()
        for nodes in (1, 2):
            label = f"quartzlite {nodes} node{'s' if nodes > 1 else ''}, defaults"
            found["burst"][f"quartzlite_{nodes}_defaults"] = attempt(
                f"galera burst {label}", partial(ql.burst, cluster, nodes, jobs, None))
        for nodes in (1, 2):
            label = f"quartzlite {nodes} node{'s' if nodes > 1 else ''}, defaults"
            found["steady"][f"quartzlite_{nodes}_defaults"] = attempt(
                f"galera steady {label}",
                partial(ql.steady, cluster, f"galera_steady{nodes}d", nodes, steady_jobs, seconds,
                        None))
    finally:
        cluster.close()
    return found


RUNNERS: dict[str, Callable[[Server], dict[str, Any]]] = {
    "burst": burst, "steady": steady, "shell": shell, "failover": failover, "idle": idle, "cost": cost,
    "ui": ui_pages, "galera": galera,
}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    parser.add_argument("--only", default=",".join(WORKLOADS),
                        help=f"comma-separated subset of {', '.join(WORKLOADS)}")
    parser.add_argument("--merge", action="store_true",
                        help="replace only these workloads in the existing results.json")
    args = parser.parse_args(argv)
    chosen = [w.strip() for w in args.only.split(",") if w.strip()]
    unknown = sorted(set(chosen) - set(WORKLOADS))
    if unknown:
        parser.error(f"unknown workload(s): {', '.join(unknown)}")

    started = time.monotonic()
    server = Server()
    server.drop_all_bench()
    results: dict[str, Any] = {}
    if args.merge and report.RESULTS.exists():
        results = json.loads(report.RESULTS.read_text())
    results.update({
        "generated_at": datetime.now(UTC).replace(microsecond=0).isoformat(),
        "quick": QUICK,
        "machine": util.machine(server),
        "calibration": {"own_statements": server.calibrate()},
    })
    log(f"server {results['machine']['mysql']}; one status read adds "
        f"{server.own_statements} to Questions; quick={QUICK}")
    workloads = results.setdefault("workloads", {})
    try:
        for name in chosen:
            workloads[name] = RUNNERS[name](server)
            util.dump_json(report.RESULTS, results)  # keep what we have
    finally:
        server.drop_all_bench()
        server.close()
    results["duration_s"] = math.ceil(time.monotonic() - started)
    results["targets"] = report.targets(results)
    util.dump_json(report.RESULTS, results)
    report.DOCS.write_text(report.markdown(results))
    print(report.terminal(results))
    log(f"wrote {report.RESULTS.relative_to(util.ROOT)} and {report.DOCS.relative_to(util.ROOT)} "
        f"in {results['duration_s']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
