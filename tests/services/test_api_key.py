"""The services' API-key check (:mod:`sarl_services.api_key`): the Bearer header parsed as RFC
6750 says, probes open, the rest closed. Through a real service over HTTP (401 for no, a wrong
or a non-Bearer key; 200 with it; probes open): tests/tenancy/test_network.py."""

from __future__ import annotations

import pytest

from sarl_services.api_key import ApiKeyRequired, api_key_from_env, bearer_token


@pytest.mark.parametrize(
    ("header", "token"),
    [
        (b"Bearer abc", b"abc"),
        (b"bearer abc ", b"abc"),  # the scheme is case-insensitive
        (b"Basic abc", None),
        (b"abc", None),
        (None, None),
        (b"", None),
    ],
)
def test_bearer_token(header: bytes | None, token: bytes | None) -> None:
    assert bearer_token(header) == token


def test_key_from_env() -> None:
    assert api_key_from_env({"SARL_SERVING_API_KEY": " k "}) == "k"
    assert api_key_from_env({}) == ""


def test_an_empty_key_is_refused() -> None:
    async def app(scope: object, receive: object, send: object) -> None: ...

    with pytest.raises(ValueError, match="SARL_SERVING_API_KEY is empty"):
        ApiKeyRequired(app, key="")


@pytest.mark.parametrize(
    ("method", "path", "open_"),
    [
        ("GET", "/v2/health/live", True),
        ("GET", "/v1/models/sarl-reward", True),  # the readiness probe
        ("HEAD", "/v2/models", True),
        ("GET", "/v2/models/sarl-reward/ready", True),
        ("GET", "/metrics", True),
        ("POST", "/v1/models/sarl-reward", False),
        ("GET", "/v1/models", False),  # the OpenAI model list: a service route
        ("POST", "/v1/rewards/structure", False),
        ("POST", "/v1/embeddings", False),
    ],
)
def test_only_probe_routes_are_open(method: str, path: str, open_: bool) -> None:
    async def app(scope: object, receive: object, send: object) -> None: ...

    assert ApiKeyRequired(app, key="k")._is_open(method, path) is open_
