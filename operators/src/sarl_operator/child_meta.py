"""Names and metadata of an Experiment's child objects: labels, ``metadata``, owner references.

Called by every builder of a child (``builders``, ``job_pods``, ``served_models``,
``evaluation``, ``trainjob``, ``study_builders``) and by the handlers (``reconcile``,
``experiment_conditions``), which make the Experiment (or Study) the controller of what they
create with :func:`owned`. Pure: plain dicts in and out.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, Final

from sarl.integrations.cluster import CONFIG_SUFFIX, EMBEDDING_SUFFIX, JUDGE_SUFFIX
from sarl.spec.experiment import Experiment

EXPERIMENT_LABEL: Final = "sarl.dev/experiment"


def labels(exp: Experiment, component: str | None = None) -> dict[str, str]:
    """Standard app.kubernetes.io labels plus ``sarl.dev/experiment`` (the selector label)."""
    out = {
        "app.kubernetes.io/name": "sarl",
        "app.kubernetes.io/instance": exp.name,
        "app.kubernetes.io/part-of": "sarl",
        "app.kubernetes.io/managed-by": "sarl-operator",
        EXPERIMENT_LABEL: exp.name,
    }
    if component:
        out["app.kubernetes.io/component"] = component
    return out


def owned(
    obj: Mapping[str, Any], owner_meta: Mapping[str, Any], kind: str = "Experiment"
) -> dict[str, Any]:
    """A copy of ``obj`` owned (controller reference) by the ``sarl.dev`` resource of ``kind``
    (an Experiment, or a Study for its Experiments) with ``owner_meta``, so that deleting the
    owner garbage-collects it."""
    out = copy.deepcopy(dict(obj))
    ref = {
        "apiVersion": "sarl.dev/v1alpha1",
        "kind": kind,
        "name": owner_meta["name"],
        "uid": owner_meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
    refs = [r for r in out["metadata"].get("ownerReferences", []) if r.get("uid") != ref["uid"]]
    out["metadata"]["ownerReferences"] = [*refs, ref]
    return out


def meta(exp: Experiment, name: str, namespace: str, component: str) -> dict[str, Any]:
    """metadata of a child: name, namespace and :func:`labels`."""
    return {"name": name, "namespace": namespace, "labels": labels(exp, component)}


# Child names: the suffixes live in sarl.integrations.cluster, whose check_names keeps every
# child (and the Services the Training Operator and KServe derive from it) within 63 characters.
def config_name(exp: Experiment) -> str:
    return f"{exp.name}{CONFIG_SUFFIX}"


def embedding_name(exp: Experiment) -> str:
    return f"{exp.name}{EMBEDDING_SUFFIX}"


def judge_name(exp_name: str) -> str:
    return f"{exp_name}{JUDGE_SUFFIX}"
