"""The embedding service's batching changes no vector: requests coalesced into shared forward
passes of the real model (bundled all-MiniLM-L6-v2, in-process) get the rows each request gets
encoded alone, to 1e-5."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from prometheus_client import CollectorRegistry

from sarl.embedding.local import LocalEmbedder
from sarl_services.embedding import EmbeddingModel, EmbeddingSettings
from sarl_services.metrics import EmbeddingMetrics

pytestmark = pytest.mark.slow  # loads the model in-process

# Lengths from 3 to ~120 tokens, so a short text shares passes with much longer ones (padding).
REQUESTS = [
    ["Let me restate the problem.", "So v = 50."],
    ["Multiply both sides by v(v+10) and collect the terms: " * 6, "Wait."],
    ["So v = 50.", "Check: 600/50 - 600/60 = 12 - 10 = 2 hours, as required."] * 3,
    [f"Step {i}: add {i} to the running total, which is now {i * (i + 1) // 2}." for i in range(9)],
    ["Therefore the answer is 50 km/h. " * 12],
]


def test_coalesced_requests_get_the_vectors_of_each_alone(local_embedder: LocalEmbedder) -> None:
    registry = CollectorRegistry()
    settings = EmbeddingSettings(max_batch_size=8, batch_wait_ms=0)
    model = EmbeddingModel(settings, EmbeddingMetrics.create(registry))
    model.load()

    async def main() -> list[np.ndarray]:
        distinct = [list(dict.fromkeys(texts)) for texts in REQUESTS]
        ids = [model._token_ids(texts) for texts in distinct]
        # Submitted in one go, before the model thread takes its first pass: the requests'
        # texts are mixed across passes of up to 8, not encoded one by one.
        tasks = [
            asyncio.create_task(model.batcher.submit(texts, [len(i) for i in of_text], of_text))
            for texts, of_text in zip(distinct, ids, strict=True)
        ]
        rows = await asyncio.gather(*tasks)
        model.batcher.close()
        pairs = zip(rows, distinct, REQUESTS, strict=True)
        return [r[[d.index(t) for t in texts]] for r, d, texts in pairs]

    batched = asyncio.run(main())
    # 16 distinct texts per request, summed; "So v = 50." is in two requests and encoded once:
    # 15 texts in two passes of up to 8, for five requests.
    assert registry.get_sample_value("sarl_embedding_batch_texts_sum") == 15
    assert registry.get_sample_value("sarl_embedding_batch_texts_count") == 2
    for texts_of_request, rows in zip(REQUESTS, batched, strict=True):
        alone = local_embedder.embed(texts_of_request)  # (texts, dim), one request alone
        np.testing.assert_allclose(rows, alone, atol=1e-5)
