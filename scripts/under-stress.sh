#!/usr/bin/env bash
# Run `make test` and `make test-faults` ROUNDS times in a row (default 5) while
# stress-ng keeps every core busy, stopping at the first failure. How issue 10's
# "passes on a loaded machine" is shown: `make stress-test ROUNDS=5`.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
stress-ng --cpu "$(nproc)" --timeout 0 --quiet &
stress=$!
trap 'kill $stress 2>/dev/null || true; wait $stress 2>/dev/null || true' EXIT
for i in $(seq 1 "$rounds"); do
  started=$(date +%s)
  echo "== round $i/$rounds: make test + make test-faults, $(nproc) cores kept busy"
  make test
  make test-faults
  echo "== round $i passed in $(( $(date +%s) - started )) s"
done
echo "== $rounds round(s) passed under stress-ng --cpu $(nproc)"
