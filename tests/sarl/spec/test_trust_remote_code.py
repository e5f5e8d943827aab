"""A served model's ``extra_args`` cannot turn on ``--trust-remote-code`` (issue 36, item 7): the
flag makes vLLM (and KServe's Hugging Face runtime) import Python shipped in the model's
repository, which on a shared cluster is code a tenant chooses, run in a platform pod."""

from __future__ import annotations

from typing import Any

import pytest

from sarl.spec.loader import SpecError, load_experiment


def _exp(serving: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "x"}, "spec": {"serving": serving}}


@pytest.mark.parametrize(
    "args",
    [
        ["--trust-remote-code"],
        ["--trust_remote_code"],
        ["--trust-remote-code=true"],
        ["--trust_remote_code=True"],
        ["--dtype=bfloat16", "--trust-remote-code", "true"],
    ],
)
@pytest.mark.parametrize("model", ["embedding", "judge"])
def test_trust_remote_code_is_refused_naming_the_field(model: str, args: list[str]) -> None:
    with pytest.raises(
        SpecError, match=rf"spec\.serving\.{model}\.extra_args=.*--trust-remote-code runs Python"
    ):
        load_experiment(_exp({model: {"extra_args": args}}))


def test_other_flags_that_mention_it_are_accepted() -> None:
    """Turning it off explicitly is harmless."""
    exp = load_experiment(_exp({"judge": {"extra_args": ["--no-trust-remote-code"]}}))
    assert exp.spec.serving.judge.extra_args == ["--no-trust-remote-code"]
