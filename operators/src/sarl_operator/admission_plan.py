"""The admission webhook's spec check: refuse an Experiment or Study that is invalid or would not
fit.

Called by :func:`sarl_operator.admission.refusal` (the one validating webhook the chart
registers) on CREATE, and on an UPDATE that changes the spec (an UPDATE of metadata alone, such
as kopf removing its finalizer, must pass whatever the spec says). A spec that does not validate
is refused with the loader's message (the reconcile handlers would fail it with the same,
:mod:`sarl_operator.experiment_handlers`, :mod:`sarl_operator.study_handlers`). The checks are
:func:`sarl.plan.check_plan` / :func:`sarl.plan.check_study_plan`, the same the operator and
``sarl submit`` run, with the platform store's room from ``SARL_STORE_CAPACITY``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from sarl.integrations.cluster import fill_chat_urls
from sarl.plan import check_plan, check_study_plan
from sarl.spec.loader import load_study, validate_document
from sarl.spec.secrets import redact_text
from sarl.spec.study import STUDY_KIND
from sarl_operator.platform_settings import DEFAULT_PLATFORM, Platform
from sarl_operator.tenant_policy import violations
from sarl_operator.tenant_review import study_violations

#: Stands in for the URL of a chat endpoint the operator serves, so such a spec validates.
_SERVED: Final = "http://served-by-the-sarl-operator.invalid/openai"


def _document(body: Mapping[str, Any]) -> dict[str, Any]:
    meta = body.get("metadata") or {}
    spec = body.get("spec") or {}
    return {
        "apiVersion": body.get("apiVersion"),
        "kind": body.get("kind"),
        "metadata": {"name": meta.get("name"), "namespace": meta.get("namespace")},
        "spec": fill_chat_urls(dict(spec), _SERVED) if isinstance(spec, Mapping) else spec,
    }


def spec_violation(
    body: Mapping[str, Any], store_capacity: int | None, platform: Platform = DEFAULT_PLATFORM
) -> str | None:
    """Why ``body``'s spec is invalid (the loader's message, naming the field), reaches outside
    its namespace's tenant policy on ``platform`` (:mod:`sarl_operator.tenant_review`, as the
    handlers check it) or its plan does not fit, or None. Run by the webhook within
    :func:`~sarl_operator.tenant_specs.for_cluster`, so a reward is a registered or
    allow-listed name, never imported."""
    doc = _document(body)
    namespace = str(doc["metadata"]["namespace"] or "")
    try:
        if doc["kind"] == STUDY_KIND:
            study = load_study(doc)
            expanded = study.runs()
            runs = [(f"{r.arm}, seed {r.seed}", r.experiment) for r in expanded]
            refused = study_violations(study, expanded, namespace, platform)
        else:
            study, runs = None, [("", validate_document(doc))]
            refused = violations(runs[0][1], namespace, platform)
    except ValueError as e:  # SpecError, or a Study's runs that do not expand
        return redact_text(str(e))
    if refused:
        return redact_text("; ".join(refused))
    try:
        if study is not None:  # the Study's total first: it is what the store must hold
            check_study_plan(study, store_capacity)
        for where, exp in runs:
            try:
                check_plan(exp, store_capacity)
            except ValueError as e:
                raise ValueError(f"{where}: {e}" if where else str(e)) from e
    except ValueError as e:
        return str(e)
    return None
