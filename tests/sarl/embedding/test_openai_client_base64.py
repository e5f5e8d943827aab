"""OpenAIEmbeddingClient's wire format: base64 vectors, the float fallback, malformed base64.

Against the real local embedding server over loopback HTTP, as in ``test_openai_client.py``.
"""

from __future__ import annotations

import base64
import json
import logging
import re
from collections.abc import Iterator
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from sarl.embedding.base import EmbeddingError, normalize_rows
from sarl.embedding.openai_client import OpenAIEmbeddingClient
from tests.support.embedding_server import (
    EmbeddingServer,
    Fault,
    pseudo_embedding,
    running_embedding_server,
)

DIM = 32
TEXTS = ["b", "a", "b", "step 7: so x = 3", "Let me double-check.", "a"]


@pytest.fixture
def server() -> Iterator[EmbeddingServer]:
    with running_embedding_server(dim=DIM) as srv:
        yield srv


@pytest.fixture
def float_only_server() -> Iterator[EmbeddingServer]:
    """An older server: refuses ``encoding_format: "base64"`` with a 400 naming the field."""
    with running_embedding_server(dim=DIM, encoding_formats=("float",)) as srv:
        yield srv


def make_client(base_url: str, **overrides: Any) -> OpenAIEmbeddingClient:
    settings: dict[str, Any] = {"model": "test-model", "backoff_s": 0.01, "max_backoff_s": 0.02}
    return OpenAIEmbeddingClient(base_url=base_url, **(settings | overrides))


def expected(texts: list[str], dim: int = DIM) -> npt.NDArray[np.float32]:
    return normalize_rows(np.stack([pseudo_embedding(t, DIM)[:dim] for t in texts]))


def b64(values: list[float], dtype: str = "<f4") -> str:
    return base64.b64encode(np.asarray(values, dtype=dtype).tobytes()).decode("ascii")


def embeddings_body(*embeddings: Any, indices: list[int] | None = None) -> str:
    idx = indices if indices is not None else list(range(len(embeddings)))
    return json.dumps(
        {"data": [{"index": i, "embedding": e} for i, e in zip(idx, embeddings, strict=True)]}
    )


# -- base64 by default, same vectors as floats ---------------------------------------------------


def test_asks_for_base64_by_default(server: EmbeddingServer) -> None:
    client = make_client(server.url, batch_size=2)
    client.embed(TEXTS)
    assert client.encoding_format == "base64"
    assert server.stats.base64_requests == server.stats.requests == 2  # 4 distinct texts


@pytest.mark.parametrize("dimensions", [None, 8])
def test_base64_and_float_give_identical_vectors(
    server: EmbeddingServer, dimensions: int | None
) -> None:
    packed = make_client(server.url, dimensions=dimensions).embed(TEXTS)
    floats = make_client(server.url, dimensions=dimensions, encoding_format="float").embed(TEXTS)
    assert server.stats.base64_requests == 1 and server.stats.requests == 2
    np.testing.assert_array_equal(packed, floats)
    np.testing.assert_array_equal(packed, expected(TEXTS, dimensions or DIM))


def test_reply_in_floats_to_a_base64_request_is_accepted(server: EmbeddingServer) -> None:
    # Some servers ignore encoding_format and always send numbers.
    server.set_faults([Fault.raw(embeddings_body([3.0, 4.0], [0.0, 2.0]))])
    client = make_client(server.url)
    vectors = client.embed(["a", "b"])
    np.testing.assert_allclose(vectors, [[0.6, 0.8], [0.0, 1.0]], atol=1e-7)
    assert client.encoding_format == "base64"  # not a refusal: nothing to fall back from


# -- fallback to floats --------------------------------------------------------------------------


def test_refused_base64_falls_back_to_float_and_is_remembered(
    float_only_server: EmbeddingServer, caplog: pytest.LogCaptureFixture
) -> None:
    client = make_client(float_only_server.url, batch_size=1, max_concurrency=1)
    with caplog.at_level(logging.WARNING, logger="sarl.embedding.openai_client"):
        first = client.embed(["a", "b", "c"])
        second = client.embed(["d", "a"])
    np.testing.assert_array_equal(first, expected(["a", "b", "c"]))
    np.testing.assert_array_equal(second, expected(["d", "a"]))
    assert client.encoding_format == "float"
    # One refused request, then floats only: 3 batches, then 2.
    assert float_only_server.stats.requests == 1 + 3 + 2
    stats = client.stats()
    assert (stats.requests, stats.retries, stats.failures) == (6, 0, 0)
    warnings = [r for r in caplog.records if "refused encoding_format 'base64'" in r.message]
    assert len(warnings) == 1
    assert "HTTP 400: 'encoding_format' must be 'float'" in warnings[0].message


_FASTAPI_422 = json.dumps(
    {"detail": [{"loc": ["body", "encoding_format"], "msg": "Input should be 'float'"}]}
)


@pytest.mark.parametrize(
    "refusal",
    [Fault.error(400, "base64 is not supported"), Fault(status=422, body=_FASTAPI_422)],
    ids=["openai-400", "fastapi-422"],
)
def test_refusal_styles_trigger_the_fallback(server: EmbeddingServer, refusal: Fault) -> None:
    server.set_faults([refusal])  # only the first request is refused
    client = make_client(server.url)
    np.testing.assert_array_equal(client.embed(TEXTS), expected(TEXTS))
    assert client.encoding_format == "float"
    assert (server.stats.requests, server.stats.base64_requests) == (2, 0)


def test_refusal_that_floats_do_not_fix_fails_without_switching(server: EmbeddingServer) -> None:
    server.set_faults(lambda i: Fault.error(400, "bad encoding_format or input"))
    client = make_client(server.url)
    message = "HTTP 400: bad encoding_format or input (not retried)"
    with pytest.raises(EmbeddingError, match=re.escape(message)):
        client.embed(["a"])
    assert server.stats.requests == 2  # base64, then the same batch in floats
    assert client.encoding_format == "base64"


def test_unrelated_400_is_not_repeated_in_floats(server: EmbeddingServer) -> None:
    server.set_faults(lambda i: Fault.error(400, "input is too long"))
    client = make_client(server.url)
    with pytest.raises(EmbeddingError, match=re.escape("HTTP 400: input is too long")):
        client.embed(["a"])
    assert server.stats.requests == 1
    assert client.encoding_format == "base64"


# -- malformed base64 ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        (
            embeddings_body(b64([1, 2]), "not base64!"),
            "data[1] (index 1) with an 'embedding' that is not valid base64",
        ),
        (
            embeddings_body(b64([1, 2]), "AAA"),  # padding missing
            "data[1] (index 1) with an 'embedding' that is not valid base64",
        ),
        (
            embeddings_body(b64([1, 2]), "é"),
            "data[1] (index 1) with an 'embedding' that is not valid base64",
        ),
        (
            embeddings_body("AAAA", b64([1, 2]), indices=[1, 0]),  # named by position and index
            "data[0] (index 1) with a base64 'embedding' of 3 bytes, not a whole number of float32",
        ),
        (
            embeddings_body(b64([1, 2]), ""),
            "data[1] (index 1) with a base64 'embedding' of 0 bytes",
        ),
        (embeddings_body(b64([1, 2]), b64([1, 2, 3])), "different dimensions"),
        (embeddings_body(b64([1, 2]), [1.0, 2.0, 3.0]), "different dimensions"),
        (embeddings_body(b64([1, 2]), b64([1, float("nan")])), "NaN or infinite"),
        (embeddings_body(b64([1, 2]), b64([1, float("inf")])), "NaN or infinite"),
    ],
    ids=[
        "not-base64",
        "bad-padding",
        "non-ascii",
        "partial-float",
        "empty",
        "ragged",
        "ragged-mixed",
        "nan",
        "inf",
    ],
)
def test_malformed_base64_raises_an_error_naming_the_item(
    server: EmbeddingServer, body: str, problem: str
) -> None:
    server.set_faults(lambda i: Fault.raw(body))
    client = make_client(server.url, max_retries=0)
    with pytest.raises(EmbeddingError, match=re.escape(problem)) as info:
        client.embed(["a", "b"])
    assert client.url in str(info.value)


def test_base64_zero_vector_raises_instead_of_returning_zeros(server: EmbeddingServer) -> None:
    server.set_faults([Fault.raw(embeddings_body(b64([1, 2]), b64([0, 0])))])
    with pytest.raises(EmbeddingError, match="row 1 is a zero vector"):
        make_client(server.url).embed(["a", "b"])


def test_base64_is_decoded_as_little_endian_float32(server: EmbeddingServer) -> None:
    server.set_faults([Fault.raw(embeddings_body(b64([3, 4], dtype="<f4")))])
    np.testing.assert_allclose(make_client(server.url).embed(["a"]), [[0.6, 0.8]], atol=1e-7)
