"""Credential formats and places that passed before (issue 38, finding 8), refused by
``sarl validate`` and redacted from what a local run logs to MLflow.

Each planted credential is refused by the real ``sarl validate`` (in process, as
tests/sarl/spec/test_secrets_property.py runs it) naming the field, and never printed; then all
are smuggled past validation (``model_copy``, standing in for a rule the refusal misses) into
the tags of a local run whose params, tags and ``spec/experiment.yaml`` are read back from a
real MLflow store and grepped. On the old module each of these was accepted (19 of 36 planted
in the red-team round) and reached all three.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from sarl.cli.main import app
from sarl.runner.local import LocalOptions
from sarl.runner.session import LocalSession
from sarl.spec import load_experiment
from sarl.spec.secrets import find_secret, redact
from sarl.tracking.tracker import SPEC_ARTIFACT, default_tracking_uri

EXAMPLES = Path(__file__).parents[3] / "examples"
R = "Qz7xK2mW9rT4vL8n"  # the random part every planted value carries
#: (a credential-shaped string, the part of it that must never be printed)
SHAPES = {
    "azure-account-key": (
        f"DefaultEndpointsProtocol=https;AccountName=acct;AccountKey={R}+ab/cd==;"
        "EndpointSuffix=core.windows.net",
        R,
    ),
    "azure-sas": (f"https://acct.blob.core.windows.net/c/b?sv=2021-08-06&sp=r&sig={R}%3D", R),
    "percent-encoded": (f"https://api.example.com/v1?api%5Fkey={R}", R),
    "google-oauth": (f"GOCSPX-{R}abcdef1234", R),
    "slack-webhook": (f"https://hooks.slack.com/services/T01ABCDEF/B02GHIJKL/{R}", R),
    "telegram": (f"123456789:AA{R}{R}X", R),
    "telegram-url": (f"https://api.telegram.org/bot123456789:AA{R}{R}X/getMe", R),
    "npm": (f"npm_{R}{R}abcd", R),
    "pypi": (f"pypi-AgEIcHlwaS5vcmc{R}{R}", R),
    "sendgrid": (f"SG.{R}ab.{R}{R}cd", R),
    "databricks": ("dapi0123456789abcdef0123456789abcdef", "0123456789abcdef0123456789abcdef"),
    "putty": (
        "PuTTY-User-Key-File-3: ssh-ed25519\nEncryption: none\nComment: k\nPublic-Lines: 1\n"
        f"AAAAC3NzaC1lZDI1NTE5\nPrivate-Lines: 1\n{R}\nPrivate-MAC: 0a1b2c",
        R,
    ),
    "french-key-in-a-string": (f"mot_de_passe={R}", R),
    "cyrillic-key-in-a-string": (f"раssword: {R}", R),  # р and а are Cyrillic
}
#: (where, a document fragment planting a secret by its place, the secret)
PLACES = {
    "env-entry-in-any-list": (
        {"tolerations": [{"name": "OPENAI_API_KEY", "value": R}]},
        "tolerations[0].value",
    ),
    "env-flag-in-extra-args": ({"extra_args": ["--env", "HF_TOKEN", R]}, "extra_args[2]"),
    "french-key": ({"mot_de_passe": R}, "mot_de_passe"),
    "cyrillic-key": ({"раssword": R}, "раssword"),
    "percent-encoded-key": ({"api%5Fkey": R}, "api%5Fkey"),
}
#: Look-alikes that are not credentials and must still pass.
INNOCENT = [
    "SG.small.words",
    "pypi-simple-index",
    "npm_modules",
    "dapi is a word",
    "12345:short",
    "hooks.slack.com/help",
    {"env": [{"name": "LOG_LEVEL", "value": "debug"}]},
    {"extra_args": ["--env", "LOG_LEVEL", "debug", "--dtype=bfloat16"]},
    {"passage": "a text", "parole": "x", "слово": "y"},
    "signature: a text",
]


def _validate(tmp_path: Path, doc: dict[str, Any]) -> Any:
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(doc, allow_unicode=True), encoding="utf-8")
    return CliRunner().invoke(app, ["validate", str(path)])


def _example() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((EXAMPLES / "local-ground-truth.yaml").read_text())
    return doc


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_sarl_validate_refuses_the_shape(tmp_path: Path, name: str) -> None:
    value, secret = SHAPES[name]
    doc = _example()
    doc["spec"]["tracking"] = {"tags": {"note": value}}
    result = _validate(tmp_path, doc)
    assert result.exit_code == 2, result.output
    assert "spec.tracking.tags.note" in result.output and secret not in result.output


@pytest.mark.parametrize("name", sorted(PLACES))
def test_a_secret_in_a_known_place_is_found(name: str) -> None:
    fragment, path = PLACES[name]
    found = find_secret(fragment)
    assert found is not None and found.path == path
    assert R not in str(redact(fragment))


@pytest.mark.parametrize("name", ["env-entry-in-any-list", "env-flag-in-extra-args"])
def test_sarl_validate_refuses_the_place(tmp_path: Path, name: str) -> None:
    fragment, path = PLACES[name]
    doc = _example()
    doc["spec"]["serving"] = {"policy": fragment}
    result = _validate(tmp_path, doc)
    assert result.exit_code == 2 and f"spec.serving.policy.{path}" in result.output, result.output
    assert R not in result.output


@pytest.mark.parametrize("value", INNOCENT, ids=str)
def test_look_alikes_pass(value: Any) -> None:
    assert find_secret({"note": value} if isinstance(value, str) else value) is None


def test_a_local_run_logs_none_of_them() -> None:
    """Smuggled past validation into the run's tags: the params, tags and the spec artifact in
    a real MLflow store hold no planted secret."""
    from mlflow import MlflowClient

    base = load_experiment(EXAMPLES / "local-ground-truth.yaml")
    spec = base.spec
    tags = {**spec.tracking.tags, **{f"note-{k}": v for k, (v, _) in SHAPES.items()}}
    tags.update({"mot_de_passe": R + "fr", "раssword": R + "ru"})
    tracking = spec.tracking.model_copy(update={"tags": tags})
    exp = base.model_copy(update={"spec": spec.model_copy(update={"tracking": tracking})})
    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp)
        uri = default_tracking_uri(store)
        session = LocalSession(exp, LocalOptions(workdir=store), uri, str(store / "c"), rewards=[])
        tracker = session._tracker(None)  # what train() calls to start the run and log the spec
        tracker.finish()
        client = MlflowClient(uri)
        run = client.get_run(tracker.run_id)
        artifact = Path(client.download_artifacts(tracker.run_id, SPEC_ARTIFACT, str(store)))
        logged = "\n".join(
            [
                *run.data.params.keys(),
                *run.data.params.values(),
                *run.data.tags.keys(),
                *run.data.tags.values(),
                artifact.read_text(encoding="utf-8"),
            ]
        )
    assert "note-putty" in logged  # the tags were logged, redacted
    found = [name for name, (_, secret) in SHAPES.items() if secret in logged]
    assert found == [] and R not in logged
