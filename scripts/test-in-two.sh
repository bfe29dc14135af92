#!/usr/bin/env bash
# `make test`'s pytest run as two pytest processes at once, each in a test database of its
# own (tests/conftest.py): the tests marked `cluster` (real node processes; run one at a
# time, in their usual order, exactly as in a single run) and all the others. The cluster
# tests mostly wait on the database clock (instants, expiries, fences) and leave the CPU
# idle; the others (CPU-bound, about 4 minutes) run meanwhile. They add less load than the
# `stress-ng --cpu 2` of `make stress-test`, under which the suite passes.
#
# The cluster tests' output streams; the others' follows once both are done. Exit status 0
# only when both passed. TEST_SERIAL=1 (make test TEST_SERIAL=1) runs one process instead.
# Arguments (paths, -k ...) go to both processes, e.g. scripts/test-in-two.sh tests/unit
# tests/cluster/test_runtime.py; then a process left with no test counts as passed.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}

if [ "${TEST_SERIAL:-0}" = 1 ]; then
  exec "$PY" -m pytest -q "$@"
fi

rest_log=$(mktemp -t ql-test-rest.XXXXXX)
rest=""
cleanup() {  # on an early exit (Ctrl-C): let the other pytest tear its fixtures down
  if [ -n "$rest" ]; then
    # A Ctrl-C reaches both processes: it may be ending already.
    for _ in $(seq 100); do kill -0 "$rest" 2>/dev/null || break; sleep 0.1; done
    kill -INT "$rest" 2>/dev/null
    wait "$rest" 2>/dev/null
    cat "$rest_log"
  fi
  rm -f "$rest_log"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

began=$(date +%s)
# The other process keeps no pytest cache: the two would overwrite each other's
# lastfailed; the cluster run's is kept.
# (A background job of a script ignores SIGINT; `trap - INT` gives it back, so that a
# Ctrl-C ends it as it ends the foreground one: KeyboardInterrupt, fixtures torn down.)
( trap - INT; exec "$PY" -m pytest -q -m "not cluster" -p no:cacheprovider "$@" ) \
  >"$rest_log" 2>&1 &
rest=$!
echo "== tests marked cluster (the others run meanwhile; their report follows)"
"$PY" -m pytest -q -m cluster "$@"
cluster_status=$?
wait "$rest"
rest_status=$?
rest=""
if [ $# -gt 0 ]; then  # 5: no test collected (the arguments named none of its kind)
  [ "$cluster_status" = 5 ] && cluster_status=0
  [ "$rest_status" = 5 ] && rest_status=0
fi
echo
echo "== the other tests (not marked cluster)"
cat "$rest_log"
echo
echo "== make test: cluster tests exit $cluster_status, the others exit $rest_status;" \
  "$(( $(date +%s) - began )) s in all"
[ "$cluster_status" = 0 ] && [ "$rest_status" = 0 ]
