"""The cluster client's errors, and the one place where Kubernetes failures become them.

Raised by the cluster client (:mod:`sarl.cluster.client` and the modules it delegates to:
:mod:`~sarl.cluster.resources`, :mod:`~sarl.cluster.waiting`, :mod:`~sarl.cluster.pods`,
:mod:`~sarl.cluster.connection`); the ``sarl submit|status|logs|delete|wait`` commands
(:mod:`sarl.cli.cluster`) print ``error: <message>`` and exit 1 for every :class:`ClusterError`.
Each message is one line naming what failed and why; :func:`api_error` maps an exception from
the ``kubernetes`` client (an ``ApiException`` or a urllib3 connection error) to one of them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Final

#: What to tell a user whose cluster lacks the Experiment CRD.
INSTALL_CHART: Final = (
    "the Experiment CRD (experiments.sarl.dev) is not installed in this cluster: install the "
    "sarl platform chart (helm install sarl charts/sarl-platform)"
)
#: The same for the Study CRD.
INSTALL_STUDY_CRD: Final = (
    "the Study CRD (studies.sarl.dev) is not installed in this cluster: install (or upgrade to) "
    "the sarl platform chart, or `kubectl apply -f charts/sarl-platform/crds/`"
)
_MAX_MESSAGE: Final = 300
#: Singular of each resource the client names in messages.
_SINGULAR: Final = {"experiments": "experiment", "studies": "study"}


class ClusterError(RuntimeError):
    """A cluster operation failed; ``str(e)`` is one line saying what and why."""


class ClusterExtraMissing(ClusterError):
    """The ``kubernetes`` package (the ``cluster`` extra) is not installed."""


class ClusterUnreachable(ClusterError):
    """No usable configuration, or the API server did not answer (refused, timeout, TLS)."""


class CrdNotInstalled(ClusterError):
    """``sarl.dev/v1alpha1`` ``experiments`` is not served: the platform chart is missing."""


class NotAllowed(ClusterError):
    """401/403: the credentials may not do this."""


class ExperimentNotFound(ClusterError):
    """No Experiment of that name in that namespace."""


class StudyNotFound(ClusterError):
    """No Study of that name in that namespace."""


class AlreadyExists(ClusterError):
    """409 on create: an Experiment (or Study) of that name exists (``replace=True`` updates
    it)."""


class Rejected(ClusterError):
    """400/409/422: the API server refused the request; the message is the server's."""


class WaitTimeout(ClusterError):
    """``wait``/``delete(wait=True)`` ran out of time; the Experiment is left as it is."""


class NoPod(ClusterError):
    """``logs``: the training job has no pod (yet) for the requested replica."""


@dataclass(frozen=True)
class Target:
    """What a request was doing, for error messages: ``verb`` ``resource`` ``name`` in ``ns``."""

    verb: str
    namespace: str | None
    name: str | None = None
    resource: str = "experiments"

    @property
    def where(self) -> str:
        return f"in namespace {self.namespace}" if self.namespace else "in any namespace"

    @property
    def singular(self) -> str:
        return _SINGULAR.get(self.resource, self.resource.removesuffix("s"))

    @property
    def what(self) -> str:
        return f"{self.singular} {self.name}" if self.name else self.resource


def api_message(body: str | bytes | None, fallback: str) -> str:
    """The ``message`` of a Kubernetes ``Status`` body, else ``fallback``; one line, bounded."""
    text = ""
    if body:
        try:
            doc = json.loads(body)
        except ValueError:
            doc = None
        if isinstance(doc, dict) and doc.get("message"):
            text = str(doc["message"])
        elif isinstance(doc, dict) and doc.get("reason"):
            text = str(doc["reason"])
        elif isinstance(body, str | bytes) and doc is None:
            text = body.decode(errors="replace") if isinstance(body, bytes) else body
    text = " ".join((text or fallback).split())
    return text if len(text) <= _MAX_MESSAGE else text[: _MAX_MESSAGE - 3] + "..."


def api_error(exc: BaseException, target: Target, host: str = "") -> ClusterError:
    """Map an exception raised by the ``kubernetes`` client to a :class:`ClusterError`.

    404s are mapped to :class:`ExperimentNotFound` (for ``experiments``),
    :class:`StudyNotFound` (``studies``) or a generic not-found; the caller checks discovery
    first to report a missing CRD instead.
    """
    from kubernetes.client.exceptions import ApiException

    if not isinstance(exc, ApiException):
        return unreachable(exc, host)
    status = int(exc.status or 0)
    message = api_message(exc.body, str(exc.reason or f"HTTP {status}"))
    if status in (401, 403):
        return NotAllowed(
            f"not allowed to {target.verb} {target.resource} {target.where}: {message}"
        )
    if status == 404:
        if target.resource == "experiments":
            return ExperimentNotFound(f"experiment {target.name} not found {target.where}")
        if target.resource == "studies":
            return StudyNotFound(f"study {target.name} not found {target.where}")
        return ClusterError(f"{target.what} not found {target.where}")
    if status == 409 and target.verb == "create":
        return AlreadyExists(
            f"{target.what} already exists {target.where} "
            "(delete it, or pass --replace / replace=True)"
        )
    if status in (400, 409, 422):
        return Rejected(f"cannot {target.verb} {target.what} {target.where}: {message}")
    return ClusterError(
        f"the Kubernetes API failed to {target.verb} {target.what} {target.where}: "
        f"HTTP {status} {message}"
    )


def unreachable(exc: BaseException, host: str) -> ClusterUnreachable:
    """A connection-level failure (refused, DNS, TLS, timeout) as one line."""
    reason = _root_cause(exc)
    at = f" at {host}" if host else ""
    return ClusterUnreachable(f"cannot reach the Kubernetes API{at} ({reason})")


def _root_cause(exc: BaseException) -> str:
    """The innermost useful reason of a urllib3 error chain, e.g. ``Connection refused``."""
    import urllib3.exceptions as u3

    inner: BaseException = exc
    if isinstance(exc, u3.MaxRetryError) and exc.reason is not None:
        inner = exc.reason
    # NewConnectionError subclasses ConnectTimeoutError in urllib3 2: test it first.
    if isinstance(inner, u3.NewConnectionError):
        text = str(inner).split(": ", 1)[-1]
        return text.split("] ", 1)[-1] if "] " in text else text
    if isinstance(inner, u3.ReadTimeoutError | u3.ConnectTimeoutError | TimeoutError):
        return "timed out"
    if isinstance(inner, u3.SSLError):
        return f"TLS error: {inner}"
    return " ".join(str(inner).split()) or type(inner).__name__
