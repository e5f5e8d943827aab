"""Registry entry ``"tag_format"``: does a completion follow the tagged reasoning format (§3.1)?

Imported lazily by ``sarl.rewards.registry``; used by the adapters next to ``tag_lcs`` or
``tag_maxflow``. The paper trains with "format scoring and max flow scoring (fixed weights 1.0 and
2.0)" (A.7) and says format scoring is part of every reward, but does not spell the format score
out. We take the format §3.1 teaches, ``<think> <tag_i> STEP1 (optional </tag_i>) <tag_j> STEP2 ...
</think> ANSWER``, and score it all or nothing: ``valid_score`` when the parse of
:func:`~sarl.rewards.tagged.tags.parse_completion` finds at least ``min_steps`` steps and no
violation outside ``allowed_violations``, else ``invalid_score``. A per-sample reward.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from sarl.rewards.base import PerSampleReward, RewardOutput, Sample
from sarl.rewards.registry import register_reward
from sarl.rewards.tagged.tags import TAGS, ParsedCompletion, ViolationKind, parse_completion

COMPONENT_KEYS = ("valid", "num_steps", "num_violations")


@dataclass(frozen=True, slots=True)
class FormatResult:
    """Whether the format holds, with the counts behind the decision."""

    valid: bool
    num_steps: int
    #: Violations that count (those not in ``allowed``).
    num_violations: int


def check_format(
    parsed: ParsedCompletion, allowed: Collection[ViolationKind] = (), min_steps: int = 1
) -> FormatResult:
    """Valid iff at least ``min_steps`` steps and no violation outside ``allowed``.

    ``min_steps`` holds whatever ``allowed`` says: allowing ``no_steps`` makes an untagged
    completion valid only with ``min_steps=0``.
    """
    counted = [v for v in parsed.violations if v.kind not in allowed]
    valid = not counted and len(parsed.steps) >= min_steps
    return FormatResult(valid, len(parsed.steps), len(counted))


class TagFormatSettings(BaseModel):
    """What counts as the tagged format, and the two scores."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    valid_score: float = Field(default=1.0, description="Score of a well-formed completion.")
    invalid_score: float = Field(default=0.0, description="Score of any other completion.")
    tags: tuple[str, ...] = Field(
        default=TAGS, min_length=1, description="Tag vocabulary (default: the 23 tags of A.2)."
    )
    min_steps: int = Field(default=1, ge=0, description="Fewest tagged steps a valid one has.")
    allowed_violations: tuple[ViolationKind, ...] = Field(
        default=(),
        description=(
            "Violation kinds that do not fail the format, e.g. 'unknown_tag' to accept tags "
            "outside the vocabulary or 'missing_think_close' for completions without </think>."
        ),
    )


@register_reward
class TagFormatReward(PerSampleReward):
    """All-or-nothing tagged format score of each completion (§3.1 format, A.7 format scoring)."""

    name = "tag_format"
    Settings = TagFormatSettings
    components = COMPONENT_KEYS

    def __init__(self, settings: TagFormatSettings) -> None:
        super().__init__(settings)
        self._settings = settings

    def score_sample(self, sample: Sample, where: tuple[int, int]) -> RewardOutput:
        response = sample.response
        s = self._settings
        result = check_format(
            parse_completion(response, s.tags), frozenset(s.allowed_violations), s.min_steps
        )
        return RewardOutput(
            s.valid_score if result.valid else s.invalid_score,
            {
                "valid": float(result.valid),
                "num_steps": float(result.num_steps),
                "num_violations": float(result.num_violations),
            },
        )
