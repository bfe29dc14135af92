"""quartzlite's benchmark: the same workloads on quartzlite and on APScheduler 3.11.

Run it with ``make bench`` (or ``python -m bench``); ``BENCH_QUICK=1`` shrinks the
durations for iteration. Results go to ``bench/results.json`` and
``docs/benchmarks.md`` (rendered by :mod:`bench.report`).

Modules:

* :mod:`bench.jobs` - the job bodies (in-process callables recording planned/actual).
* :mod:`bench.util` - databases, server status counters, node processes, CPU, stats.
* :mod:`bench.ql` - the quartzlite workloads (real ``quartzlite node`` processes).
* :mod:`bench.aps` and :mod:`bench.aps_runner` - the APScheduler workloads (one
  BackgroundScheduler process with a SQLAlchemyJobStore on the same server).
* :mod:`bench.report` - the table, the targets, and the markdown page.
* :mod:`bench.probe` - a node launcher that counts statements per thread and
  statement, for profiling (not used by the measured runs).
"""
