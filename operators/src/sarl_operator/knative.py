"""KServe deployment mode of the served models, and the pod-spec fields Knative Serving refuses.

Called by :mod:`sarl_operator.builders` for every InferenceService it builds (the embedding and
judge models), so that a served model that Knative would refuse fails the Experiment up front
with a message naming the Knative feature flag, instead of leaving ``InferenceReady`` False.

In KServe's Serverless (Knative) mode the predictor becomes a Knative Service, and Knative
Serving's webhook refuses every pod-spec field that its ``fieldmask.go`` masks unless the
feature flag gating it is enabled in the ``config-features`` ConfigMap of ``knative-serving``.
The table below is read from knative/serving ``pkg/apis/serving/fieldmask.go`` (``PodSpecMask``,
``VolumeSourceMask``, ``EnvVarSourceMask``, ``CapabilitiesMask``) and the defaults from
``pkg/apis/config/features.go`` (``defaultFeaturesConfig``) at tag knative-v1.21.1, the Knative
Serving release KServe v0.17.0 installs (``kserve-deps.env``);
tests/operators/test_knative_features.py checks it against that tag's
``config/core/configmaps/features.yaml``. RawDeployment mode makes a plain Deployment: nothing
here applies.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any, Final

#: Annotation KServe reads the deployment mode from (``constants.DeploymentMode``).
DEPLOYMENT_MODE_ANNOTATION: Final = "serving.kserve.io/deploymentMode"
SERVERLESS: Final = "Serverless"

#: Pod-spec field -> the Knative feature flag that lets it through (PodSpecMask).
POD_FIELD_FLAGS: Final[Mapping[str, str]] = {
    "affinity": "kubernetes.podspec-affinity",
    "topologySpreadConstraints": "kubernetes.podspec-topologyspreadconstraints",
    "hostAliases": "kubernetes.podspec-hostaliases",
    "nodeSelector": "kubernetes.podspec-nodeselector",
    "runtimeClassName": "kubernetes.podspec-runtimeclassname",
    "tolerations": "kubernetes.podspec-tolerations",
    "securityContext": "kubernetes.podspec-securitycontext",
    "shareProcessNamespace": "kubernetes.podspec-shareprocessnamespace",
    "priorityClassName": "kubernetes.podspec-priorityclassname",
    "schedulerName": "kubernetes.podspec-schedulername",
    "initContainers": "kubernetes.podspec-init-containers",
    "dnsPolicy": "kubernetes.podspec-dnspolicy",
    "dnsConfig": "kubernetes.podspec-dnsconfig",
    "hostIPC": "kubernetes.podspec-hostipc",
    "hostPID": "kubernetes.podspec-hostpid",
    "hostNetwork": "kubernetes.podspec-hostnetwork",
}
#: Volume source -> its flag (VolumeSourceMask; secret, configMap and projected always pass).
VOLUME_FLAGS: Final[Mapping[str, str]] = {
    "emptyDir": "kubernetes.podspec-volumes-emptydir",
    "persistentVolumeClaim": "kubernetes.podspec-persistent-volume-claim",
    "hostPath": "kubernetes.podspec-volumes-hostpath",
    "csi": "kubernetes.podspec-volumes-csi",
    "image": "kubernetes.podspec-volumes-image",
}
FIELDREF_FLAG: Final = "kubernetes.podspec-fieldref"
ADD_CAPABILITIES_FLAG: Final = "kubernetes.containerspec-addcapabilities"
#: The flags of those tables that Knative enables by default (defaultFeaturesConfig).
ENABLED_BY_DEFAULT: Final = frozenset({"kubernetes.podspec-volumes-emptydir"})


def _is_set(value: Any) -> bool:
    # Knative's mask keeps zero values (hostIPC: false, an empty list) without complaint.
    return value not in (None, False, "", [], {})


def _container_flags(container: Mapping[str, Any], where: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for var in container.get("env") or []:
        source = var.get("valueFrom") or {}
        if source.get("fieldRef") or source.get("resourceFieldRef"):
            out.append((f"{where}.env[{var.get('name')}].valueFrom", FIELDREF_FLAG))
    capabilities = (container.get("securityContext") or {}).get("capabilities") or {}
    if capabilities.get("add"):
        out.append((f"{where}.securityContext.capabilities.add", ADD_CAPABILITIES_FLAG))
    return out


def gated_fields(predictor: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(field path in the predictor, Knative flag) of every field a flag gates, whatever the
    flag's value: pod fields, volume sources, env field references and added capabilities of
    ``predictor.model`` and ``predictor.containers``."""
    out = [(f, flag) for f, flag in POD_FIELD_FLAGS.items() if _is_set(predictor.get(f))]
    for volume in predictor.get("volumes") or []:
        out += [
            (f"volumes[{volume.get('name')}].{source}", flag)
            for source, flag in VOLUME_FLAGS.items()
            if source in volume
        ]
    if isinstance(predictor.get("model"), Mapping):
        out += _container_flags(predictor["model"], "model")
    for container in predictor.get("containers") or []:
        out += _container_flags(container, f"containers[{container.get('name')}]")
    return out


def refused_fields(predictor: Mapping[str, Any], enabled: Collection[str]) -> list[tuple[str, str]]:
    """The :func:`gated_fields` whose flag is neither on by default nor in ``enabled``."""
    allowed = ENABLED_BY_DEFAULT | set(enabled)
    return [(f, flag) for f, flag in gated_fields(predictor) if flag not in allowed]


def set_deployment_mode(
    isvc: dict[str, Any],
    mode: str,
    enabled: Collection[str],
    spec_fields: Mapping[str, str],
) -> dict[str, Any]:
    """Write ``mode`` as the InferenceService's deployment-mode annotation; in Serverless mode,
    raise ValueError for the first predictor field Knative would refuse, naming the spec field
    it came from (``spec_fields``: predictor field -> spec field) and the flag to enable."""
    isvc["metadata"].setdefault("annotations", {})[DEPLOYMENT_MODE_ANNOTATION] = mode
    if mode != SERVERLESS:
        return isvc
    for field, flag in refused_fields(isvc["spec"]["predictor"], enabled):
        source = spec_fields.get(field.split("[", 1)[0].split(".", 1)[0], field)
        raise ValueError(
            f"{source}: Knative Serving refuses the predictor's {field} unless its feature "
            f"flag {flag} is enabled (disabled by default); set spec.serving.deployment_mode: "
            f"RawDeployment, or enable {flag} in the config-features ConfigMap of "
            "knative-serving and list it in spec.serving.knative_features"
        )
    return isvc
