"""Score JSON lines with any registered reward, line by line or group by group: the engine of
``sarl reward score`` (the command, options and output files are in ``reward_score.py``).

Each line is decoded (:mod:`sarl.cli.lines`), turned into a :class:`~sarl.rewards.base.Sample`
(:mod:`sarl.rewards.samples`) and checked for the fields its reward needs
(:mod:`sarl.rewards.inputs`); a line failing any of that gets its error object and takes no part
in scoring. Then:

* a per-sample reward scores the valid lines of each chunk of :data:`~sarl.cli.lines.CHUNK_LINES`
  in one ``score_groups`` call (one group per line, so remote work is batched), streaming;
* a group reward (``needs_group``) needs every member of a group, and members may be anywhere in
  the file, so the whole input is read first; lines are grouped by the exact value of the
  ``group_by`` field (a line without it is an error naming the field), and groups are scored in
  batches of about a chunk's worth of samples. A group with an invalid member is scored with its
  valid members (for TTRL a majority among those, for EMPO frequencies among those).

Isolation: when a batch call raises one of :data:`SCORING_ERRORS`, its groups are scored again
one by one, so the error lands on the group (for a per-sample reward, the line) that caused it
and never changes another group's result. A reward raising anything else is a bug: it propagates
(exit 3). The cost of that fallback is one call per group when a shared dependency fails (an
embedding service down): every line then reports the failure.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import IO, Any

from sarl.cli import lines
from sarl.rewards.base import Reward, RewardOutput, Sample
from sarl.rewards.inputs import RewardInputs, inputs_of, missing_field
from sarl.rewards.samples import GroupKey, SampleError, group_key, parse_sample

#: What a reward may raise for the samples it was given (a bad sample, a remote call that
#: failed): that batch's error, isolated to the group that caused it. Anything else is a bug.
SCORING_ERRORS = (ValueError, ArithmeticError, RecursionError, RuntimeError, OSError)


class RewardContractError(Exception):
    """A reward returned outputs that do not mirror its input groups (a bug, exit 3)."""


@dataclass(frozen=True, slots=True)
class LineResult:
    """The output object of one input line, and its sample when it was scored."""

    number: int
    row: dict[str, Any]
    sample: Sample | None = None


@dataclass(frozen=True, slots=True)
class _Parsed:
    number: int
    sample: Sample
    key: GroupKey | None


def output_row(out: RewardOutput) -> dict[str, Any]:
    """``{"score": ..., <component>: ...}``; NaN and infinities become null (strict JSON)."""
    row = {"score": out.score, **out.components}
    return {k: (float(v) if math.isfinite(v) else None) for k, v in row.items()}


def score_isolated(
    reward: Reward, groups: Sequence[Sequence[Sample]]
) -> list[list[RewardOutput] | str]:
    """Each group's outputs, or the message of the error scoring that group alone raised."""
    try:
        outputs = reward.score_groups(groups)
    except SCORING_ERRORS as e:
        if len(groups) == 1:
            return [lines.one_line(e)]
        return [score_isolated(reward, [group])[0] for group in groups]
    sizes = [len(g) for g in outputs]
    if len(outputs) != len(groups) or sizes != [len(g) for g in groups]:
        raise RewardContractError(
            f"reward {reward.name!r} returned groups of sizes {sizes[:10]} for groups of sizes "
            f"{[len(g) for g in groups][:10]}"
        )
    return list(outputs)


class OfflineScorer:
    """Scores the lines of one input with ``reward`` (see the module docstring).

    ``progress`` is called with the number of lines each finished batch covered.
    """

    def __init__(
        self,
        reward: Reward,
        *,
        group_by: str,
        chunk_lines: int = lines.CHUNK_LINES,
        progress: Callable[[int], object] = lambda n: None,
    ) -> None:
        self.reward = reward
        self.group_by = group_by
        self.chunk_lines = chunk_lines
        self.inputs: RewardInputs = inputs_of(reward)
        self._progress = progress

    def results(self, stream: IO[bytes]) -> Iterator[list[LineResult]]:
        """Batches of line results; concatenated, one per input line in input order."""
        numbered = lines.numbered_lines(stream)
        if not self.reward.needs_group:
            for chunk in lines.chunks(numbered, self.chunk_lines):
                yield self._score_lines(chunk)
            return
        everything = list(numbered)
        if everything:
            yield self._score_lines(everything)

    def parse(self, number: int, raw: bytes) -> _Parsed:
        """One line as a sample (and its group key for a group reward); ValueError if invalid."""
        obj = lines.decode_json(raw)
        sample = parse_sample(obj)
        field = missing_field(sample, self.inputs)
        if field is not None:
            raise SampleError(f"{field}: missing or null (reward {self.reward.name!r} needs it)")
        key = group_key(obj, self.group_by) if self.reward.needs_group else None
        return _Parsed(number, sample, key)

    def _score_lines(self, numbered: list[tuple[int, bytes]]) -> list[LineResult]:
        results: dict[int, LineResult] = {}
        valid: list[_Parsed] = []
        for number, raw in numbered:
            try:
                valid.append(self.parse(number, raw))
            except lines.LINE_ERRORS as e:
                results[number] = LineResult(number, lines.line_error(number, lines.one_line(e)))
        invalid = len(numbered) - len(valid)
        if invalid:
            self._progress(invalid)
        for batch in self._batches(valid):
            outcomes = score_isolated(self.reward, [[p.sample for p in group] for group in batch])
            for group, outcome in zip(batch, outcomes, strict=True):
                for k, parsed in enumerate(group):
                    results[parsed.number] = _result(parsed, outcome, k)
            self._progress(sum(len(group) for group in batch))
        return [results[number] for number, _ in numbered]

    def _batches(self, valid: list[_Parsed]) -> Iterator[list[list[_Parsed]]]:
        """Groups (one per line for per-sample rewards) packed into batches of about
        ``chunk_lines`` samples; a larger group is a batch of its own."""
        groups: dict[object, list[_Parsed]] = {}
        for parsed in valid:
            key = parsed.key if self.reward.needs_group else parsed.number  # "1" != 1: exact
            groups.setdefault(key, []).append(parsed)
        batch: list[list[_Parsed]] = []
        size = 0
        for group in groups.values():
            if batch and size + len(group) > self.chunk_lines:
                yield batch
                batch, size = [], 0
            batch.append(group)
            size += len(group)
        if batch:
            yield batch


def _result(parsed: _Parsed, outcome: list[RewardOutput] | str, index: int) -> LineResult:
    if isinstance(outcome, str):
        error = lines.line_error(parsed.number, f"scoring failed: {outcome}")
        return LineResult(parsed.number, error)
    return LineResult(parsed.number, output_row(outcome[index]), parsed.sample)
