"""Contract: the environment the operator gives its job pods puts what they download and write on
the scratch volume, as the libraries that read it define.

Run for real in a fresh interpreter with the job pod's environment (the volume's mount path
replaced by a temporary directory, as the PyTorchJob emulator does without root):

* huggingface_hub 2.4.0 (the version in this environment; ``src/huggingface_hub/constants.py``
  and ``utils/_auth.py`` of tag v2.4.0): ``HF_HOME`` is the root of the Hub cache
  (``HF_HUB_CACHE = $HF_HOME/hub``) and ``get_token()`` returns ``HF_TOKEN`` — transformers,
  vLLM and KServe's Hugging Face runtime download through it;
* the jobs' work directories (``sarl_jobs.verl_trainer.DEFAULT_WORKDIR``: local checkpoints,
  data, the built model; ``sarl_jobs.trl_trainer``'s output directory) derive from
  ``tempfile.gettempdir()``, which reads ``TMPDIR`` (Python's ``tempfile``, 3.11).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from sarl_operator import builders, job_pods
from tests.operators.cases import CASES, IMAGE, NAMESPACE, RUN_ID, TRACKING_URI, experiment_of

_PROBE = """
import json, tempfile
import huggingface_hub
from huggingface_hub import constants
from sarl_jobs import verl_trainer
print(json.dumps({
    "hub_cache": constants.HF_HUB_CACHE,
    "token": huggingface_hub.get_token(),
    "tmp": tempfile.gettempdir(),
    "verl_workdir": verl_trainer.DEFAULT_WORKDIR,
}))
"""


def _pod_env(scratch: Path, token: str) -> dict[str, str]:
    """The trainer container's environment from the builder, with the scratch mount path
    replaced by ``scratch`` and the Secret reference by ``token`` (the kubelet's part)."""
    doc = CASES["sarl-grpo-math"]()
    doc["spec"]["resources"] = {"hf_token": {"secret_name": "hf-token"}}
    job = builders.pytorchjob(
        experiment_of(doc), NAMESPACE, image=IMAGE, mlflow_run_id=RUN_ID, tracking_uri=TRACKING_URI
    )
    container = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "XDG_", "TMP"))}
    for var in container["env"]:
        if var["name"] == "HF_TOKEN":
            assert var["valueFrom"]["secretKeyRef"] == {"name": "hf-token", "key": "HF_TOKEN"}
            env["HF_TOKEN"] = token
        elif "value" in var:
            env[var["name"]] = var["value"].replace(job_pods.SCRATCH_DIR, str(scratch))
    return env


def test_downloads_token_and_work_directories_follow_the_pod_environment(tmp_path: Path) -> None:
    token = "hf_" + "Zq7" * 12
    env = _pod_env(tmp_path, token)
    out = subprocess.run(
        [sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, check=True
    )
    seen = json.loads(out.stdout)
    assert seen["token"] == token
    assert Path(seen["hub_cache"]).is_relative_to(tmp_path)
    assert seen["tmp"] == str(tmp_path)
    assert Path(seen["verl_workdir"]).is_relative_to(tmp_path)
