"""The job state machine lives in one module (quartzlite/storage/transitions.py): its
edges are the transition table of quartzlite.enums, and nothing else writes a job's
state."""

from __future__ import annotations

import re
from pathlib import Path

from quartzlite.enums import JOB_TRANSITIONS
from quartzlite.storage import transitions

PACKAGE = Path(transitions.__file__).resolve().parents[1]

#: How code sets ql_jobs.state: a values(..., state=JobState.X.value) keyword, a
#: "state": JobState.X.value entry of a values dict, or SQL that SETs it to a literal
#: (after SET, or opening a string of assignments).
WRITES = [
    re.compile(r"(^|[(,])\s*state=JobState\.\w+\.value"),  # a keyword: no spaces
    re.compile(r"""["']state["']\s*:\s*JobState\.\w+\.value"""),
    re.compile(r"""(SET\s+|["']\s*)(t\.)?state\s*=\s*'(idle|prepared|executing)'""", re.I),
]


def writes_state(line: str) -> bool:
    code = line.split("#", 1)[0]
    return any(pattern.search(code) for pattern in WRITES)


def test_the_edges_are_the_transition_table() -> None:
    by_code = {(source, edge.target) for edge in transitions.EDGES for source in edge.sources
               if source is not edge.target}
    table = {(source, target) for source, targets in JOB_TRANSITIONS.items()
             for target in targets}
    assert by_code == table, (
        f"edges the code takes but the table lacks: {sorted(by_code - table)}; "
        f"table edges no code takes: {sorted(table - by_code)}")


def test_every_edge_has_its_statement() -> None:
    for edge in transitions.EDGES:
        assert callable(getattr(transitions, edge.name)), f"no statement for edge {edge.name}"
        assert edge.when, edge.name


def test_nothing_else_writes_a_job_state() -> None:
    offenders = [
        f"{path.relative_to(PACKAGE.parent)}:{number}: {line.strip()}"
        for path in sorted(PACKAGE.rglob("*.py")) if path.name != "transitions.py"
        for number, line in enumerate(path.read_text().splitlines(), 1) if writes_state(line)
    ]
    assert not offenders, "job state written outside storage/transitions.py:\n" + "\n".join(offenders)


def test_the_scan_sees_every_form_of_a_write_and_no_read() -> None:
    writes = ['update(jobs).values(state=JobState.IDLE.value)',
              '        state=JobState.PREPARED.value,  # a keyword on its own line',
              'values = {"state": JobState.PREPARED.value}',
              "constants=\"t.state = 'idle', t.fire_id = NULL\"",
              '"UPDATE ql_jobs SET state = \'idle\' WHERE id = 1"']
    reads = ['jobs.c.state == JobState.IDLE.value', 'state=JobState(row["state"])',
             'state = JobState.IDLE.value  # a local',
             '"DELETE FROM ql_jobs WHERE deleted = 1 AND state = \'idle\'"']
    assert all(writes_state(line) for line in writes)
    assert not any(writes_state(line) for line in reads)
    source = Path(transitions.__file__).read_text().splitlines()
    assert any(writes_state(line) for line in source), "transitions.py itself writes states"
