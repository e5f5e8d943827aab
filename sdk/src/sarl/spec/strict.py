"""The strict pydantic base of the spec documents' models.

Subclassed by the Experiment's models (:mod:`sarl.spec.experiment`), its cluster-only fields
(:mod:`sarl.spec.cluster_fields`) and the Study's models (:mod:`sarl.spec.study`): unknown fields
are refused, models are frozen, numbers are finite, and a validation error never repeats its
input.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class _Strict(BaseModel):
    # hide_input_in_errors: str(ValidationError) would print the offending input, which may be a
    # credential; the loader prints it from .errors(), redacted (sarl.spec.secrets).
    # allow_inf_nan=False: pydantic's lax mode turns the string "1e999" (not a YAML float) into
    # inf; no spec field means infinity (issue 38 item 9).
    model_config = ConfigDict(
        extra="forbid", frozen=True, hide_input_in_errors=True, allow_inf_nan=False
    )
