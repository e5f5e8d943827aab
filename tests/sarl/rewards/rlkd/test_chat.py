"""The chat client: timeouts, bounded retries, non-retryable errors, counters — over real HTTP."""

from __future__ import annotations

import pytest

from sarl.rewards.rlkd.chat import ChatClient, ChatEndpointSettings, ChatError, chat_url
from tests.support.chat_server import ChatReply, running_chat_server

MESSAGES = [{"role": "user", "content": "hi"}]


def client(url: str, **overrides: object) -> ChatClient:
    settings = {
        "url": url,
        "model": "m",
        "timeout_seconds": 0.3,
        "max_retries": 2,
        "backoff_seconds": 0.0,
        **overrides,
    }
    return ChatClient(ChatEndpointSettings.model_validate(settings))


@pytest.mark.parametrize(
    ("base", "endpoint"),
    [
        ("http://h:1", "http://h:1/v1/chat/completions"),
        ("http://h:1/v1/", "http://h:1/v1/chat/completions"),
        ("https://h/openai/v1/chat/completions", "https://h/openai/v1/chat/completions"),
    ],
)
def test_url_forms(base: str, endpoint: str) -> None:
    assert chat_url(base) == endpoint


def test_bad_url_is_a_settings_error() -> None:
    with pytest.raises(ValueError, match="http"):
        ChatEndpointSettings(url="judge:8000", model="m")


def test_sends_model_messages_temperature_and_max_tokens() -> None:
    with running_chat_server(["hello"]) as server:
        c = client(server.url)
        assert c.complete(MESSAGES, max_tokens=5) == "hello"
        body = server.requests[0].body
        assert body["model"] == "m" and body["max_tokens"] == 5 and body["temperature"] == 0.0
        assert c.stats().requests == 1 and c.stats().retries == 0


def test_transient_failures_are_retried_then_succeed() -> None:
    script = [ChatReply.error(503), ChatReply.raw("{not json"), "ok"]
    with running_chat_server(script) as server:
        c = client(server.url)
        assert c.complete(MESSAGES) == "ok"
        assert c.stats().requests == 3 and c.stats().retries == 2 and c.stats().failures == 0


def test_timeouts_are_bounded_and_counted() -> None:
    with running_chat_server(lambda r: ChatReply.delayed(5.0, "late")) as server:
        c = client(server.url, max_retries=1)
        with pytest.raises(ChatError, match=r"timed out after 0.3 s \(2 attempt"):
            c.complete(MESSAGES)
        stats = c.stats()
        assert (stats.requests, stats.timeouts, stats.failures) == (2, 2, 1)


def test_client_errors_are_not_retried() -> None:
    with running_chat_server([ChatReply.error(400, "bad model")]) as server:
        c = client(server.url)
        with pytest.raises(ChatError, match="HTTP 400: .*bad model"):
            c.complete(MESSAGES)
        assert c.stats().requests == 1 and c.stats().failures == 1


def test_dropped_connection_is_retried() -> None:
    with running_chat_server([ChatReply.dropped(), "ok"]) as server:
        assert client(server.url).complete(MESSAGES) == "ok"


def test_bearer_token_from_the_named_environment_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("JUDGE_TOKEN", "s3cret")
    with running_chat_server(["ok"], api_key="s3cret") as server:
        assert client(server.url, api_key_env="JUDGE_TOKEN").complete(MESSAGES) == "ok"
    monkeypatch.delenv("JUDGE_TOKEN")
    with pytest.raises(ValueError, match="JUDGE_TOKEN"):
        client("http://127.0.0.1:1", api_key_env="JUDGE_TOKEN")
