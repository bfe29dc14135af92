"""The soak (issue 10): exactly once while faults combine.

``python -m tests.soak --seconds 600 --seed 42`` (``make soak SOAK_S=600 SOAK_SEED=42``)
starts a PRIVATE mariadbd (own datadir, port and socket: it may be killed with kill -9),
three real node processes behind per-node TCP proxies (one with ``--rejoin``, one whose
wall clock is minutes off through faketime) and a supervisor that restarts what exits;
about 80 jobs (every-second shell and Python jobs, long jobs, retrying jobs, killable
jobs, both recovery and misfire policies) plus bursts of one-shot jobs; a seeded nemesis
(SIGKILL/SIGSTOP of nodes and of guards, partitions that refuse or swallow, database
restarts and kill -9 with outages shorter and longer than fence_after); and API writes
racing all of it. Then it heals everything, waits for the cluster to catch up, stops the
nodes and runs the checker (tests/soak/checker.py) over what the job bodies recorded and
what the database says. A violation prints the seed and the fault timeline.
"""
