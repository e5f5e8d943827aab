"""The operator's kopf registration: every handler, for both kinds, in one place.

Run by ``kopf run --standalone -m sarl_operator.handlers`` (charts/sarl-platform,
operators/Dockerfile): kopf registers handlers when their module is imported, and importing
this module registers

* ``on_experiment`` and ``on_timer`` for ``experiments.sarl.dev``
  (:mod:`sarl_operator.experiment_handlers`);
* ``on_study`` and ``on_study_timer`` for ``studies.sarl.dev``
  (:mod:`sarl_operator.study_handlers`);
* the admission webhook's handlers (:mod:`sarl_operator.admission`);
* ``post_only_warnings_as_events``, the operator's startup settings.

Each handler passes its kind's module the cluster client (built once) and the process settings
(read from the environment at each call); those modules know neither kopf's registry nor each
other, and share their plumbing through :mod:`sarl_operator.reconcile`. The handler names are
kopf's handler ids (kept in the objects' annotations while kopf retries a handler).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, MutableMapping
from typing import Any, Final, Protocol

import kopf

from sarl_operator import (
    admission,  # noqa: F401  (registers the webhook handlers)
    experiment_handlers,
    study_handlers,
    tenant_specs,
)
from sarl_operator.kube import DynamicKubeApi, KubeApi
from sarl_operator.reconcile import GROUP, VERSION, PostEvent, Settings, status_interval_s

_API: KubeApi | None = None


def cluster_api() -> KubeApi:
    global _API
    if _API is None:
        _API = DynamicKubeApi()
    return _API


def _kopf_event(obj: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
    kopf.event(obj, type=type_, reason=reason, message=message)  # type: ignore[arg-type]


class _Work(Protocol):
    """A kind's reconcile or timer work (``reconcile``, ``refresh`` of either handler module)."""

    def __call__(
        self,
        body: Mapping[str, Any],
        patch: MutableMapping[str, Any],
        api: KubeApi,
        *,
        settings: Settings,
        post_event: PostEvent,
    ) -> None: ...


def _run(work: _Work, body: kopf.Body, patch: kopf.Patch) -> None:
    """``work`` on a tenant's object: its spec validated for the cluster (no module it names is
    imported, :func:`~sarl_operator.tenant_specs.for_cluster`). The kinds' modules fail the
    object for what validating its spec raises; whatever else is not an Exception (kopf handles
    those: logged, retried) stops only this object here, never the operator's event loop."""
    settings = Settings.from_env(os.environ)
    try:
        with tenant_specs.for_cluster(os.environ):
            work(body, patch, cluster_api(), settings=settings, post_event=_kopf_event)
    except Exception:
        raise
    except tenant_specs.STOPS:
        raise
    except BaseException as e:  # SystemExit and the like, raised by what a spec made us run
        raise kopf.PermanentError(f"stopped by {type(e).__name__}; not retried") from e


# kopf fixes a timer's interval when the decorator runs, so this one setting is read at import.
_INTERVAL_S: Final = status_interval_s(os.environ)


@kopf.on.resume(GROUP, VERSION, experiment_handlers.PLURAL)
@kopf.on.create(GROUP, VERSION, experiment_handlers.PLURAL)
@kopf.on.update(GROUP, VERSION, experiment_handlers.PLURAL, field="spec")
def on_experiment(body: kopf.Body, patch: kopf.Patch, **_: Any) -> None:
    _run(experiment_handlers.reconcile, body, patch)


@kopf.on.startup()
def post_only_warnings_as_events(settings: kopf.OperatorSettings, **_: Any) -> None:
    """kopf turns every INFO line logged about an object into a Kubernetes Event (posting.level
    INFO by default; the filter of ``K8sPoster`` in kopf 1.45 ``_core/engines/posting.py``),
    "Timer 'on_timer' succeeded." included: one API write per Experiment and Study at every
    status tick. Only warnings and errors are posted from the log; the operator's own Events
    (phase and condition transitions, ``kopf.event``, which that level does not filter) stay."""
    settings.posting.level = logging.WARNING


@kopf.timer(
    GROUP, VERSION, experiment_handlers.PLURAL, interval=_INTERVAL_S, initial_delay=_INTERVAL_S
)
def on_timer(body: kopf.Body, patch: kopf.Patch, **_: Any) -> None:
    _run(experiment_handlers.refresh, body, patch)


@kopf.on.resume(GROUP, VERSION, study_handlers.PLURAL)
@kopf.on.create(GROUP, VERSION, study_handlers.PLURAL)
@kopf.on.update(GROUP, VERSION, study_handlers.PLURAL, field="spec")
def on_study(body: kopf.Body, patch: kopf.Patch, **_: Any) -> None:
    _run(study_handlers.reconcile, body, patch)


@kopf.timer(GROUP, VERSION, study_handlers.PLURAL, interval=_INTERVAL_S, initial_delay=_INTERVAL_S)
def on_study_timer(body: kopf.Body, patch: kopf.Patch, **_: Any) -> None:
    _run(study_handlers.refresh, body, patch)
