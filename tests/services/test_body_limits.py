"""Bodies are measured before they are decoded: the pre-decode scan, the budget for bodies in
flight, and the depth limit over real HTTP (issue 20, items 1 and 5)."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import orjson
import pytest

from sarl_services.admission import Overloaded
from sarl_services.json_scan import TooDeep, scan
from sarl_services.limits import BodyBudget
from tests.services.conftest import Stack


def _count(value: Any, depth: int = 0) -> tuple[int, int, int, int]:
    """(containers, strings, scalars, deepest) of a decoded value, keys counted as strings."""
    if isinstance(value, dict | list):
        children = [*value.keys(), *value.values()] if isinstance(value, dict) else value
        counts = [_count(child, depth + 1) for child in children]
        return (
            1 + sum(c[0] for c in counts),
            sum(c[1] for c in counts),
            sum(c[2] for c in counts),
            max([depth + 1, *(c[3] for c in counts)]),
        )
    return (0, 1, 0, depth) if isinstance(value, str) else (0, 0, 1, depth)


_CHUNK = 256 * 1024
DOCUMENTS = [
    b"{}",
    b"[]",
    b'"text"',
    b"0",
    b'{"a":[1,2,{"b":"x\\\\\\"y:[{"}],"c":null,"d":[[],{}]}',
    b'{"requests":[{"response":"\\\\","k":"\\"{[,:"}],"settings":{"x":[1.5,true,false]}}',
    # strings and backslash runs across the scan's chunk boundaries
    orjson.dumps({"a": "x" * (_CHUNK - 7), "b": ["\\" * 9, '"', "{[,:]}"]}),
    orjson.dumps(["\\" * (_CHUNK + 3), {"k": '\\"' * _CHUNK}, [0.25] * 1000]),
    orjson.dumps({"requests": [{"step_embeddings": [[0.1, -2.5e-8]] * 3000}] * 40}),
]


@pytest.mark.parametrize("raw", DOCUMENTS, ids=range(len(DOCUMENTS)))
def test_scan_counts_what_decoding_builds(raw: bytes) -> None:
    containers, strings, scalars, deepest = _count(orjson.loads(raw))
    shape = scan(raw, max_depth=64)
    assert (shape.containers, shape.strings, shape.depth) == (containers, strings, deepest)
    # The value count is exact except that an empty container counts one value it lacks.
    assert scalars <= shape.scalars <= scalars + containers
    assert shape.decode_bytes >= len(raw)


def test_scan_refuses_depth_past_the_limit_without_decoding() -> None:
    deep = b"[" * 100_000 + b"]" * 100_000  # orjson itself refuses at 1024; repr fails at ~1000
    with pytest.raises(TooDeep, match="deeper than 32"):
        scan(deep, max_depth=32)
    assert scan(b"[" * 32 + b"]" * 32, max_depth=32).depth == 32


def test_scan_estimates_empty_objects_far_above_their_bytes() -> None:
    """The shape of issue 20: ~3 bytes on the wire, ~72 as a dict plus orjson's parse tree."""
    raw = b'{"requests":[' + b",".join([b"{}"] * 100_000) + b"]}"
    assert scan(raw, max_depth=32).decode_bytes > 25 * len(raw)


def test_body_budget_waits_in_order_then_refuses() -> None:
    async def scenario() -> None:
        budget = BodyBudget(100, wait_s=30.0)
        await budget.acquire(60)
        big = asyncio.ensure_future(budget.acquire(50))  # waits: 60 + 50 > 100
        small = asyncio.ensure_future(budget.acquire(10))  # fits, but arrived after big
        await asyncio.sleep(0)
        assert not big.done() and not small.done()  # first come first served
        budget.release(60)
        await asyncio.gather(big, small)
        assert budget.used == 60
        with pytest.raises(Overloaded, match="needs 101") as refused:
            await budget.acquire(101)  # can never fit: refused without waiting
        assert refused.value.reason == "body_memory"
        assert refused.value.headers["Retry-After"] == "1"
        budget.release(60)
        assert budget.used == 0

    asyncio.run(scenario())


def test_body_budget_refuses_after_the_wait_and_forgets_the_waiter() -> None:
    async def scenario() -> None:
        budget = BodyBudget(100, wait_s=0.01)
        await budget.acquire(100)
        with pytest.raises(Overloaded, match="overloaded"):
            await budget.acquire(1)
        budget.release(100)
        await budget.acquire(100)  # the refused waiter holds nothing
        assert budget.used == 100

    asyncio.run(scenario())


def _deep(levels: int) -> bytes:
    return b"[" * levels + b"1" + b"]" * levels  # json.dumps itself recurses too deep


@pytest.mark.slow
def test_deep_settings_value_is_400_naming_the_limit(stack: Stack) -> None:
    """A 1,000-deep ``settings`` value was a 500 (RecursionError in the error message's
    repr); the body is now refused before decoding."""
    body = b'{"requests":[{"response":"x"}],"settings":{"seed":' + _deep(1000) + b"}}"
    response = httpx.post(f"{stack.reward.url}/v1/rewards/structure", content=body)
    assert response.status_code == 400, response.text
    assert "deeper than 32 levels" in response.json()["error"]["message"]


@pytest.mark.slow
def test_deep_embedding_input_is_400_naming_the_limit(stack: Stack) -> None:
    body = b'{"input":' + _deep(1000) + b"}"
    response = httpx.post(f"{stack.embedding.url}/v1/embeddings", content=body)
    assert response.status_code == 400, response.text
    assert "deeper than 32 levels" in response.json()["error"]["message"]


@pytest.mark.slow
def test_body_that_decodes_too_large_is_413_naming_the_limit(stack: Stack) -> None:
    """Under --max-body-bytes (100,000 here) on the wire, over 6 times that once decoded."""
    body = b'{"requests":[' + b",".join([b"{}"] * 30_000) + b"]}"
    response = httpx.post(f"{stack.reward.url}/v1/rewards/structure", content=body)
    assert response.status_code == 413, response.text
    message = response.json()["error"]["message"]
    assert "decoding it would take" in message and "6 x --max-body-bytes" in message
