"""``python -m tests.soak [--seconds N] [--seed S]``: run the soak, print its JSON
summary, exit 1 on any violation (with the seed and the fault timeline)."""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
from pathlib import Path

from tests.soak.run import Soak


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.soak")
    parser.add_argument("--seconds", type=float,
                        default=float(os.environ.get("SOAK_S") or 600))
    parser.add_argument("--seed", type=int,
                        default=int(os.environ.get("SOAK_SEED") or random.randrange(1, 10**6)))
    parser.add_argument("--dir", type=Path, default=None, help="where to keep records and logs")
    parser.add_argument("--report", type=Path, default=None,
                        help="append the summary (one JSON line) to this file")
    args = parser.parse_args(argv)
    print(f"soak: seed {args.seed}, {args.seconds:.0f} s of faults "
          f"(replay: make soak SOAK_S={args.seconds:.0f} SOAK_SEED={args.seed})", flush=True)
    summary = Soak(args.seconds, args.seed, args.dir).run()
    timeline = summary.pop("timeline")
    print(json.dumps(summary, indent=1))
    if args.report is not None:
        with args.report.open("a") as fh:
            fh.write(json.dumps(summary) + "\n")
    if not summary["ok"]:
        print(f"\nSOAK FAILED with seed {args.seed}; fault timeline:", file=sys.stderr)
        for entry in timeline:
            print(f"  {json.dumps(entry)}", file=sys.stderr)
        return 1
    print(f"soak passed: seed {args.seed}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
