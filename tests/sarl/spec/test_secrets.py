"""Secrets in specs: credentials anywhere in an Experiment or Study are refused, naming the field
and never echoing the value (library, loader and ``sarl validate``); look-alikes pass; redaction."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError
from typer.testing import CliRunner

from sarl.cli.main import app
from sarl.rewards.registry import RewardConfigError, parse_settings
from sarl.spec import Experiment, ExperimentSpec, SpecError, load_experiment, load_study
from sarl.spec.secrets import REDACTED, find_secret, redact, redact_text
from sarl.tracking.params import flatten_params

PASSWORD = "s3cr3t-Pa55word"
USERINFO_URL = f"http://admin:{PASSWORD}@minio:9000"
AWS_ID = "AKIAIOSFODNN7EXAMPLE"
# Made-up credentials of the real shapes (none of them is valid anywhere).
GITHUB = "ghp_" + "aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3zA5"
HF = "hf_" + "hZEmnoOEYISjraJtbySaKCNnSuYAvukaTt"
OPENAI = "sk-proj-" + "Xy12AbCdEf34GhIjKl56MnOpQr78StUv"
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJzYXJsIn0.c2lnbmF0dXJlLXNpZ25hdHVyZQ"
PEM = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7b4nK2\n-----END RSA PRIVATE KEY-----"
SECRETS: dict[str, tuple[str, str]] = {
    # id: (value put in the spec, the substring that must never be printed)
    "aws-access-key-id": (AWS_ID, AWS_ID),
    "aws-session-key-id": ("ASIAY34FZKBOKMUTVV7A", "ASIAY34FZKBOKMUTVV7A"),
    "private-key": (PEM, "MIIEowIBAAKCAQEA7b4nK2"),
    "github": (GITHUB, GITHUB),
    "github-pat": ("github_pat_11ABCDEFG0aBcDeFgHiJkL_mNoPqRsTuVwXyZ012345", "11ABCDEFG0aBcDeFg"),
    "gitlab": ("glpat-Ab3De5Gh7Jk9Mn1Pq3St", "Ab3De5Gh7Jk9Mn1Pq3St"),
    "huggingface": (HF, HF),
    "openai": (OPENAI, OPENAI),
    "anthropic": ("sk-ant-api03-Ab3De5Gh7Jk9Mn1Pq3StUvWx", "Ab3De5Gh7Jk9Mn1Pq3StUvWx"),
    "slack": ("xoxb-1234567890-Ab3De5Gh7Jk9", "1234567890-Ab3De5Gh7Jk9"),
    "google": ("AIza" + "Sy" + "Ab3De5Gh7Jk9Mn1Pq3StUvWx0Yz2Bc4De", "Ab3De5Gh7Jk9Mn1Pq3St"),
    "jwt": (JWT, "eyJzdWIiOiJzYXJsIn0"),
    "bearer": ("Authorization: Bearer Zm9vYmFyYmF6cXV4MTIzNDU2", "Zm9vYmFyYmF6cXV4MTIzNDU2"),
    "userinfo": (USERINFO_URL, PASSWORD),
    "token-as-user": (f"https://{GITHUB}@github.com/org/repo.git", GITHUB),
}


def experiment(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "sarl.dev/v1alpha1",
        "kind": "Experiment",
        "metadata": {"name": "x"},
        "spec": spec,
    }


def study(base: dict[str, Any], *overrides: dict[str, Any]) -> dict[str, Any]:
    arms = [{"name": f"arm-{i}", "override": o} for i, o in enumerate(overrides)]
    return {
        "apiVersion": "sarl.dev/v1alpha1",
        "kind": "Study",
        "metadata": {"name": "s"},
        "spec": {"base": base, "arms": arms, "seeds": [0]},
    }


def embedder_reward(url: str) -> list[dict[str, Any]]:
    return [
        {
            "name": "structure",
            "settings": {"embedder": {"kind": "openai", "model": "m", "url": url}},
        }
    ]


def chat(url: str) -> dict[str, Any]:
    return {"url": url, "model": "m", "api_key_env": "OPENAI_API_KEY"}


def rlkd_reward(decomposer: str, judge: str = "http://judge:8000") -> list[dict[str, Any]]:
    return [{"name": "rlkd", "settings": {"decomposer": chat(decomposer), "judge": chat(judge)}}]


#: (document, the path the error must name) for a URL with user:password@ in every URL field.
USERINFO_CASES: list[tuple[dict[str, Any], str]] = [
    (experiment(storage={"endpoint_url": USERINFO_URL}), "spec.storage.endpoint_url"),
    (experiment(storage={"checkpoint_uri": USERINFO_URL + "/ckpt"}), "spec.storage.checkpoint_uri"),
    (experiment(tracking={"mlflow_uri": USERINFO_URL}), "spec.tracking.mlflow_uri"),
    (
        experiment(data={"task": "dataset", "dataset": USERINFO_URL + "/d.jsonl"}),
        "spec.data.dataset",
    ),
    (experiment(model={"name": USERINFO_URL + "/model"}), "spec.model.name"),
    (experiment(tracking={"tags": {"source": USERINFO_URL}}), "spec.tracking.tags.source"),
    (experiment(reward=embedder_reward(USERINFO_URL)), "spec.reward[0].settings.embedder.url"),
    (experiment(reward=rlkd_reward(USERINFO_URL)), "spec.reward[0].settings.decomposer.url"),
    (
        experiment(reward=rlkd_reward("http://decomposer:8000", USERINFO_URL)),
        "spec.reward[0].settings.judge.url",
    ),
    (
        experiment(
            reward=[{"name": "structured_qa", "settings": {"judge_client": {"url": USERINFO_URL}}}]
        ),
        "spec.reward[0].settings.judge_client.url",
    ),
    (
        experiment(serving={"judge": {"extra_args": [f"--url={USERINFO_URL}"]}}),
        "spec.serving.judge.extra_args[0]",
    ),
    (
        experiment(storage={"endpoint_url": f"https://{GITHUB}@minio:9000"}),
        "spec.storage.endpoint_url",
    ),
    (study({"storage": {"endpoint_url": USERINFO_URL}}, {}), "spec.base.storage.endpoint_url"),
    (
        study({}, {}, {"reward": embedder_reward(USERINFO_URL)}),
        "spec.arms[1].override.reward[0].settings.embedder.url",
    ),
    (
        study({}, {"tracking": {"mlflow_uri": USERINFO_URL}}),
        "spec.arms[0].override.tracking.mlflow_uri",
    ),
    (
        study({}, {"reward": rlkd_reward("http://decomposer:8000", USERINFO_URL)}),
        "spec.arms[0].override.reward[0].settings.judge.url",
    ),
]


def load(doc: dict[str, Any]) -> object:
    return load_study(doc) if doc["kind"] == "Study" else load_experiment(doc)


@pytest.mark.parametrize(("doc", "path"), USERINFO_CASES, ids=[p for _, p in USERINFO_CASES])
def test_userinfo_in_any_url_field_is_refused_naming_the_field(
    doc: dict[str, Any], path: str
) -> None:
    with pytest.raises(SpecError) as info:
        load(doc)
    message = str(info.value)
    assert message.startswith(f"{path}: holds a URL with credentials"), message
    assert "environment variables" in message and "Secret" in message
    assert PASSWORD not in message and GITHUB not in message


@pytest.mark.parametrize(("value", "secret"), SECRETS.values(), ids=list(SECRETS))
@pytest.mark.parametrize(
    ("place", "path"),
    [
        (lambda v: experiment(tracking={"tags": {"note": v}}), "spec.tracking.tags.note"),
        (
            lambda v: experiment(serving={"embedding": {"extra_args": ["--x", v]}}),
            "spec.serving.embedding.extra_args[1]",
        ),
        (
            lambda v: study({}, {"tracking": {"tags": {"note": v}}}),
            "spec.arms[0].override.tracking.tags.note",
        ),
    ],
    ids=["tag", "extra-arg", "arm-override"],
)
def test_each_secret_shape_is_refused_and_never_echoed(
    place: Any, path: str, value: str, secret: str
) -> None:
    with pytest.raises(SpecError) as info:
        load(place(value))
    message = str(info.value)
    assert message.startswith(f"{path}: holds "), message
    assert secret not in message and value not in message


@pytest.mark.parametrize(
    ("tags", "path"),
    [
        ({"password": "hunter2"}, "spec.tracking.tags.password"),
        ({"api_key": "abc123"}, "spec.tracking.tags.api_key"),
        ({"apiKey": "abc123"}, "spec.tracking.tags.apiKey"),
        ({"HF_TOKEN": "abc123"}, "spec.tracking.tags.HF_TOKEN"),
        ({"aws_secret_access_key": "abc123"}, "spec.tracking.tags.aws_secret_access_key"),
        ({"client-secret": "abc123"}, "spec.tracking.tags.client-secret"),
        ({"mlflow.tracking.token": "abc123"}, "spec.tracking.tags.mlflow.tracking.token"),
        ({"secret": "abc123"}, "spec.tracking.tags.secret"),
    ],
)
def test_literal_under_a_secret_named_key_is_refused(tags: dict[str, str], path: str) -> None:
    with pytest.raises(SpecError) as info:
        load_experiment(experiment(tracking={"tags": tags}))
    message = str(info.value)
    assert message.startswith(f"{path}: holds a literal value under a secret-named key"), message
    assert "abc123" not in message and "hunter2" not in message
    assert "api_key_env" in message  # says what to do instead


def test_secret_key_in_reward_settings_is_refused_before_the_unknown_field_error() -> None:
    # `api_key` is not a setting of the embedder: the extra-field error would print the value.
    reward = embedder_reward("http://embedding:8000")
    reward[0]["settings"]["embedder"]["api_key"] = "abc123"
    with pytest.raises(SpecError) as info:
        load_experiment(experiment(reward=reward))
    assert str(info.value).startswith("spec.reward[0].settings.embedder.api_key: holds")
    assert "abc123" not in str(info.value)


def test_numeric_password_is_refused() -> None:
    found = find_secret({"settings": {"password": 123456}})
    assert found is not None and found.path == "settings.password"


def test_a_secret_used_as_a_key_is_not_put_in_the_path() -> None:
    with pytest.raises(SpecError) as info:
        load_experiment(experiment(tracking={"tags": {HF: "x"}}))
    assert HF not in str(info.value)
    assert str(info.value).startswith("spec.tracking.tags.<a key>: holds a Hugging Face token")


#: Values that look a bit like secrets and must stay allowed.
ALLOWED: list[dict[str, Any]] = [
    experiment(tracking={"tags": {"api_key_env": "OPENAI_API_KEY", "token_file": "/run/token"}}),
    experiment(reward=rlkd_reward("http://decomposer:8000/v1")),
    experiment(storage={"credentials_secret": "minio-creds", "endpoint_url": "http://minio:9000"}),
    experiment(
        storage={"checkpoint_uri": "s3://bucket/prefix"},
        tracking={"mlflow_uri": "http://mlflow:5000"},
    ),
    experiment(
        tracking={
            "tags": {
                "max_tokens": "1024",
                "token_budget": "4096",
                "eos_token": "</s>",
                "stop_token": "<|im_end|>",
                "token": "${HF_TOKEN}",
                "password": "",
                "owner": "alice@example.com",
                "weights": "https://host/models/org@rev",
                "model": "sk-llama-3-8b-instruct-v2-lora",  # sk- but not random-looking
                "hf_model": "hf_causal",
                "commit": "9fceb02d0ae598e95dc970b74767f19372d61af8",
                "run": "AKIA-short",
                "sha": "sha256:" + "a" * 64,
                "note": "Bearer tokens go in SARL_JUDGE_API_KEY",
            }
        }
    ),
    experiment(resources={"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}]}),
    study({"storage": {"credentials_secret": "s3"}}, {"tracking": {"tags": {"api_key_env": "K"}}}),
]


@pytest.mark.parametrize("doc", ALLOWED, ids=range(len(ALLOWED)))
def test_look_alikes_pass(doc: dict[str, Any]) -> None:
    load(doc)
    assert find_secret(doc) is None
    assert redact(doc) == doc  # redacting what validation accepts changes nothing


def test_python_api_refuses_too_without_the_value_in_the_validation_error() -> None:
    with pytest.raises(ValidationError) as info:
        ExperimentSpec.model_validate({"storage": {"endpoint_url": USERINFO_URL}})
    assert PASSWORD not in str(info.value)
    with pytest.raises(ValidationError) as info:
        Experiment.model_validate(experiment(tracking={"tags": {"note": HF}}))
    assert HF not in str(info.value)


def test_other_errors_print_values_redacted() -> None:
    # A reward's own validation error does not show a string that could be a credential (here
    # the scheme is wrong, so the chat client's check fails and words its error with the URL).
    with pytest.raises(RewardConfigError) as info:
        parse_settings("rlkd", {"decomposer": chat(f"ftp://admin:{PASSWORD}@judge")})
    assert PASSWORD not in str(info.value)
    assert "'decomposer.url'=<str>: " in str(info.value)
    assert "got <the value>" in str(info.value)


def test_secret_errors_keep_the_file_label(tmp_path: Path) -> None:
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(experiment(tracking={"mlflow_uri": USERINFO_URL})))
    with pytest.raises(SpecError, match=rf"^{path}: spec.tracking.mlflow_uri: holds"):
        load_experiment(path)


CLI_CASES = [
    experiment(storage={"endpoint_url": f"http://{AWS_ID}:{PASSWORD}@minio:9000"}),
    experiment(reward=embedder_reward(USERINFO_URL)),
    experiment(tracking={"tags": {"hf_token": "abc123xyz"}}),
    study({}, {"reward": rlkd_reward(USERINFO_URL)}),
    study({"tracking": {"tags": {"note": OPENAI}}}, {}),
]


@pytest.mark.parametrize("doc", CLI_CASES, ids=range(len(CLI_CASES)))
def test_sarl_validate_refuses_without_printing_the_secret(
    tmp_path: Path, doc: dict[str, Any]
) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(doc))
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 2, result.output
    printed = result.stdout + result.stderr
    assert "holds" in printed
    for secret in (PASSWORD, AWS_ID, "abc123xyz", OPENAI):
        assert secret not in printed


def test_redact_replaces_each_shape() -> None:
    text = " ".join(v for v, _ in SECRETS.values())
    redacted = redact_text(text)
    for _, secret in SECRETS.values():
        assert secret not in redacted
    assert "http://***@minio:9000" in redacted


def test_redact_keys_and_leaves_without_touching_the_rest() -> None:
    doc = {
        "tags": {"api_key": "abc", "api_key_env": "OPENAI_API_KEY", "n": 3},
        "urls": [USERINFO_URL, "http://minio:9000"],
        "password": 1234,
        "flag": True,
    }
    original = copy.deepcopy(doc)
    assert redact(doc) == {
        "tags": {"api_key": REDACTED, "api_key_env": "OPENAI_API_KEY", "n": 3},
        "urls": ["http://***@minio:9000", "http://minio:9000"],
        "password": REDACTED,
        "flag": True,
    }
    assert doc == original  # a copy


def test_flatten_params_redacts() -> None:
    params = flatten_params({"storage": {"endpoint_url": USERINFO_URL}, "tags": {"token": HF}})
    assert params == {"storage.endpoint_url": "http://***@minio:9000", "tags.token": REDACTED}
