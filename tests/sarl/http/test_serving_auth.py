"""sarl's clients of served models send the tenant's ``SARL_SERVING_API_KEY`` as a Bearer token
to cluster-local services and loopback only, never to a URL elsewhere, and a key of their own
wins (issue 36 item 3). The real HTTP round trip (a keyed reward service calling a keyed
embedding server) is tests/tenancy/test_network.py."""

from __future__ import annotations

import httpx
import pytest

from sarl.embedding.openai_client import OpenAIEmbeddingClient
from sarl.http.serving_auth import serving_api_key
from sarl.rewards.rlkd.chat import ChatClient, ChatEndpointSettings
from sarl.rewards.structured_qa.judge import ChatJudge

KEY = "served-key-" + "s" * 20
SERVED = "http://grpo-judge-predictor.team-a.svc.cluster.local/openai"


@pytest.mark.parametrize(
    ("url", "sent"),
    [
        (SERVED, True),
        ("http://grpo-embedding-predictor.team-a.svc/openai", True),
        ("http://127.0.0.1:8080", True),
        ("http://localhost:8000/v1", True),
        ("https://api.openai.com/v1", False),  # a spec's external API never gets the key
        ("http://svc.attacker.example/v1", False),
        ("http://10.0.0.5:8000", False),
    ],
)
def test_the_key_goes_to_cluster_local_services_only(url: str, sent: bool) -> None:
    assert serving_api_key(url, {"SARL_SERVING_API_KEY": KEY}) == (KEY if sent else None)


def test_no_key_set_sends_nothing() -> None:
    assert serving_api_key(SERVED, {}) is None
    assert serving_api_key(SERVED, {"SARL_SERVING_API_KEY": " "}) is None


def test_chat_client_sends_the_served_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SARL_SERVING_API_KEY", KEY)
    seen: list[str | None] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("Authorization"))
        return httpx.Response(200, json={"choices": [{"message": {"content": "ok"}}]})

    settings = ChatEndpointSettings(url=SERVED, model="judge")
    client = ChatClient(settings, transport=httpx.MockTransport(answer))
    assert client.complete([{"role": "user", "content": "hi"}]) == "ok"
    assert seen == [f"Bearer {KEY}"]
    assert KEY not in repr(client)


def test_embedding_and_judge_clients_use_the_served_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SARL_SERVING_API_KEY", KEY)
    monkeypatch.delenv("SARL_EMBEDDING_API_KEY", raising=False)
    monkeypatch.delenv("SARL_JUDGE_API_KEY", raising=False)
    embedder = OpenAIEmbeddingClient(base_url=SERVED, model="embedding")
    judge = ChatJudge(base_url=SERVED, model="judge")
    external = ChatJudge(base_url="https://api.example.com/v1", model="judge")
    assert embedder._api_key == KEY and judge._api_key == KEY
    assert external._api_key is None
    assert KEY not in repr(embedder) and KEY not in repr(judge)


def test_a_clients_own_key_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SARL_SERVING_API_KEY", KEY)
    monkeypatch.setenv("SARL_JUDGE_API_KEY", "judge-own")
    assert ChatJudge(base_url=SERVED, model="judge")._api_key == "judge-own"
    assert ChatJudge(base_url=SERVED, model="judge", api_key="given")._api_key == "given"
