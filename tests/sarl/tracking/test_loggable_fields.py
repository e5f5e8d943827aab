"""Only allow-listed spec fields reach MLflow (issue 38 item 8, :mod:`sarl.spec.loggable`).

A credential no shape or place rule knows (a random 40-character string) passes validation in a
free-form field: an ``extra_args`` value of the judge, a custom reward's ``note`` setting, the
prompt template, a label. Before the allow-list every one of them reached the run's params and
``spec/experiment.yaml`` (checked by running this file against the sdk before the allow-list:
the free-form and Study tests failed, the value in ``serving.judge.extra_args.1`` and
``spec/study.yaml``; the 37 planted made the run fail at logging params, a custom setting's key
``api%5Fkey`` being no valid param name).
Runs go to the real MLflow server (tests/support/mlflow_server.py) through the tracker a local
run starts (``LocalSession._tracker``, what ``train()`` calls), and everything the run holds —
params, tags, every artifact — is read back over HTTP and searched.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel, ConfigDict

from sarl.rewards.base import Reward, RewardOutput, Sample
from sarl.runner.local import LocalOptions
from sarl.runner.session import LocalSession
from sarl.spec import load_experiment
from sarl.spec.loader import validate_study
from sarl.spec.loggable import NOT_LOGGED, SPEC_FIELDS, loggable_spec, loggable_study
from sarl.spec.secrets import find_secret

EXAMPLES = Path(__file__).parents[3] / "examples"
#: A credential with no known shape: nothing but its place can keep it out of the logs.
SECRET = "Vb7Qm2Kx9Lp4Rt8Wz3Nc6Hj1Fd5Gs0Ya2Ue7Io4Z"
NOTE_REWARD = f"{__name__}:NoteReward"


class _NoteSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    note: str = ""
    scale: float = 1.0


class NoteReward(Reward):
    """A user's reward (named by dotted path) with a free-form string setting."""

    name = "note_reward"
    Settings = _NoteSettings

    def score_groups(self, groups: Sequence[Sequence[Sample]]) -> list[list[RewardOutput]]:
        return [[RewardOutput(0.0) for _ in group] for group in groups]


def planted_document() -> dict[str, Any]:
    """The local example with :data:`SECRET` in four free-form places (each passes validation)."""
    doc: dict[str, Any] = yaml.safe_load((EXAMPLES / "local-ground-truth.yaml").read_text())
    spec = doc["spec"]
    spec["reward"].append(
        {"name": NOTE_REWARD, "weight": 0.0, "settings": {"note": SECRET, "scale": 2.0}}
    )
    spec["serving"] = {"judge": {"extra_args": ["--api-note", SECRET]}}
    spec.setdefault("data", {})["prompt_template"] = "{question} " + SECRET[:20]
    doc["metadata"]["labels"] = {"owner": SECRET[20:]}
    return doc


def _everything_logged(uri: str, run_id: str) -> str:
    """Params, tags and every artifact of a run, read back from MLflow, as one text."""
    from mlflow import MlflowClient

    client = MlflowClient(uri)
    run = client.get_run(run_id)
    texts = [*run.data.params.keys(), *run.data.params.values()]
    texts += [*run.data.tags.keys(), *run.data.tags.values()]
    with tempfile.TemporaryDirectory() as tmp:
        local = Path(client.download_artifacts(run_id, "", tmp))
        texts += [p.read_text("utf-8", "replace") for p in sorted(local.rglob("*")) if p.is_file()]
    return "\n".join(texts)


def test_the_planted_document_passes_validation() -> None:
    """The premise: no rule refuses these values, so only the allow-list keeps them out."""
    assert find_secret(planted_document()) is None
    load_experiment(planted_document())


def test_free_form_fields_never_reach_mlflow(mlflow_server: Any, tmp_path: Path) -> None:
    from mlflow import MlflowClient

    exp = load_experiment(planted_document())
    opts = LocalOptions(workdir=tmp_path)
    session = LocalSession(exp, opts, mlflow_server.url, str(tmp_path / "c"), rewards=[])
    tracker = session._tracker(None)  # what train() calls to start the run and log the spec
    tracker.finish()

    logged = _everything_logged(mlflow_server.url, tracker.run_id)
    for part in (SECRET, SECRET[:20], SECRET[20:]):
        assert part not in logged
    params = MlflowClient(mlflow_server.url).get_run(tracker.run_id).data.params
    # A list or mapping whose keys or items are the user's own words is one placeholder.
    assert params["serving.judge.extra_args"] == NOT_LOGGED
    assert params["reward.2.settings"] == NOT_LOGGED  # a user's model: untyped for sarl
    assert params["data.prompt_template"] == NOT_LOGGED
    # What compare and MLflow's Group by need is still there.
    assert params["reward.0.name"] == "ground_truth" and params["reward.2.name"] == NOTE_REWARD
    assert params["reward.1.settings.clustering"] == "hdbscan"  # a built-in's fixed choice
    assert params["reward.1.settings.workers"] == "1"
    assert float(params["algorithm.learning_rate"]) == exp.spec.algorithm.learning_rate


def test_the_stored_study_keeps_what_the_report_reads(mlflow_server: Any, tmp_path: Path) -> None:
    """The Study's parent run stores ``spec/study.yaml`` without the planted value, and the
    report can still validate it for arm order, reference arm and k."""
    from mlflow import MlflowClient

    from sarl.study.runner import open_parent_run
    from sarl.tracking.tracker import STUDY_SPEC_ARTIFACT

    base = planted_document()["spec"]
    base["tracking"] = {"mlflow_uri": mlflow_server.url}
    doc = {
        "apiVersion": "sarl.dev/v1alpha1",
        "kind": "Study",
        "metadata": {"name": f"loggable-{tmp_path.name[-12:]}".lower().replace("_", "-")},
        "spec": {
            "base": base,
            "arms": [
                {"name": "slow", "override": {"algorithm": {"learning_rate": 1e-6}}},
                {"name": "fast", "override": {"serving": {"judge": {"extra_args": [SECRET]}}}},
            ],
            "seeds": [0, 1],
            "reference": "fast",
        },
    }
    study = validate_study(doc, "study")
    tracker = open_parent_run(study, mlflow_server.url, tmp_path / "spool")
    tracker.finish()

    assert SECRET not in _everything_logged(mlflow_server.url, tracker.run_id)
    client = MlflowClient(mlflow_server.url)
    local = client.download_artifacts(tracker.run_id, STUDY_SPEC_ARTIFACT, str(tmp_path))
    stored = validate_study(yaml.safe_load(Path(local).read_text("utf-8")), "stored")
    assert [a.name for a in stored.spec.arms] == ["slow", "fast"]
    assert stored.spec.reference_arm == "fast" and stored.spec.seeds == [0, 1]
    assert stored.spec.base.evaluation.k == study.spec.base.evaluation.k
    assert stored.spec.arms[0].override == {"algorithm": {"learning_rate": 1e-6}}
    assert stored.spec.arms[1].override == {}


def test_every_allow_listed_path_names_a_field() -> None:
    """The allow-list does not drift from the model: each path matches a leaf of a spec."""
    from sarl.tracking.params import flatten_params

    exp = load_experiment(planted_document())
    leaves = [tuple(k.split(".")) for k in flatten_params(exp.spec.model_dump(mode="json"))]
    for pattern in SPEC_FIELDS:
        # "a.b.*" names the items of a.b, which may be empty (flattened as "a.b": "[]").
        parts = pattern.removesuffix(".*").split(".")
        items = pattern.endswith(".*")
        hit = any(
            (len(leaf) >= len(parts) if items else len(leaf) == len(parts))
            and all(p in ("*", s) for p, s in zip(parts, leaf[: len(parts)], strict=True))
            for leaf in leaves
        )
        assert hit, pattern


@pytest.mark.parametrize(
    ("settings", "logged"),
    [
        ({"clustering": "hdbscan"}, {"clustering": "hdbscan"}),  # a Literal: a fixed choice
        ({"workers": 2}, {"workers": 2}),
        ({"embedder": {"kind": "local"}}, {"embedder": NOT_LOGGED}),  # nested: keys not read
    ],
)
def test_typed_settings_of_a_built_in_reward(settings: dict[str, Any], logged: Any) -> None:
    spec = {"reward": [{"name": "structure", "weight": 1.0, "settings": settings}]}
    assert loggable_spec(spec)["reward"][0]["settings"] == logged


def test_an_arm_override_is_judged_as_a_spec_with_its_own_rewards() -> None:
    reward = [
        {"name": "structure", "settings": {"workers": 2}},
        {"name": NOTE_REWARD, "settings": {"note": SECRET}},
    ]
    override = {"reward": reward, "serving": {"judge": {"extra_args": [SECRET]}}, "k": 1}
    doc = {"kind": "Study", "spec": {"arms": [{"name": "a", "override": override}]}}
    kept = [{"name": "structure", "settings": {"workers": 2}}, {"name": NOTE_REWARD}]
    assert loggable_study(doc)["spec"]["arms"] == [{"name": "a", "override": {"reward": kept}}]


# -- the credentials of item 8 planted again, through everything a local run writes ---------------


class _BagSettings(BaseModel):
    """A user's settings model that takes any key (``extra="allow"``)."""

    model_config = ConfigDict(frozen=True, extra="allow")


class BagReward(Reward):
    """A user's reward whose settings are an untyped bag: anything can be planted in it."""

    name = "bag_reward"
    Settings = _BagSettings

    def score_groups(self, groups: Sequence[Sequence[Sample]]) -> list[list[RewardOutput]]:
        return [[RewardOutput(0.0) for _ in group] for group in groups]


def planted_credentials() -> dict[str, tuple[Any, str]]:
    """name -> (a value or document fragment holding a credential, the part never to be shown):
    the formats of tests/sarl/spec/test_secrets_formats.py (14 shapes, 5 places) and
    test_secrets.py (15), the two look-alike keys, and :data:`SECRET` (no shape): 37."""
    from tests.sarl.spec.test_secrets import SECRETS
    from tests.sarl.spec.test_secrets_formats import PLACES, SHAPES, R

    found: dict[str, tuple[Any, str]] = {f"shape-{k}": v for k, v in SHAPES.items()}
    found.update({f"token-{k}": v for k, v in SECRETS.items()})
    found.update({f"place-{k}": (fragment, R) for k, (fragment, _) in PLACES.items()})
    found["key-mot_de_passe"] = ({"mot_de_passe": R + "fr"}, R + "fr")
    found["key-cyrillic"] = ({"раssword": R + "ru"}, R + "ru")  # р and а are Cyrillic
    found["no-shape"] = (SECRET, SECRET)
    return found


def _smuggled(planted: dict[str, tuple[Any, str]]) -> Any:
    """The local example with every planted value put in past validation (``model_copy``,
    standing in for a rule that misses): strings as judge ``extra_args`` and (those with a
    shape) run tags, every value in an untyped reward's settings."""
    from sarl.spec.experiment import RewardTerm

    exp = load_experiment(yaml.safe_load((EXAMPLES / "local-ground-truth.yaml").read_text()))
    spec = exp.spec
    strings = [v for v, _ in planted.values() if isinstance(v, str)]
    bag = RewardTerm.model_construct(
        name=f"{__name__}:BagReward",
        weight=0.0,
        settings={name: value for name, (value, _) in planted.items()},
    )
    judge = spec.serving.judge.model_copy(update={"extra_args": ["--note", *strings]})
    # tracking.tags are written for MLflow and logged as given, redacted: only shapes there.
    shaped = [s for s in strings if s != SECRET]
    tags = {**spec.tracking.tags, **{f"n{i}": s for i, s in enumerate(shaped)}}
    return exp.model_copy(
        update={
            "spec": spec.model_copy(
                update={
                    "reward": [*spec.reward, bag],
                    "serving": spec.serving.model_copy(update={"judge": judge}),
                    "tracking": spec.tracking.model_copy(update={"tags": tags}),
                }
            )
        }
    )


def test_sarl_run_shows_none_of_the_planted_credentials(mlflow_server: Any, tmp_path: Path) -> None:
    """``sarl run --local`` (a real process) with all 37 planted in one spec: refused, and no
    planted part in its stdout or stderr; nothing reached the MLflow server."""
    import os
    import subprocess
    import sys

    from mlflow import MlflowClient

    planted = planted_credentials()
    doc: dict[str, Any] = yaml.safe_load((EXAMPLES / "local-ground-truth.yaml").read_text())
    doc["metadata"]["name"] = "planted-" + tmp_path.name[-8:].lower().replace("_", "-")
    doc["spec"]["reward"].append(
        {
            "name": f"{__name__}:BagReward",
            "weight": 0.0,
            "settings": {k: v for k, (v, _) in planted.items()},
        }
    )
    strings = [v for v, _ in planted.values() if isinstance(v, str)]
    doc["spec"]["serving"] = {"judge": {"extra_args": ["--note", *strings]}}
    path = tmp_path / "planted.yaml"
    path.write_text(yaml.safe_dump(doc, allow_unicode=True), encoding="utf-8")
    sarl = Path(sys.executable).with_name("sarl")
    proc = subprocess.run(
        [
            str(sarl),
            "run",
            str(path),
            "--local",
            "--tracking-uri",
            mlflow_server.url,
            "--workdir",
            str(tmp_path / "w"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=Path(__file__).parents[3],
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[3])},
    )
    shown = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "Traceback" not in shown
    assert [name for name, (_, part) in planted.items() if part in shown] == []
    client = MlflowClient(mlflow_server.url)
    assert client.get_experiment_by_name(doc["metadata"]["name"]) is None


def test_a_local_run_logs_none_of_the_planted_credentials(
    mlflow_server: Any, tmp_path: Path, capfd: pytest.CaptureFixture[str], caplog: Any
) -> None:
    """All 37 smuggled past validation into a run on the real MLflow server: none in its params,
    tags or artifacts, nor in what the run printed or logged."""
    planted = planted_credentials()
    caplog.set_level("DEBUG")
    opts = LocalOptions(workdir=tmp_path)
    exp = _smuggled(planted)
    session = LocalSession(exp, opts, mlflow_server.url, str(tmp_path / "c"), rewards=[])
    tracker = session._tracker(None)  # what train() calls to start the run and log the spec
    tracker.finish()
    out, err = capfd.readouterr()
    everything = "\n".join(
        [_everything_logged(mlflow_server.url, tracker.run_id), out, err, caplog.text]
    )
    assert "n0" in everything  # the tags were logged (redacted)
    assert [name for name, (_, part) in planted.items() if part in everything] == []
    assert len(planted) == 37
