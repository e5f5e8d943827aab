"""The scripted chat server itself (``tests.support.chat_server``): wire format, request checks,
script forms."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.support.chat_server import ChatReply, ChatRequest, running_chat_server

BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "temperature": 0}


def test_replies_in_openai_format_and_records_requests() -> None:
    with running_chat_server(["first", ChatReply("second", finish_reason="length")]) as srv:
        url = f"{srv.url}/v1/chat/completions"
        replies = [httpx.post(url, json=BODY).json() for _ in range(3)]
        requests = srv.requests
    assert [r["choices"][0]["message"]["content"] for r in replies[:2]] == ["first", "second"]
    assert replies[1]["choices"][0]["finish_reason"] == "length"
    assert replies[0]["object"] == "chat.completion" and replies[0]["model"] == "m"
    assert "no scripted reply for request 2" in replies[2]["error"]["message"]
    assert [r.index for r in requests] == [0, 1, 2]
    assert requests[0].text == "hi" and requests[0].body["temperature"] == 0


def test_a_callable_script_sees_the_request() -> None:
    def echo(request: ChatRequest) -> str:
        return request.text.upper()

    with running_chat_server(echo) as srv:
        reply = httpx.post(f"{srv.url}/v1/chat/completions", json=BODY).json()
    assert reply["choices"][0]["message"]["content"] == "HI"


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        (b"not json", 400, "not valid JSON"),
        (json.dumps({"messages": BODY["messages"]}).encode(), 400, "'model' is required"),
        (json.dumps({"model": "m", "messages": []}).encode(), 400, "'messages' must be"),
        (json.dumps({"model": "m", "messages": [{"role": "user"}]}).encode(), 400, "'messages'"),
    ],
)
def test_invalid_requests_are_refused_and_not_scripted(
    body: bytes, status: int, message: str
) -> None:
    with running_chat_server(["unused"]) as srv:
        response = httpx.post(f"{srv.url}/v1/chat/completions", content=body)
        assert srv.requests == []
    assert response.status_code == status
    assert message in response.json()["error"]["message"]


def test_routes_auth_and_error_replies() -> None:
    script = [ChatReply.error(429, "slow down", retry_after=2), ChatReply.raw("oops", status=200)]
    with running_chat_server(script, api_key="k") as srv:
        url = f"{srv.url}/v1/chat/completions"
        assert httpx.post(url, json=BODY).status_code == 401
        assert httpx.post(f"{srv.url}/v1/completions", json=BODY).status_code == 404
        assert httpx.get(f"{srv.url}/health").status_code == 200
        headers = {"Authorization": "Bearer k"}
        limited = httpx.post(url, json=BODY, headers=headers)
        raw = httpx.post(url, json=BODY, headers=headers)
    assert limited.status_code == 429 and limited.headers["Retry-After"] == "2"
    assert limited.json()["error"]["message"] == "slow down"
    assert raw.status_code == 200 and raw.text == "oops"


def test_reply_validation() -> None:
    with pytest.raises(ValueError, match="delay_s"):
        ChatReply(delay_s=-1)
    with pytest.raises(ValueError, match="status"):
        ChatReply(status=99)
