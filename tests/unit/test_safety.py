"""The start-up checks' arithmetic: Galera's durations, the stall a member's death
causes, and the clock tolerance the fencing rule leaves (the checks against a real
Galera member: tests/galera)."""

from __future__ import annotations

import pytest

from quartzlite.storage.safety import (
    DEFAULT_SUSPECT_S,
    VIEW_INSTALL_S,
    Timing,
    _iso_duration_s,
    clock_tolerance_s,
    longest_stall_s,
)


@pytest.mark.parametrize(("text", "seconds"), [
    ("PT5S", 5.0), ("PT0.5S", 0.5), ("PT1M30S", 90.0), ("PT1H", 3600.0), ("P1D", 86400.0),
    ("nonsense", DEFAULT_SUSPECT_S),
])
def test_galera_durations(text: str, seconds: float) -> None:
    assert _iso_duration_s(text) == seconds


def test_the_stall_follows_evs_suspect_timeout() -> None:
    options = "base_port = 4567; evs.inactive_timeout = PT15S; evs.suspect_timeout = PT2S; gcache.size = 128M"
    assert longest_stall_s(options) == 2.0 + VIEW_INSTALL_S
    assert longest_stall_s("gcache.size = 128M") == DEFAULT_SUSPECT_S + VIEW_INSTALL_S


def test_clock_tolerance_is_a_quarter_of_the_fencing_margin() -> None:
    assert clock_tolerance_s(Timing(heartbeat_interval_s=1, fence_after_s=5, session_timeout_s=7)) == 0.25
    assert clock_tolerance_s(Timing(heartbeat_interval_s=1, fence_after_s=5, session_timeout_s=5)) == 0.0


def test_a_member_cut_off_mid_statement_counts_as_1047() -> None:
    """1180 from a Galera member leaving the primary component is retried elsewhere
    like 1047; any other 1180 keeps its number (not retried)."""
    import pymysql

    from quartzlite.storage.engine import CONNECTION_CODES, RETRYABLE_CODES, error_code

    cut = pymysql.err.OperationalError(
        1180, "Error while appending streaming replication fragment(provider status: "
        "Not connected to Primary Component)")
    assert error_code(cut) == 1047
    assert 1047 in RETRYABLE_CODES
    assert 1047 in CONNECTION_CODES
    other = pymysql.err.OperationalError(1180, "Got error 28 during COMMIT")
    assert error_code(other) == 1180
    assert 1180 not in RETRYABLE_CODES
