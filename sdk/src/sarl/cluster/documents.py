"""What the cluster client sends: an Experiment or Study validated as the operator will, the
custom object that carries it, and the merge patch that replaces a stored spec.

Called by :class:`sarl.cluster.client.ClusterClient` (``submit``, ``replace``, ``submit_study``,
``replace_study``) and by :mod:`sarl.cluster.resources` (``merge_patch``); ``sarl submit``
(:mod:`sarl.cli.cluster`) runs the two ``load_*_for_cluster`` checks before it connects, and
notebook 03 validates its Experiment with :func:`load_for_cluster` before submitting it.
Pure functions: nothing here talks to the cluster or imports ``kubernetes``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from sarl.rewards.cluster_names import validating_for_cluster
from sarl.spec.experiment import API_VERSION, KIND, Experiment
from sarl.spec.loader import SpecError, load_document, load_study, validate_document
from sarl.spec.study import STUDY_KIND, Study, is_study_document

ExperimentSource = Experiment | dict[str, Any] | str | Path
StudySource = Study | dict[str, Any] | str | Path

#: Stands in for the URL of a chat endpoint the operator will serve, during local validation.
_SERVED: Final = "http://served-by-the-sarl-operator.invalid/openai"


def load_for_cluster(source: ExperimentSource) -> tuple[Experiment, dict[str, Any]]:
    """Validate ``source`` as the operator will (``SpecError`` naming the field) and return it
    with the spec to store. Chat endpoints given with a model and no URL count as served by the
    operator (validated with a stand-in URL, stored without one so the operator fills in its
    own), and the chosen trainer must accept the spec
    (:func:`sarl.integrations.cluster.check_cluster`). A dotted reward name is not imported
    (:func:`~sarl.rewards.cluster_names.validating_for_cluster`): the platform's allow-list,
    which the operator and its webhook hold, decides."""
    with validating_for_cluster(None):
        return _load_for_cluster(source)


def _load_for_cluster(source: ExperimentSource) -> tuple[Experiment, dict[str, Any]]:
    from sarl.integrations.cluster import chat_endpoints, check_cluster, fill_chat_urls
    from sarl.plan import check_plan

    if isinstance(source, Experiment):
        exp = source
    else:
        data, label = load_document(source)
        spec = data.get("spec")
        filled = {**data, "spec": fill_chat_urls(spec, _SERVED)} if isinstance(spec, dict) else data
        exp = validate_document(filled, label)
    try:
        check_cluster(exp)
        # GPUs and scratch disk; the store's room is the operator's to check (the platform
        # chart tells it), `sarl plan --store-capacity` shows it beforehand.
        check_plan(exp)
    except ValueError as e:
        raise SpecError(str(e)) from e
    stored = exp.spec.model_dump(mode="json")
    for _, endpoint in chat_endpoints(stored["reward"]):
        if endpoint.get("url") == _SERVED:
            del endpoint["url"]
    return exp, stored


def load_study_for_cluster(source: StudySource) -> tuple[Study, dict[str, Any]]:
    """Validate a Study as the operator will (``SpecError`` naming the field) and return it
    with the spec to store: the Study itself, then every arm x seed Experiment it expands to
    with the checks of :func:`load_for_cluster` (the same ``check_cluster`` the Experiment
    submit path and the operator run), an error naming the arm and seed. Chat endpoints the
    operator would serve (a model without URL) are not supported in a Study: name their URL."""
    with validating_for_cluster(None):
        return _load_study_for_cluster(source)


def _load_study_for_cluster(source: StudySource) -> tuple[Study, dict[str, Any]]:
    study = load_study(source)
    arms = [arm.name for arm in study.spec.arms]
    for run in study.runs():
        try:
            load_for_cluster(run.experiment)
        except SpecError as e:
            index = arms.index(run.arm)
            # The check names the run's Experiment fields; say where a Study sets them.
            raise SpecError(
                f"spec.arms[{index}] ({run.arm}, seed {run.seed}): {e} (in the Study, the run's "
                f"spec.<field> is spec.base.<field>, or spec.arms[{index}].override.<field>)"
            ) from e
    return study, study.spec.model_dump(mode="json")


def is_study_source(source: ExperimentSource | StudySource) -> bool:
    """Whether ``source`` is a Study (or a document, file or text declaring ``kind: Study``);
    a document that cannot be read is not (the Experiment path reports why)."""
    if isinstance(source, Study):
        return True
    if isinstance(source, Experiment):
        return False
    try:
        data, _ = load_document(source)
    except SpecError:
        return False
    return is_study_document(data)


def study_body(study: Study, namespace: str, spec: dict[str, Any] | None = None) -> dict[str, Any]:
    """The custom object for ``study`` (the spec as validated, presets applied)."""
    return _body(STUDY_KIND, study, namespace, spec)


def experiment_body(
    exp: Experiment, namespace: str, spec: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The custom object for ``exp``: the spec as validated, presets applied, so what the
    cluster stores is exactly what was checked here (the operator re-validates it); ``spec``
    (from :func:`load_for_cluster`) replaces the dump."""
    return _body(KIND, exp, namespace, spec)


def _body(
    kind: str, doc: Experiment | Study, namespace: str, spec: dict[str, Any] | None
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": doc.name, "namespace": namespace}
    if doc.metadata.labels:
        meta["labels"] = dict(doc.metadata.labels)
    return {
        "apiVersion": API_VERSION,
        "kind": kind,
        "metadata": meta,
        "spec": spec if spec is not None else doc.spec.model_dump(mode="json"),
    }


def merge_patch(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON merge patch (RFC 7386) turning ``old`` into ``new``: changed keys, nested
    objects recursively, ``None`` for keys ``new`` lacks. Lists are replaced whole."""
    out: dict[str, Any] = {key: None for key in old if key not in new}
    for key, value in new.items():
        before = old.get(key)
        if isinstance(value, Mapping) and isinstance(before, Mapping):
            nested = merge_patch(before, value)
            if nested:
                out[key] = nested
        elif key not in old or before != value:
            out[key] = value
    return out
