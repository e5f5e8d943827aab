"""A tenant's spec inside the operator: validated for a cluster, and nothing it raises escapes.

On a cluster a spec is a tenant's untrusted input, and the operator (with its admission webhook)
serves every team: whatever a spec makes validation raise must end that object Failed (or its
request refused), never the operator.

* :func:`for_cluster`: the one switch the operator sets around a tenant's spec —
  :mod:`sarl_operator.handlers` around every kopf handler's work, :mod:`sarl_operator.admission`
  around the webhook's checks. Within it a reward is a registered name, or a dotted path under the
  platform's allow-list (``SARL_ALLOWED_REWARD_MODULES``, chart ``operator.allowedRewardModules``)
  accepted **without importing it** (:mod:`sarl.rewards.cluster_names`); no module a spec names is
  ever imported here.
* :func:`as_spec_error`: any exception raised while validating or planning a spec, as the
  :class:`~sarl.spec.loader.SpecError` the handlers report (``Ready=False``, ``InvalidSpec``):
  a ValueError keeps its message (it names the field), anything else — ``SystemExit`` and other
  ``BaseException`` included — becomes ``spec could not be validated: <type>`` (its text may hold
  the tenant's input, so it is not shown). Only what stops the operator itself passes
  (:data:`STOPS`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import Final

from sarl.rewards.cluster_names import allowed_reward_modules, validating_for_cluster
from sarl.spec.loader import SpecError

#: What kopf and the interpreter stop a handler with: passed on, never turned into a status.
STOPS: Final = (KeyboardInterrupt, asyncio.CancelledError)


def for_cluster(env: Mapping[str, str]) -> AbstractContextManager[None]:
    """Validate within as for a tenant's spec on this platform (reward modules from ``env``);
    ValueError naming ``SARL_ALLOWED_REWARD_MODULES`` when an entry of it is not a module."""
    return validating_for_cluster(allowed_reward_modules(env))


def as_spec_error(error: BaseException) -> SpecError:
    """``error``, raised while validating or planning a spec, as a SpecError whose message the
    status may show; re-raises ``error`` when it is one of :data:`STOPS`."""
    if isinstance(error, STOPS):
        raise error
    if isinstance(error, ValueError):  # SpecError included: its message names the field
        return SpecError(str(error))
    return SpecError(f"spec could not be validated: {type(error).__name__}")
