"""The MLflow run of a local session holds no secret: validation refuses a credential, and one
that slips past it (a spec changed with ``model_copy``, which does not validate) is redacted from
the params, tags and ``spec/experiment.yaml``."""

from __future__ import annotations

from pathlib import Path

import pytest

from sarl.runner.local import LocalOptions
from sarl.runner.session import LocalSession
from sarl.spec import Experiment, SpecError, load_experiment
from sarl.spec.loggable import NOT_LOGGED
from sarl.tracking.tracker import SPEC_ARTIFACT, default_tracking_uri

PASSWORD = "s3cr3t-Pa55word"
URL = f"http://admin:{PASSWORD}@minio:9000"
TOKEN = "hf_" + "hZEmnoOEYISjraJtbySaKCNnSuYAvukaTt"
DOC = {"metadata": {"name": "leak"}, "spec": {"tracking": {"tags": {"team": "rl"}}}}


def smuggled() -> Experiment:
    """A valid Experiment with a credential URL and token put in without validation."""
    exp = load_experiment(DOC)
    spec = exp.spec
    storage = spec.storage.model_copy(update={"endpoint_url": URL})
    tracking = spec.tracking.model_copy(update={"tags": {"team": "rl", "hf_token": TOKEN}})
    spec = spec.model_copy(update={"storage": storage, "tracking": tracking})
    return exp.model_copy(update={"spec": spec})


def test_validation_refuses_the_secrets_first() -> None:
    doc = {**DOC, "spec": {"storage": {"endpoint_url": URL}}}
    with pytest.raises(SpecError, match="spec.storage.endpoint_url: holds a URL with credentials"):
        load_experiment(doc)


def test_local_run_logs_no_secret(tmp_path: Path) -> None:
    from mlflow import MlflowClient

    uri = default_tracking_uri(tmp_path)
    session = LocalSession(
        smuggled(), LocalOptions(workdir=tmp_path), uri, str(tmp_path / "ckpt"), rewards=[]
    )
    tracker = session._tracker(None)  # what train() calls to start the run
    tracker.finish()

    client = MlflowClient(uri)
    run = client.get_run(tracker.run_id)
    artifact = Path(client.download_artifacts(tracker.run_id, SPEC_ARTIFACT, str(tmp_path)))
    logged = [*run.data.params.values(), *run.data.tags.values(), artifact.read_text()]
    assert not [text for text in logged if PASSWORD in text or TOKEN in text]
    # A free-form URL is not in the allow-list of loggable fields (sarl.spec.loggable).
    assert run.data.params["storage.endpoint_url"] == NOT_LOGGED
    assert run.data.tags["hf_token"] == "***" and run.data.tags["team"] == "rl"
