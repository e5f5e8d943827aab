"""The secret rules take time linear in the text (issue 38, finding 7).

A string such as ``"a:" * n`` made the single-regex rules rescan the rest of the text from
every start position: ``sarl validate`` took 93 s on a 66 KB spec. Each pattern below was
quadratic before (measured on the old module: 16 KB of ``"a:"`` 0.8 s, of ``"--password="``
6.7 s, so 128 KB takes about 50 s and 7 minutes); linear, 128 KB takes about a second. The
deadline is generous (about 15 times the linear time on a loaded machine) and only turns a
quadratic scan into a failure; it measures nothing finer. The redaction of each pattern is
checked as well, so the faster scans find what the old ones found. Checked against the old
module: the ``a:``-like units (``a:``, ``a:!``, ``a://``, ``a:/`` and the assignments) and the
upper-case key fail the deadline at this size; ``a.``, ``a-``, ``eyJ``, ``sk-`` were quadratic
too but took about 5 s here, so they guard against a regression only.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from sarl.spec.secrets import REDACTED, find_secret, is_secret_key, redact_text, secret_kind

SIZE = 128 * 1024
DEADLINE_S = 15.0  # see the module docstring: a quadratic scan takes minutes at SIZE

#: Units that repeat into a quadratic input for the old rules (each found by a scan over
#: hostile units at 2 K and 8 K repetitions: the time grew 9 to 20 times for 4 times the text).
QUADRATIC_UNITS = [
    "a:", "a=", ":a", "--a=", "a.", "a-", "a:!", "a://", "a:/", "password:", "password=",
    "--password=", "password:$a", "password:<a", "eyJaaaaa.", "sk-",
    # the rules added with them (issue 38, finding 8): linear from the start
    "PuTTY-User-Key-File-2:", "123456:A", "hooks.slack.com/services/", "a%5F:", "р:", "--env ",
]  # fmt: skip


def _within_deadline(fn: Callable[[], Any]) -> Any:
    start = time.monotonic()
    result = fn()
    assert time.monotonic() - start < DEADLINE_S, "a quadratic scan (see the module docstring)"
    return result


@pytest.mark.parametrize("unit", QUADRATIC_UNITS)
def test_every_rule_is_linear(unit: str) -> None:
    text = unit * (SIZE // len(unit))
    _within_deadline(lambda: secret_kind(text, "note"))
    _within_deadline(lambda: redact_text(text))
    _within_deadline(lambda: find_secret({"spec": {"tracking": {"tags": {"note": text}}}}))


@pytest.mark.parametrize("unit", ["password:", "password=", "--password="])
def test_a_long_run_of_assignments_is_redacted_whole(unit: str) -> None:
    """Every value in the run is a secret-named assignment's: nothing of it is left."""
    text = unit * (SIZE // len(unit)) + "hunter2hunter2"
    assert secret_kind(text) is not None
    assert "hunter2" not in _within_deadline(lambda: redact_text(text))


def test_a_long_upper_case_key_is_linear() -> None:
    """``_normalise_key`` split ``APIKey`` with ``([A-Z]+)([A-Z][a-z])``: quadratic on a key of
    capitals alone."""
    key = "A" * SIZE
    assert _within_deadline(lambda: is_secret_key(key)) is False
    assert _within_deadline(lambda: is_secret_key(key + "PassWord")) is True


@pytest.mark.parametrize(
    ("text", "redacted"),
    [
        ("see https://alice:pw@host/x", f"see https://{REDACTED}@host/x"),
        ("1.https://alice:pw@host", f"1.https://{REDACTED}@host"),  # a scheme after digits
        ("s3 //alice:pw@host:9000", f"s3 //{REDACTED}@host:9000"),
        ("db alice:p@ss@host:5432", f"db {REDACTED}@host:5432"),
        ("mail alice@example.com", "mail alice@example.com"),
        ("x --api-key=abcdef12 y", f"x --api-key={REDACTED} y"),
        ("-x.-password=abcdef12", f"-x.-password={REDACTED}"),
        ("Authorization: Bearer abcdef12", f"Authorization: {REDACTED}"),
        ("https://h/cb?access_token=abcd1234&x=1", f"https://h/cb?access_token={REDACTED}&x=1"),
        ("password: $HF_TOKEN, pass_at_k=12345", "password: $HF_TOKEN, pass_at_k=12345"),
    ],
)
def test_redaction_finds_what_it_found(text: str, redacted: str) -> None:
    assert redact_text(text) == redacted
