"""A short soak with a fixed seed (issue 10): faults combined at seeded moments on a
private mariadbd, checked for duplicates, overlaps, unaccounted slots, false starts,
kills recorded as failures, stuck jobs, leftover processes and silent nodes. The long
soak is `make soak` (SOAK_S, SOAK_SEED)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.soak.run import Soak

pytestmark = pytest.mark.cluster

SEED = int(os.environ.get("QUARTZLITE_SOAK_TEST_SEED") or 20261123)
#: Seconds of faults: enough for every kind of fault to strike (CI's `make soak` runs 600).
SOAK_S = 40


@pytest.mark.timeout(600)
def test_a_short_soak_with_a_fixed_seed(tmp_path: Path) -> None:
    summary = Soak(SOAK_S, SEED, tmp_path / "soak").run()
    timeline = summary.pop("timeline")
    print(json.dumps(summary, indent=1))
    assert summary["ok"], (
        f"soak with seed {SEED} found violations: {json.dumps(summary, indent=1)}\n"
        "fault timeline:\n" + "\n".join(json.dumps(e) for e in timeline)
    )
    assert summary["info"]["executions"] > 1000  # it really ran
    assert sum(summary["faults"].get(k, 0) for k in ("sigkill_node", "sigstop_node")) > 0
