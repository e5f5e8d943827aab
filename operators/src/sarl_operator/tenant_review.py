"""The tenant policy applied to what the handlers and the webhook validated: an Experiment, or a
Study's base and every arm x seed run.

Called by :func:`sarl_operator.experiment_handlers.experiment_from_body` and
:func:`sarl_operator.study_handlers.study_from_body` (so reconcile fails the object, and the
status timers create nothing, evaluation Jobs and a Study's runs included, for a spec outside
the policy: the same path as an invalid spec, ``InvalidSpec``) and by
:func:`sarl_operator.admission_plan.spec_violation` (the webhook's refusal). The checks are
:func:`sarl_operator.tenant_policy.violations`; this module names the Study's fields: a message
about the base reads ``spec.base.<field>``, one only an arm's override causes
``spec.arms[i] (<arm>, seed <s>): spec.<field>``, each once.
"""

from __future__ import annotations

from collections.abc import Sequence

from sarl.spec.experiment import Experiment
from sarl.spec.loader import SpecError
from sarl.spec.secrets import redact_text
from sarl.spec.study import Study, StudyRun
from sarl_operator import study_builders
from sarl_operator.platform_settings import Platform
from sarl_operator.tenant_policy import violations

_SPEC = "spec."


def refuse(messages: Sequence[str]) -> None:
    """Raise the SpecError the handlers report (joined, redacted) when there are messages."""
    if messages:
        raise SpecError(redact_text("; ".join(messages)))


def refuse_outside_policy(exp: Experiment, namespace: str, platform: Platform) -> None:
    """Raise SpecError when ``exp`` in ``namespace`` reaches outside its tenant policy."""
    refuse(violations(exp, namespace, platform))


def study_violations(
    study: Study, runs: Sequence[StudyRun], namespace: str, platform: Platform
) -> list[str]:
    """What the Study's base (the parent run, the report Job) and its ``runs`` (those
    :meth:`Study.runs` expands to) reach outside the tenant policy of ``namespace``."""
    base = violations(study_builders.base_experiment(study, namespace), namespace, platform)
    out = [m.replace(_SPEC, "spec.base.", 1) if m.startswith(_SPEC) else m for m in base]
    arms = [arm.name for arm in study.spec.arms]
    seen: set[tuple[str, str]] = {("", m) for m in base}  # (arm, message); "": the base
    for run in runs:
        where = f"spec.arms[{arms.index(run.arm)}] ({run.arm}, seed {run.seed})"
        for message in violations(run.experiment, namespace, platform):
            if ("", message) not in seen and (run.arm, message) not in seen:
                seen.add((run.arm, message))
                out.append(f"{where}: {message}")
    return out


def refuse_study(
    study: Study, runs: Sequence[StudyRun], namespace: str, platform: Platform
) -> None:
    """Raise SpecError when the Study reaches outside its tenant policy
    (:func:`study_violations`)."""
    refuse(study_violations(study, runs, namespace, platform))
