"""Credentials in shapes the first rules missed (issue 20, item 3): camelCase and joined key
names, values under a secret-named key that are not strings, scheme-less URLs with user info,
secret-named flags, and values echoed by errors raised for another reason. Each is refused by
the real ``sarl validate`` (exit 2) without the value in its output; names of Secrets and
environment variables still pass."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from sarl.cli.main import app
from sarl.spec import SpecError, load_experiment, load_study
from sarl.spec.secrets import REDACTED, find_secret, redact, redact_text

PLANTED = "Zq9xW2vK7planted"
HEADER = "Basic YWxpY2U6WnE5eFcydks3cGxhbnRlZA=="  # base64 of alice:<PLANTED>


def experiment(metadata: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "sarl.dev/v1alpha1",
        "kind": "Experiment",
        "metadata": {"name": "x", **(metadata or {})},
        "spec": {"preset": "local-grpo-arithmetic", **spec},
    }


def labels(**values: Any) -> dict[str, Any]:
    return experiment({"labels": values})


#: (document, what must never be printed) for each shape the issue lists.
REFUSED: dict[str, tuple[dict[str, Any], str]] = {
    "PassWord": (labels(PassWord=PLANTED), PLANTED),
    "passPhrase": (labels(passPhrase=PLANTED), PLANTED),
    "secretValue": (labels(secretValue=PLANTED), PLANTED),
    "password_for_db": (labels(password_for_db=PLANTED), PLANTED),
    "api_keys": (labels(api_keys=PLANTED), PLANTED),
    "db_pass": (labels(db_pass=PLANTED), PLANTED),
    "pwd": (labels(pwd=PLANTED), PLANTED),
    "credentials": (labels(credentials=PLANTED), PLANTED),
    "X-Api-Key": (experiment(tracking={"tags": {"X-Api-Key": PLANTED}}), PLANTED),
    "authorization-basic": (
        experiment(tracking={"tags": {"Authorization": HEADER}}),
        HEADER.split()[1],
    ),
    "basic-under-innocent-key": (
        experiment(tracking={"tags": {"note": HEADER}}),
        HEADER.split()[1],
    ),
    "mapping-under-secret-key": (labels(password={"value": PLANTED}), PLANTED),
    "list-under-secret-key": (experiment(tracking={"tags": {"api_keys": [PLANTED]}}), PLANTED),
    "schemeless-userinfo": (
        experiment(tracking={"mlflow_uri": f"alice:{PLANTED}@mlflow:5000"}),
        PLANTED,
    ),
    "network-path-userinfo": (
        experiment(tracking={"mlflow_uri": f"//user:{PLANTED}@host"}),
        PLANTED,
    ),
    "flag-equals": (
        experiment(serving={"judge": {"extra_args": [f"--api-key={PLANTED}"]}}),
        PLANTED,
    ),
    "flag-then-value": (
        experiment(serving={"judge": {"extra_args": ["--api-key", PLANTED]}}),
        PLANTED,
    ),
    "assignment-in-a-string": (
        experiment(tracking={"tags": {"dsn": f"host=db user=rl password={PLANTED}"}}),
        PLANTED,
    ),
    # Refused for another reason (an unknown field): the message must not echo the value.
    "headers-mapping": (
        experiment(tracking={"headers": {"X-Custom": PLANTED}}),
        PLANTED,
    ),
    "unknown-field-string": (experiment(tracking={"note": PLANTED}), PLANTED),
    "bad-name": (experiment({"name": PLANTED}), PLANTED),
    "secret-name-pasted-token": (
        experiment(resources={"hf_token": {"secret_name": PLANTED}}),
        PLANTED,
    ),
}


def _validate(tmp_path: Path, doc: dict[str, Any] | str) -> tuple[int, str]:
    path = tmp_path / "spec.yaml"
    path.write_text(doc if isinstance(doc, str) else yaml.safe_dump(doc), encoding="utf-8")
    result = CliRunner().invoke(app, ["validate", str(path)])
    return result.exit_code, result.stdout + result.stderr


@pytest.mark.parametrize(("doc", "secret"), REFUSED.values(), ids=REFUSED.keys())
def test_sarl_validate_refuses_and_never_prints_the_value(
    tmp_path: Path, doc: dict[str, Any], secret: str
) -> None:
    code, printed = _validate(tmp_path, doc)
    assert code == 2, printed
    assert secret not in printed
    assert len(printed.strip().splitlines()) == 1  # one line naming the field


def test_a_date_under_a_secret_named_key_is_refused_not_printed(tmp_path: Path) -> None:
    text = yaml.safe_dump(experiment()).replace(
        "metadata:\n", "metadata:\n  password: 2024-01-01\n"
    )
    code, printed = _validate(tmp_path, text)
    assert code == 2
    assert "metadata.password: holds" in printed
    assert "2024" not in printed


def test_the_message_names_the_field(tmp_path: Path) -> None:
    _, printed = _validate(tmp_path, labels(PassWord=PLANTED))
    assert "metadata.labels.PassWord: holds a literal value under a secret-named key" in printed
    _, printed = _validate(tmp_path, experiment(tracking={"headers": {"X-Custom": PLANTED}}))
    assert "spec.tracking.headers: unknown field; known fields: mlflow_uri," in printed


def test_a_study_arm_override_is_checked_too() -> None:
    doc = {
        "apiVersion": "sarl.dev/v1alpha1",
        "kind": "Study",
        "metadata": {"name": "s"},
        "spec": {
            "base": {"preset": "local-grpo-arithmetic"},
            "arms": [{"name": "a", "override": {"tracking": {"tags": {"dbPass": PLANTED}}}}],
            "seeds": [0],
        },
    }
    with pytest.raises(SpecError) as info:
        load_study(doc)
    assert "spec.arms[0].override.tracking.tags.dbPass: holds" in str(info.value)
    assert PLANTED not in str(info.value)


#: Keys that name where a secret is, and words that only look like secret names: accepted.
ALLOWED: list[dict[str, Any]] = [
    experiment(resources={"hf_token": {"secret_name": "hf-token", "key": "HF_TOKEN"}}),
    experiment(storage={"credentials_secret": "s3-creds"}),
    experiment(resources={"image_pull_secrets": ["ghcr-pull"]}),
    experiment(
        tracking={
            "tags": {
                "api_key_env": "OPENAI_API_KEY",
                "token_file": "/var/run/token",
                "secret_name": "hf-token",
                "pass_at_k": "8",
                "auth_url": "https://auth.example.com/login",
                "auth_type": "oauth",
                "owner": "alice@example.com",
                "repo": "git@github.com:org/repo.git",
                "note": "Basic arithmetic, then harder tasks",
                "password": "${DB_PASSWORD}",
                "eos_token": "</s>",
                "answer_key": "answer",
            }
        },
        serving={"judge": {"extra_args": ["--dtype=bfloat16", "--max-num-seqs", "64"]}},
    ),
]


@pytest.mark.parametrize("doc", ALLOWED, ids=range(len(ALLOWED)))
def test_names_of_secrets_and_look_alikes_pass(doc: dict[str, Any]) -> None:
    load_experiment(doc)
    assert find_secret(doc) is None
    assert redact(doc) == doc


def test_redact_removes_the_new_shapes() -> None:
    doc = {
        "PassWord": PLANTED,
        "password": {"value": PLANTED},
        "api_keys": [PLANTED],
        "args": ["--api-key", PLANTED, f"--token={PLANTED}", "--dtype=bf16"],
        "when": {"password": 20240101},
        "hf_token": {"secret_name": "hf", "key": "HF_TOKEN"},
    }
    assert redact(doc) == {
        "PassWord": REDACTED,
        "password": REDACTED,
        "api_keys": [REDACTED],
        "args": ["--api-key", REDACTED, f"--token={REDACTED}", "--dtype=bf16"],
        "when": {"password": REDACTED},
        "hf_token": {"secret_name": "hf", "key": "HF_TOKEN"},
    }
    text = redact_text(f"alice:{PLANTED}@mlflow:5000 //u:{PLANTED}@h Authorization: {HEADER}")
    assert PLANTED not in text and HEADER.split()[1] not in text
    assert "***@mlflow:5000" in text
