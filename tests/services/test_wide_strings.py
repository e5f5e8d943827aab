"""The pre-decode estimate counts a string at its widest character's width (issue 38 item 2).

CPython keeps a string's text at 1, 2 or 4 bytes a character, chosen by its widest character
(PEP 393), so a body of ASCII text with a single emoji decodes to four times its text. The scan
(:mod:`sarl_services.json_scan`) used to count one byte a character: a 32 MiB ASCII body with
one emoji passed it and decoded to a 128 MiB string each, four at once +1 GB although all were
answered 400. Here the decoded size is measured (the decoded strings' ``sys.getsizeof``) and
the estimate must cover it; and a real reward service is sent four such bodies at once.
"""

from __future__ import annotations

import sys

import httpx
import orjson
import pytest

from sarl_services.json_scan import _CHUNK, scan
from sarl_services.testing import ServiceProcess, start_service
from tests.services.test_body_memory import MiB, concurrently, peak_growth_mib

# One character of each width: Latin-1 (1 byte), the BMP (2), above U+FFFF (4), and the same
# emoji written as a JSON surrogate-pair escape in pure ASCII, placed at a chunk boundary too.
WIDE = {
    "latin-1": "é".encode(),
    "bmp": "中".encode(),
    "emoji": "😀".encode(),
    "escaped emoji": b"\\ud83d\\ude00",
}


def _body(text_bytes: int, wide: bytes, at: int) -> bytes:
    ascii_text = b"x" * text_bytes
    return b'{"a":"' + ascii_text[:at] + wide + ascii_text[at:] + b'"}'


@pytest.mark.parametrize("name", list(WIDE))
@pytest.mark.parametrize("at", [0, _CHUNK - 8, _CHUNK - 5, 300_000])
def test_estimate_covers_the_decoded_string(name: str, at: int) -> None:
    raw = _body(600_000, WIDE[name], at)
    decoded = orjson.loads(raw)["a"]
    assert scan(raw, max_depth=32).decode_bytes >= sys.getsizeof(decoded) + len(raw)


def test_ascii_text_is_still_counted_once() -> None:
    raw = _body(600_000, b"y", 0)
    assert scan(raw, max_depth=32).decode_bytes < 3 * len(raw)


_REWARD = ["--embedder", "openai", "--embedding-url", "http://127.0.0.1:9"]
_REWARD += ["--embedding-model", "unused"]


@pytest.mark.slow
def test_reward_service_bounds_bodies_of_ascii_with_one_emoji(tmp_path: object) -> None:
    """Four 32 MiB ASCII bodies with one emoji each, at once: each is refused (400: not a
    request; 413/503: over the budget) and the service's peak stays under 512 MiB over idle
    (the issue's target; +1,030 MiB before)."""
    service: ServiceProcess = start_service("reward", _REWARD)
    try:
        service.wait_until_ready()
        body = _body(32 * MiB - 64, "😀".encode(), 16 * MiB)
        responses: list[httpx.Response] = []
        growth = peak_growth_mib(
            service.process.pid,
            lambda: responses.extend(
                concurrently(service.url + "/v1/rewards/structure", [body] * 4)
            ),
        )
    finally:
        service.stop()
    assert {r.status_code for r in responses} <= {400, 413, 503}
    assert growth < 512, f"reward service peak +{growth:.0f} MiB over idle"
