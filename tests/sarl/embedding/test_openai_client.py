"""OpenAIEmbeddingClient against the real local embedding server, over real loopback HTTP."""

from __future__ import annotations

import asyncio
import json
import math
import re
import socket
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from sarl.embedding.base import AsyncEmbedder, EmbeddingError, normalize_rows
from sarl.embedding.openai_client import API_KEY_ENV, OpenAIEmbeddingClient
from tests.support.embedding_server import (
    EmbeddingServer,
    Fault,
    pseudo_embedding,
    running_embedding_server,
)
from tests.support.waiting import wait_until

DIM = 32


@pytest.fixture
def server() -> Iterator[EmbeddingServer]:
    with running_embedding_server(dim=DIM) as srv:
        yield srv


def make_client(base_url: str, **overrides: Any) -> OpenAIEmbeddingClient:
    # Tiny backoffs keep retry tests fast; the retry *count* is what they check.
    settings: dict[str, Any] = {"model": "test-model", "backoff_s": 0.01, "max_backoff_s": 0.02}
    return OpenAIEmbeddingClient(base_url=base_url, **(settings | overrides))


def expected(texts: list[str], dim: int = DIM) -> npt.NDArray[np.float32]:
    return normalize_rows(np.stack([pseudo_embedding(t, DIM)[:dim] for t in texts]))


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def embeddings_body(*embeddings: Any, indices: list[Any] | None = None) -> str:
    idx = indices if indices is not None else list(range(len(embeddings)))
    return json.dumps(
        {"data": [{"index": i, "embedding": e} for i, e in zip(idx, embeddings, strict=True)]}
    )


# -- results -------------------------------------------------------------------------------------


def test_client_satisfies_async_embedder_protocol(server: EmbeddingServer) -> None:
    assert isinstance(make_client(server.url), AsyncEmbedder)


def test_returns_server_vectors_in_input_order_with_duplicates(server: EmbeddingServer) -> None:
    texts = ["b", "a", "b", "c", "a", "a", "step 7: so x = 3"]
    vectors = make_client(server.url, batch_size=2).embed(texts)
    assert vectors.dtype == np.float32
    np.testing.assert_array_equal(vectors, expected(texts))


def test_rows_have_unit_norm(server: EmbeddingServer) -> None:
    vectors = make_client(server.url).embed([f"step {i}" for i in range(20)])
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-6)


def test_reply_order_follows_each_items_index_not_list_order(server: EmbeddingServer) -> None:
    server.set_faults(lambda i: Fault.reversed_order())
    texts = ["first", "second", "third", "fourth"]
    np.testing.assert_array_equal(make_client(server.url).embed(texts), expected(texts))


def test_empty_input_returns_0_by_0_without_requests(server: EmbeddingServer) -> None:
    vectors = make_client(server.url).embed([])
    assert vectors.shape == (0, 0) and vectors.dtype == np.float32
    assert server.stats.requests == 0


def test_single_string_instead_of_list_is_rejected(server: EmbeddingServer) -> None:
    with pytest.raises(TypeError, match="not a single string"):
        make_client(server.url).embed("one step")


def test_dimensions_are_passed_to_the_server(server: EmbeddingServer) -> None:
    texts = ["a", "b", "c"]
    vectors = make_client(server.url, dimensions=8).embed(texts)
    np.testing.assert_array_equal(vectors, expected(texts, dim=8))


# -- de-duplication, batching, concurrency -------------------------------------------------------


def test_sends_each_distinct_text_once(server: EmbeddingServer) -> None:
    texts = ["x", "y", "x", "z", "y", "x", "w", "v", "w", "x", "z", "y"]
    client = make_client(server.url, batch_size=2)
    client.embed(texts)
    assert server.stats.texts == 5
    stats = client.stats()
    assert (stats.texts_in, stats.texts_sent, stats.requests) == (12, 5, 3)


@pytest.mark.parametrize(
    ("n_unique", "batch_size"), [(1, 128), (10, 3), (12, 4), (129, 128), (256, 128)]
)
def test_sends_ceil_unique_over_batch_size_requests(
    server: EmbeddingServer, n_unique: int, batch_size: int
) -> None:
    texts = [f"step {i}" for i in range(n_unique)] * 2  # every text twice
    make_client(server.url, batch_size=batch_size).embed(texts)
    assert server.stats.requests == math.ceil(n_unique / batch_size)
    assert server.stats.texts == n_unique


@pytest.mark.parametrize("max_concurrency", [1, 3])
def test_in_flight_requests_never_exceed_max_concurrency(
    server: EmbeddingServer, max_concurrency: int
) -> None:
    server.set_faults(lambda i: Fault.delay(0.15))  # slow replies so batches overlap
    texts = [f"step {i}" for i in range(2 * max_concurrency)]
    client = make_client(server.url, batch_size=1, max_concurrency=max_concurrency)
    client.embed(texts)
    observed = server.stats.max_in_flight
    assert observed <= max_concurrency
    assert (observed > 1) == (max_concurrency > 1)  # batches really overlap when allowed to


def test_concurrent_calls_on_one_loop_share_the_concurrency_bound(server: EmbeddingServer) -> None:
    server.set_faults(lambda i: Fault.delay(0.1))
    client = make_client(server.url, batch_size=1, max_concurrency=2)

    async def two_calls() -> None:
        await asyncio.gather(
            client.aembed([f"a{i}" for i in range(4)]), client.aembed([f"b{i}" for i in range(4)])
        )

    asyncio.run(two_calls())
    assert server.stats.requests == 8
    assert server.stats.max_in_flight <= 2  # one semaphore per loop, not one per call


# -- sync/async entry points ---------------------------------------------------------------------


def test_aembed_can_be_awaited(server: EmbeddingServer) -> None:
    texts = ["p", "q", "p"]
    vectors = asyncio.run(make_client(server.url).aembed(texts))
    np.testing.assert_array_equal(vectors, expected(texts))


def test_embed_called_inside_a_running_event_loop_works(server: EmbeddingServer) -> None:
    client = make_client(server.url)
    texts = ["p", "q", "p"]

    async def sync_call_from_async_code() -> npt.NDArray[np.float32]:
        return client.embed(texts)

    vectors = asyncio.run(sync_call_from_async_code())  # a deadlock would hang here
    np.testing.assert_array_equal(vectors, expected(texts))


# -- retries and errors --------------------------------------------------------------------------


@pytest.mark.parametrize("status", [503, 429])
def test_retries_transient_status_then_succeeds(server: EmbeddingServer, status: int) -> None:
    server.set_faults([Fault.error(status, retry_after=0), Fault.error(status)])
    client = make_client(server.url)
    texts = ["a", "b"]
    np.testing.assert_array_equal(client.embed(texts), expected(texts))
    assert server.stats.requests == 3
    stats = client.stats()
    assert (stats.requests, stats.retries, stats.failures) == (3, 2, 0)


@pytest.mark.parametrize(
    "fault", [Fault.dropped_connection(), Fault.malformed(), Fault.wrong_count()], ids=repr
)
def test_retries_dropped_connection_or_bad_body_then_succeeds(
    server: EmbeddingServer, fault: Fault
) -> None:
    server.set_faults([fault])
    texts = ["a", "b"]
    np.testing.assert_array_equal(make_client(server.url).embed(texts), expected(texts))
    assert server.stats.requests == 2


def test_persistent_500_raises_naming_url_attempts_and_cause(server: EmbeddingServer) -> None:
    server.set_faults(lambda i: Fault.error(500, "CUDA out of memory"))
    client = make_client(server.url, max_retries=2)
    with pytest.raises(EmbeddingError) as info:
        client.embed(["a"])
    message = str(info.value)
    assert client.url in message
    assert "HTTP 500: CUDA out of memory" in message
    assert "gave up after 3 attempts" in message
    assert server.stats.requests == 3
    assert client.stats().failures == 1


@pytest.mark.parametrize("plain_text", [False, True], ids=["openai-json", "plain-text"])
def test_client_error_fails_at_once_with_server_message(
    server: EmbeddingServer, plain_text: bool
) -> None:
    server.set_faults(lambda i: Fault.error(400, "input is too long", plain_text=plain_text))
    with pytest.raises(EmbeddingError, match=r"HTTP 400: input is too long \(not retried\)"):
        make_client(server.url).embed(["a"])
    assert server.stats.requests == 1


def test_long_server_error_message_is_truncated(server: EmbeddingServer) -> None:
    server.set_faults(lambda i: Fault.error(422, "x" * 5000))
    with pytest.raises(EmbeddingError) as info:
        make_client(server.url).embed(["a"])
    assert "x" * 200 + "..." in str(info.value)
    assert len(str(info.value)) < 500


def test_retry_after_is_capped_at_max_backoff(server: EmbeddingServer) -> None:
    server.set_faults([Fault.error(429, retry_after=60)])
    start = time.monotonic()
    make_client(server.url, max_backoff_s=0.05).embed(["a"])
    assert time.monotonic() - start < 10  # not the server's 60 s
    assert server.stats.requests == 2


def test_slow_server_times_out_after_all_attempts(server: EmbeddingServer) -> None:
    server.set_faults(lambda i: Fault.delay(10.0))
    client = make_client(server.url, timeout_s=0.2, max_retries=1)
    start = time.monotonic()
    with pytest.raises(EmbeddingError, match=r"within timeout_s=0.2 s; gave up after 2 attempts"):
        client.embed(["a"])
    assert time.monotonic() - start < 6  # not 2 x the server's 10 s; slack for a loaded machine
    # The server counts a request when its handler starts, which a loaded machine may delay
    # past the client's 0.2 s: wait for the count (a bound against hanging, not a timing check).
    wait_until(lambda: server.stats.requests >= 2, timeout_s=30)
    assert server.stats.requests == 2


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        ("<html>502 Bad Gateway</html>", "not valid JSON"),
        (Fault.malformed().body, "not valid JSON"),
        ('["not", "an", "object"]', "without a 'data' list"),
        ('{"object": "list"}', "without a 'data' list"),
        (embeddings_body([1.0, 2.0], ["a", "b"]), "non-numeric"),
        (embeddings_body([1.0, 2.0], None), "data[1] without an 'embedding' list"),
        (embeddings_body([1.0, 2.0], {"0": 1.0}), "data[1] without an 'embedding' list"),
        (embeddings_body([1.0, 2.0], [1.0]), "different dimensions"),
        (embeddings_body([], []), "not non-empty lists of numbers"),
        (embeddings_body([1.0, 2.0], [3.0, 4.0], indices=[0, 0]), "index 0 more than once"),
        (embeddings_body([1.0, 2.0], [3.0, 4.0], indices=[0, 2]), "data[1] without a valid"),
        (embeddings_body([1.0, 2.0], [3.0, 4.0], indices=[0, "1"]), "data[1] without a valid"),
        (embeddings_body([1.0, 2.0], [float("nan"), 4.0]), "NaN or infinite"),
    ],
    ids=[
        "html",
        "truncated",
        "json-list",
        "no-data",
        "strings",
        "null",
        "object",
        "ragged",
        "empty-vectors",
        "duplicate-index",
        "index-out-of-range",
        "index-not-int",
        "nan",
    ],
)
def test_bad_200_body_raises_clear_error_instead_of_returning_vectors(
    server: EmbeddingServer, body: str | None, problem: str
) -> None:
    assert body is not None
    server.set_faults(lambda i: Fault.raw(body))
    client = make_client(server.url, max_retries=1)
    with pytest.raises(EmbeddingError, match=re.escape(problem)) as info:
        client.embed(["a", "b"])
    assert client.url in str(info.value)
    assert server.stats.requests == 2  # retried once: a garbled body may be a transient hiccup


@pytest.mark.parametrize(("delta", "returned"), [(-1, 3), (1, 5)])
def test_wrong_embedding_count_raises(server: EmbeddingServer, delta: int, returned: int) -> None:
    server.set_faults(lambda i: Fault.wrong_count(delta))
    client = make_client(server.url, max_retries=0)
    message = f"{client.url} returned {returned} embeddings for 4 inputs; gave up after 1 attempt "
    with pytest.raises(EmbeddingError, match=re.escape(message)):
        client.embed(["a", "b", "c", "d"])


def test_connection_refused_raises_after_retries() -> None:
    client = make_client(f"http://127.0.0.1:{closed_port()}", max_retries=1)
    with pytest.raises(EmbeddingError, match=r"ConnectError.*gave up after 2 attempts") as info:
        client.embed(["a"])
    assert client.url in str(info.value)
    assert client.stats().requests == 2


# -- authentication ------------------------------------------------------------------------------


def test_api_key_is_read_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(API_KEY_ENV, "s3cret")
    with running_embedding_server(dim=DIM, api_key="s3cret") as srv:
        client = make_client(srv.url)
        np.testing.assert_array_equal(client.embed(["a"]), expected(["a"]))
    assert "s3cret" not in repr(client)


def test_wrong_api_key_fails_at_once_with_401(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(API_KEY_ENV, raising=False)
    with running_embedding_server(dim=DIM, api_key="s3cret") as srv:
        with pytest.raises(EmbeddingError, match="HTTP 401: invalid or missing API key"):
            make_client(srv.url, api_key="wrong").embed(["a"])
        assert srv.stats.requests == 1


# -- construction --------------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", ["", "/", "/v1", "/v1/", "/v1/embeddings"])
def test_base_url_variants_reach_v1_embeddings(server: EmbeddingServer, suffix: str) -> None:
    client = make_client(server.url + suffix)
    assert client.url == server.url + "/v1/embeddings"
    np.testing.assert_array_equal(client.embed(["a"]), expected(["a"]))


def test_base_url_path_prefix_is_kept() -> None:
    # KServe's Hugging Face runtime serves the OpenAI routes under /openai/v1.
    client = make_client("http://model.ns.svc:8080/openai/v1")
    assert client.url == "http://model.ns.svc:8080/openai/v1/embeddings"


@pytest.mark.parametrize(
    ("param", "value"),
    [
        ("base_url", ""),
        ("base_url", "localhost:8080"),
        ("base_url", "ftp://example.com"),
        ("base_url", "http://example.com/v1?key=1"),
        ("base_url", "http://example.com:99999"),
        ("model", ""),
        ("model", None),
        ("api_key", ""),
        ("batch_size", 0),
        ("batch_size", True),
        ("batch_size", 1.5),
        ("max_concurrency", 0),
        ("timeout_s", 0),
        ("timeout_s", -1.0),
        ("timeout_s", float("nan")),
        ("timeout_s", float("inf")),
        ("timeout_s", "30"),
        ("max_retries", -1),
        ("backoff_s", -0.5),
        ("max_backoff_s", 0.001),  # below the default backoff_s
        ("dimensions", 0),
        ("encoding_format", "int8"),
        ("encoding_format", None),
    ],
)
def test_invalid_constructor_argument_raises_value_error_naming_it(
    param: str, value: object
) -> None:
    settings: dict[str, Any] = {"base_url": "http://127.0.0.1:8080", "model": "m"}
    settings[param] = value
    with pytest.raises(ValueError, match=rf"^{param} .*got {re.escape(repr(value))}$"):
        OpenAIEmbeddingClient(**settings)
