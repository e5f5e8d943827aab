"""A pod with a Ray token turns on Ray's token authentication for every Ray process it starts.

Pure: :func:`sarl_jobs.cluster.ray_auth_env` from a pod's environment. That Ray 2.60 then refuses
a client without the token is tested with a real ``ray start --head`` in
``test_ray_token_auth.py`` (``.venv-verl``).
"""

from __future__ import annotations

import pytest

from sarl_jobs.cluster import ray_auth_env


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({"RAY_AUTH_TOKEN": "t" * 32}, {"RAY_AUTH_MODE": "token"}),  # a tenant's pod
        ({}, {}),  # no tenants: Ray as before
        ({"RAY_AUTH_TOKEN": "  "}, {}),  # an empty key in the Secret is no token
        ({"RAY_AUTH_TOKEN": "t" * 32, "RAY_AUTH_MODE": "token"}, {}),  # already set: kept
        ({"RAY_AUTH_TOKEN": "t" * 32, "RAY_AUTH_MODE": "disabled"}, {}),  # explicit choice wins
    ],
)
def test_token_mode_follows_the_token(environ: dict[str, str], expected: dict[str, str]) -> None:
    assert ray_auth_env(environ) == expected


def test_never_carries_the_token_itself() -> None:
    assert "RAY_AUTH_TOKEN" not in ray_auth_env({"RAY_AUTH_TOKEN": "secret-value"})
