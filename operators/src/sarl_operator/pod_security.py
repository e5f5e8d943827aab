"""The security settings of every pod the operator creates, so that each passes the Pod Security
Standard ``restricted`` (Kubernetes pod-security-admission, policy/check_*.go at v0.31.0).

Called by ``job_pods`` (trainer, evaluation and Study report pods: :func:`pod_context`,
:func:`container_context`, :func:`token_mount`), ``scheduling`` (the Workers' init container),
``trainjob`` (the TrainJob's runtime patch, from the pod ``job_pods`` builds), ``study_builders``
(the report's init container) and ``served_models`` (InferenceService predictors:
:func:`predictor_container_context`). Pure: plain dicts.

What ``restricted`` asks, and where it is met here:

* pod or every container: ``runAsNonRoot: true`` (check_runAsNonRoot.go), a ``runAsUser`` that is
  not 0 (check_runAsUser.go), ``seccompProfile`` RuntimeDefault or Localhost
  (check_seccompProfile_restricted.go) -- set on the pod, so init containers a controller adds
  later (the Training Operator's, KServe's storage initializer) inherit them;
* every container: ``allowPrivilegeEscalation: false`` (check_allowPrivilegeEscalation.go) and
  ``capabilities.drop: [ALL]`` (check_capabilities_restricted.go) -- container-only fields,
  so :func:`container_context` goes on each container the operator writes.

The user is numeric because the kubelet can check ``runAsNonRoot`` only against a numeric user:
the sarl images' (jobs/docker/*.Dockerfile, :data:`SARL_UID`) for the jobs, KServe's Hugging
Face runtime's (:data:`KSERVE_UID`) for served models. ``fsGroup`` makes the scratch volume and
a claim writable by that user.
"""

from __future__ import annotations

from typing import Any, Final

#: The user and group of the sarl images (``useradd --uid 10001`` in jobs/docker/verl.Dockerfile,
#: trl.Dockerfile, services/*/Dockerfile, operators/Dockerfile).
SARL_UID: Final = 10001
#: The user of KServe's Hugging Face runtime and storage-initializer images
#: (python/huggingface_server.Dockerfile and python/storage-initializer.Dockerfile at kserve
#: v0.17.0: ``useradd kserve -m -u 1000``, ``USER 1000``).
KSERVE_UID: Final = 1000
RUNTIME_DEFAULT_SECCOMP: Final = {"type": "RuntimeDefault"}


def pod_context(uid: int) -> dict[str, Any]:
    """The pod-level securityContext: non-root numeric user and group ``uid``, volumes group-owned
    by ``uid`` (changed only when the volume's root differs: a large claim is not walked at every
    start), the container runtime's default seccomp profile."""
    return {
        "runAsNonRoot": True,
        "runAsUser": uid,
        "runAsGroup": uid,
        "fsGroup": uid,
        "fsGroupChangePolicy": "OnRootMismatch",
        "seccompProfile": dict(RUNTIME_DEFAULT_SECCOMP),
    }


def container_context() -> dict[str, Any]:
    """The container-level securityContext of every container the operator writes: no privilege
    escalation, no capabilities, and (repeated from the pod, for a container merged into another
    pod template, as KServe does) non-root and RuntimeDefault seccomp."""
    return {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "runAsNonRoot": True,
        "seccompProfile": dict(RUNTIME_DEFAULT_SECCOMP),
    }


def predictor_container_context() -> dict[str, Any]:
    """The securityContext of an InferenceService's ``predictor.model``: :func:`container_context`
    with KServe's runtime user. All of it on the container, none on the pod: in Serverless mode
    Knative Serving refuses a pod-level securityContext (other than seccomp) unless the flag
    ``kubernetes.podspec-securitycontext`` is on, while it lets every field here through
    (knative/serving pkg/apis/serving/fieldmask.go at knative-v1.21.1: ``PodSecurityContextMask``,
    ``SecurityContextMask``). So KServe's storage initializer (an init container its webhook
    adds for an s3 model, from the ``default`` ClusterStorageContainer, which sets no
    securityContext at v0.17.0) gets none from the pod: the platform gives that
    ClusterStorageContainer the same container securityContext (docs/cluster/pod-security.md)."""
    return {**container_context(), "runAsUser": KSERVE_UID, "runAsGroup": KSERVE_UID}


def token_mount(service_account: str | None) -> dict[str, Any]:
    """``automountServiceAccountToken: false`` unless the spec names a service account: the
    jobs and served models never call the Kubernetes API, so the namespace's default account's
    token is not mounted; a named account is the tenant's choice (workload identity may read
    its token), so its setting is left to the ServiceAccount."""
    return {} if service_account else {"automountServiceAccountToken": False}
