"""What leaves through logs and the audit trail: control characters escaped, secret
shapes masked, ordinary text left alone."""

from __future__ import annotations

import logging

import pytest

from quartzlite.redact import SafeFormatter, bounded, escape_controls, redact, redact_value


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("curl -u deploy:hunter2 https://x", "curl -u deploy:*** https://x"),
        ("curl --user=deploy:hunter2 x", "curl --user=deploy:*** x"),
        ("git clone https://bob:s3cret@example.com/r.git", "git clone https://bob:***@example.com/r.git"),
        ("curl -H 'Authorization: Bearer abc.def'", "curl -H 'Authorization: Bearer ***'"),
        ("curl -H 'X-Api-Key: zzz'", "curl -H 'X-Api-Key: ***'"),
        ("PGPASSWORD=x psql; password=p4ss&user=a", "PGPASSWORD=x psql; password=***&user=a"),
        ("export API_KEY=abcd; run", "export API_KEY=***; run"),
        ("tool --password hunter2 --token=t0k", "tool --password *** --token=***"),
        ("mysqldump -u root -psecret db", "mysqldump -u root -p*** db"),
        ('{"token": "abc"}', '{"token": "***"}'),
        # ordinary text is kept
        ("mkdir -p /tmp/x && gcc -pipe a.c", "mkdir -p /tmp/x && gcc -pipe a.c"),
        ("print token count; my-token=1", "print token count; my-token=1"),
        ("https://example.com/a@b", "https://example.com/a@b"),
    ],
)
def test_secret_shapes_are_masked_and_nothing_else(text: str, expected: str) -> None:
    assert redact(text) == expected


def test_secret_named_keys_are_masked_in_json_values() -> None:
    value = {"password": "x", "nested": [{"api_key": "k", "cmd": "curl -u a:b x"}], "n": 1}
    assert redact_value(value) == {
        "password": "***", "nested": [{"api_key": "***", "cmd": "curl -u a:*** x"}], "n": 1,
    }


def test_control_characters_are_escaped_visibly() -> None:
    assert escape_controls("a\r\nb\x1b[31m\x00\u2028") == "a\\r\\nb\\x1b[31m\\x00\\u2028"
    assert escape_controls("plain é ✓") == "plain é ✓"


def test_the_log_formatter_keeps_one_record_on_one_line() -> None:
    formatter = SafeFormatter("%(levelname)s %(message)s")
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "GET %s", ("/a\r\nINFO forged",), None)
    assert formatter.format(record) == "INFO GET /a\\r\\nINFO forged"


def test_bounded_keeps_a_small_value_masked_and_a_large_one_as_its_size_and_head() -> None:
    assert bounded({"password": "x", "cmd": "ok"}, 100) == {"body": {"password": "***", "cmd": "ok"}}
    large = bounded({"cmd": "y" * 500}, 100, key="params")
    assert set(large) == {"params_bytes", "params_head"}
    assert large["params_bytes"] > 100
    assert large["params_head"] == '{"cmd": "' + "y" * 16
