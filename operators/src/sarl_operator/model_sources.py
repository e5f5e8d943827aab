"""Pod pieces for where the models come from: the Hub (or its mirror), the object store, a PVC.

Called by :mod:`sarl_operator.builders`: :func:`hub_env` for the trainer, evaluation and
Study report containers (``job_env``) and for served models, :func:`policy_volume` for the
trainer and evaluation pods (``job_pod``), :func:`served_source` for the InferenceServices.
Pure: the sources are parsed by :func:`sarl.spec.model_source.parse_model_uri` (the same rules
as the spec's), never fetched — the jobs download an ``s3://`` policy themselves
(``sarl.storage.models.materialize``) and KServe's storage initializer a served one.

KServe (read at github.com/kserve/kserve, tag v0.17.0; the same at v0.15.0 and v0.20.0):

* ``storageUri`` ``s3://...`` or ``pvc://claim/path`` puts the model at ``/mnt/models``
  (pkg/webhook/admission/pod/storage_initializer_injector.go: an init container downloads an
  s3 URI, a pvc URI is mounted with ``subPath``), and the Hugging Face runtime loads
  ``--model_dir`` (default ``/mnt/models``) when no ``--model_id`` is given
  (python/huggingfaceserver/huggingfaceserver/__main__.py, ``get_model_id_or_path``).
* S3 credentials: the injector passes the pod's annotations to the credential builder
  (pkg/credentials/service_account_credentials.go, ``CreateSecretVolumeAndEnvFromServiceAccount``),
  which mounts the Secret named by the annotation ``serving.kserve.io/storageSecretName``
  (``storageSecretNameAnnotation`` in config/configmap/inferenceservice.yaml) instead of the
  service account's secrets; ISVC annotations reach the predictor pod
  (pkg/controller/v1beta1/inferenceservice/components/predictor.go). A Secret is used for S3
  when it holds the key ``s3SecretAccessKeyName`` (KServe's default config: AWS_ACCESS_KEY_ID /
  AWS_SECRET_ACCESS_KEY, the platform's default key names too), and the endpoint comes from the
  Secret's annotation ``serving.kserve.io/s3-endpoint`` (or its ``S3_ENDPOINT`` key, or the
  cluster's KServe config): pkg/credentials/s3/s3_secret.go and utils.go
  (``BuildSecretEnvs``, ``BuildS3EnvVars``). docs/cluster/air-gapped.md says what to annotate.
"""

from __future__ import annotations

from typing import Any, Final

from sarl.spec.experiment import Experiment
from sarl.spec.model_source import (
    KSERVE_MODEL_DIR,
    ModelUri,
    check_http_url,
    parse_model_uri,
    pvc_mount_path,
)

HF_ENDPOINT_ENV: Final = "HF_ENDPOINT"
HF_OFFLINE_ENV: Final = "HF_HUB_OFFLINE"
#: KServe's default ``storageSecretNameAnnotation`` (v0.15.0-v0.20.0).
STORAGE_SECRET_ANNOTATION: Final = "serving.kserve.io/storageSecretName"
POLICY_VOLUME: Final = "policy-model"


def platform_hf_endpoint(value: str) -> str:
    """``SARL_HF_ENDPOINT`` checked (empty: none); ValueError naming the variable."""
    if not value:
        return ""
    try:
        return check_http_url(value, "https://hf-mirror.internal")
    except ValueError as e:
        raise ValueError(f"SARL_HF_ENDPOINT: {e}") from e


def policy(exp: Experiment) -> ModelUri:
    return parse_model_uri(exp.spec.model.name, "spec.model.name")


def hub_env(source: ModelUri, endpoint: str) -> list[dict[str, Any]]:
    """HF_ENDPOINT when a mirror is set (spec or platform); otherwise HF_HUB_OFFLINE=1 when the
    pod's model is not on the Hub, so that no library tries the network (on an air-gapped
    cluster a Hub call hangs until its timeout). With a mirror nothing is forced offline: the
    mirror may serve what else the pod asks the Hub for."""
    if endpoint:
        return [{"name": HF_ENDPOINT_ENV, "value": endpoint}]
    if source.in_store:
        return [{"name": HF_OFFLINE_ENV, "value": "1"}]
    return []


def job_hub_env(exp: Experiment, endpoint: str) -> list[dict[str, Any]]:
    """:func:`hub_env` of the trainer and evaluation pods (their model is the policy)."""
    return hub_env(policy(exp), exp.spec.resources.hf_endpoint or endpoint)


def policy_volume(exp: Experiment) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(volumes, mounts) for a ``pvc://`` policy: its claim, read-only, at
    :func:`~sarl.spec.model_source.pvc_mount_path` (where the jobs look for it); none else."""
    source = policy(exp)
    if source.kind != "pvc":
        return [], []
    claim = {"claimName": source.claim, "readOnly": True}
    volume = {"name": POLICY_VOLUME, "persistentVolumeClaim": claim}
    mount = {"name": POLICY_VOLUME, "mountPath": pvc_mount_path(source.claim), "readOnly": True}
    return [volume], [mount]


def served_source(model: str, field: str) -> ModelUri:
    """The source of a served model (``field`` names it in errors): the Hub, s3 or pvc."""
    source = parse_model_uri(model, field)
    if source.kind not in ("hub", "s3", "pvc"):
        raise ValueError(
            f"{field}: the operator serves models from the Hub (hf://org/name), the object "
            "store (s3://bucket/prefix) or a PVC (pvc://claim/path), not a local path"
        )
    return source


def served_args(source: ModelUri) -> list[str]:
    """Where the runtime loads the model: ``--model_id`` (Hub) or ``--model_dir`` (storageUri)."""
    if source.is_hub:
        return [f"--model_id={source.hub_id}"]
    return [f"--model_dir={KSERVE_MODEL_DIR}"]


def with_storage(isvc: dict[str, Any], source: ModelUri, credentials_secret: str) -> dict[str, Any]:
    """``isvc`` with ``predictor.model.storageUri`` for an s3 or pvc source and, for s3, the
    annotation that hands KServe's storage initializer the S3 credentials Secret."""
    if not source.in_store:
        return isvc
    isvc["spec"]["predictor"]["model"]["storageUri"] = source.storage_uri()
    if source.kind == "s3" and credentials_secret:
        annotations = isvc["metadata"].setdefault("annotations", {})
        annotations[STORAGE_SECRET_ANNOTATION] = credentials_secret
    return isvc
