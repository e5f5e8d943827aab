"""A tiny Study end to end on CPU: 2 arms x 2 seeds x 2 steps of real TRL training.

Real parts only: TRL's GRPO trainer on the warm-started tiny Qwen3, the MLflow client on a
SQLite store, the local checkpoint store, the report read back from MLflow.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from sarl.spec.loader import load_study
from sarl.spec.study import TAG_ARM, TAG_PARENT, TAG_SEED
from sarl.study.runner import StudyOptions, run_study

pytest.importorskip("trl")
mlflow = pytest.importorskip("mlflow")

pytestmark = pytest.mark.slow


def tiny_study(name: str = "tiny", **spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "preset": "local-grpo-arithmetic",
        "model": {"warm_start": {"steps": 30}},
        "data": {"train_size": 8, "eval_size": 3, "difficulty": 1},
        "algorithm": {
            "rollouts_per_prompt": 2,
            "train_batch_size": 2,
            "mini_batch_size": 2,
            "max_response_length": 40,
            "max_steps": 2,
            "learning_rate": 1e-3,
        },
        "evaluation": {"k": 2, "every_n_steps": 2, "max_problems": 3},
        "tracking": {"log_maps_every_n_steps": 100},
        "storage": {"every_n_steps": 1},
        "reward": [{"name": "ground_truth"}],
    }
    doc: dict[str, Any] = {
        "apiVersion": "sarl.dev/v1alpha1",
        "kind": "Study",
        "metadata": {"name": name},
        "spec": {
            "base": base,
            "arms": [
                {"name": "ground-truth"},
                {
                    "name": "structure",
                    "override": {
                        "reward": [
                            {
                                "name": "structure",
                                "settings": {"embedder": {"kind": "local"}, "workers": 1},
                            },
                            {"name": "ground_truth", "weight": 0.0},
                        ]
                    },
                },
            ],
            "seeds": [0, 1],
        },
    }
    doc["spec"].update(spec)
    return doc


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path, StudyOptions]:
    root = tmp_path_factory.mktemp("study")
    opts = StudyOptions(
        workdir=root / ".sarl",
        tracking_uri=f"sqlite:///{root / 'mlflow.db'}",
        progress=False,
        out_dir=root / "out",
        jobs=2,  # the parallel path: two worker processes
    )
    # Run from a directory that is not the workdir's parent, as a notebook kernel does.
    elsewhere = root / "cwd"
    elsewhere.mkdir()
    before = Path.cwd()
    os.chdir(elsewhere)
    try:
        return run_study(load_study(tiny_study()), opts), root, opts
    finally:
        os.chdir(before)


def test_nothing_is_written_under_the_current_directory(finished: Any) -> None:
    """The parent run's tracking spool went to ``./.sarl/spool`` before: a stray ``.sarl``
    that the next notebook in that directory took for its workdir, splitting the store."""
    result, root, opts = finished
    assert list((root / "cwd").iterdir()) == []
    spool = opts.workdir / "studies" / "tiny" / "tracking"
    assert [p.name for p in spool.iterdir()] == [result.parent_run_id]


def test_every_arm_and_seed_nested_under_one_parent(finished: Any) -> None:
    result, _, opts = finished
    assert [o.status for o in result.outcomes] == ["finished"] * 4
    client = mlflow.MlflowClient(opts.tracking_uri)
    parent = client.get_run(result.parent_run_id)
    assert parent.info.status == "FINISHED"
    children = client.search_runs(
        [parent.info.experiment_id], f"tags.`{TAG_PARENT}` = '{result.parent_run_id}'"
    )
    pairs = sorted((r.data.tags[TAG_ARM], r.data.tags[TAG_SEED]) for r in children)
    assert pairs == [
        ("ground-truth", "0"),
        ("ground-truth", "1"),
        ("structure", "0"),
        ("structure", "1"),
    ]
    assert {r.info.status for r in children} == {"FINISHED"}
    # Held-out accuracy is measured before any RL update (step 0) and at the end.
    steps = [
        m.step for m in client.get_metric_history(children[0].info.run_id, "eval/heldout/avg_at_2")
    ]
    assert steps == [0, 2]
    artifacts = {a.path for a in client.list_artifacts(result.parent_run_id, "report")}
    assert {"report/summary.json", "report/report.md", "report/curves.png"} <= artifacts


def test_mlflow_shows_a_model_training_study_with_its_arms(finished: Any) -> None:
    result, _, opts = finished
    client = mlflow.MlflowClient(opts.tracking_uri)
    parent = client.get_run(result.parent_run_id)
    experiment = client.get_experiment(parent.info.experiment_id)
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"
    about = experiment.tags["mlflow.note.content"]
    assert about.startswith("**See the arms:** Group by → `arm`")
    assert "sarl Study 'tiny': 2 arms x 2 seeds" in about
    assert parent.data.tags["mlflow.note.content"].startswith("sarl Study 'tiny'")
    for outcome in result.outcomes:
        run = client.get_run(outcome.run_id)
        assert {k: run.data.params[k] for k in ("arm", "seed")} == {
            "arm": outcome.arm,
            "seed": str(outcome.seed),
        }
        note = run.data.tags["mlflow.note.content"]
        assert note.startswith(f"Arm **{outcome.arm}**, seed {outcome.seed} of Study 'tiny'.")


def test_summary_json_keys(finished: Any) -> None:
    result, _, _ = finished
    summary = json.loads((result.out_dir / "summary.json").read_text())
    assert set(summary["arms"]) == {"ground-truth", "structure"}
    for arm in summary["arms"].values():
        assert set(arm["runs"]) == {"0", "1"}
        for run in arm["runs"].values():
            assert {
                "eval_accuracy_start",
                "eval_accuracy_end",
                "sr_start",
                "sr_end",
                "length_start",
                "length_end",
                "mlflow_run_id",
            } <= set(run)
    assert (result.out_dir / "curves.png").stat().st_size > 10_000
    assert "ground-truth" in (result.out_dir / "report.md").read_text()
    assert set(result.tables()) >= {"runs", "arms"}


def test_rerun_skips_finished_runs(finished: Any) -> None:
    result, _, opts = finished
    again = run_study(load_study(tiny_study()), opts)
    assert again.parent_run_id == result.parent_run_id
    assert [o.status for o in again.outcomes] == ["skipped"] * 4
    assert [o.run_id for o in again.outcomes] == [o.run_id for o in result.outcomes]


def test_changed_study_gets_a_new_parent(finished: Any) -> None:
    result, _, opts = finished
    changed = run_study(load_study(tiny_study(seeds=[0], arms=[{"name": "ground-truth"}])), opts)
    assert changed.parent_run_id != result.parent_run_id
    assert [o.status for o in changed.outcomes] == ["finished"]


def test_interrupted_run_resumes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run killed after its first checkpoint continues from it in the same MLflow run."""
    from sarl.runner import callbacks

    opts = StudyOptions(
        workdir=tmp_path / ".sarl",
        tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}",
        progress=False,
        out_dir=tmp_path / "out",
    )
    doc = tiny_study("crash", seeds=[0], arms=[{"name": "ground-truth"}])
    original = callbacks.CheckpointCallback.on_save

    def crash_after_first_save(self: Any, args: Any, state: Any, control: Any, **kw: Any) -> None:
        original(self, args, state, control, **kw)
        if state.global_step == 1:
            raise RuntimeError("killed")

    monkeypatch.setattr(callbacks.CheckpointCallback, "on_save", crash_after_first_save)
    first = run_study(load_study(doc), opts)
    assert [o.status for o in first.outcomes] == ["failed"]
    assert "killed" in (first.failed[0].error or "")
    assert first.report is None
    monkeypatch.setattr(callbacks.CheckpointCallback, "on_save", original)
    second = run_study(load_study(doc), opts)
    assert second.parent_run_id == first.parent_run_id
    assert [o.status for o in second.outcomes] == ["resumed"]
    client = mlflow.MlflowClient(opts.tracking_uri)
    run_id = second.outcomes[0].run_id
    assert client.get_run(run_id).info.status == "FINISHED"
    assert client.get_run(second.parent_run_id).info.status == "FINISHED"


def test_client_local_study_passes_options(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """``sarl.Client.local().study`` loads the document and hands the runner its options."""
    import sarl
    from sarl.study import runner

    seen: dict[str, Any] = {}

    def fake_run_study(study: Any, opts: StudyOptions) -> str:
        seen.update(study=study, opts=opts)
        return "result"

    monkeypatch.setattr(runner, "run_study", fake_run_study)
    client = sarl.Client.local(workdir=tmp_path, tracking_uri="sqlite:///x.db", progress=False)
    assert client.study(tiny_study(parallelism=2), out_dir=tmp_path / "o") == "result"
    assert seen["study"].name == "tiny"
    opts = seen["opts"]
    assert (opts.workdir, opts.tracking_uri, opts.jobs, opts.progress) == (
        tmp_path,
        "sqlite:///x.db",
        2,
        False,
    )
    assert opts.out_dir == tmp_path / "o"
