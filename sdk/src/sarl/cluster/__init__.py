"""sarl on a Kubernetes cluster: the client behind ``sarl.Client()`` and ``sarl submit|status|
logs|delete|wait``.

:class:`~sarl.cluster.client.ClusterClient` submits Experiments and Studies (custom objects
``experiments.sarl.dev``/``studies.sarl.dev`` v1alpha1, reconciled by the operator from
charts/sarl-platform), reads their status, waits for them, reads training-pod logs and deletes
them; errors are :class:`~sarl.cluster.errors.ClusterError` subclasses with one-line messages.
Importing this package does not import ``kubernetes`` (the ``cluster`` extra); creating a client
does.
"""

from sarl.cluster.client import ClusterClient
from sarl.cluster.errors import (
    AlreadyExists,
    ClusterError,
    ClusterExtraMissing,
    ClusterUnreachable,
    CrdNotInstalled,
    ExperimentNotFound,
    NoPod,
    NotAllowed,
    Rejected,
    StudyNotFound,
    WaitTimeout,
)
from sarl.cluster.models import (
    Condition,
    ExperimentInfo,
    ExperimentStatus,
    StudyInfo,
    StudyStatus,
)

__all__ = [
    "AlreadyExists",
    "ClusterClient",
    "ClusterError",
    "ClusterExtraMissing",
    "ClusterUnreachable",
    "Condition",
    "CrdNotInstalled",
    "ExperimentInfo",
    "ExperimentNotFound",
    "ExperimentStatus",
    "NoPod",
    "NotAllowed",
    "Rejected",
    "StudyInfo",
    "StudyNotFound",
    "StudyStatus",
    "WaitTimeout",
]
