"""``sarl reward diagnose NAME [NAME ...]``: does a reward rank correct responses above wrong ones?

Reads traces with a known answer (JSON Lines: ``response``, ``ground_truth`` or ``answer``, and
the ``--group-by`` field, ``prompt`` by default), scores every line with each reward named
(:class:`~sarl.cli.offline_scoring.OfflineScorer`, the engine of ``sarl reward score``: group
rewards get whole groups, a line a reward cannot score is that reward's loss only), marks each
response correct or not (:func:`sarl.rewards.math_answer.response_correct`, the ``ground_truth``
reward's rule) and prints, for every reward and each of its components, the validity figures of
:mod:`sarl.evaluation.validity` with bootstrap intervals over prompts
(:mod:`sarl.evaluation.diagnosis`), beside the trivial predictors "has an answer" and "answer
format is valid" (:mod:`sarl.evaluation.trivial`; a figure that does not beat them is flagged):
one table, the rewards side by side (:mod:`sarl.cli.diagnose_table`), or ``--json``; ``--plot``
draws them (:mod:`sarl.viz.validity`).

Settings are ``sarl reward score``'s (a YAML or JSON file per reward, validated by its typed
settings model), given as ``--settings NAME=FILE`` (or ``FILE`` alone with one reward). A line
that is not a JSON object with a string ``response``, a ground truth and a group key is skipped
with its reason on stderr; so is, for one reward, a line that reward could not score. Exit codes
are :mod:`sarl.cli.lines`'s: 0 every line used by every reward; 1 some lines skipped (the figures
are over the others); 2 bad options, or no line usable (an empty input, no ground truth
anywhere); 3 internal error.
"""

from __future__ import annotations

import io
import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Annotated, Any

import typer

from sarl.cli import diagnose_table, lines
from sarl.cli import options as opt
from sarl.cli.lines import EXIT_INVALID_LINES, EXIT_OK
from sarl.rewards.samples import GroupKey, SampleError, group_key, json_type, response_field

if TYPE_CHECKING:
    from sarl.evaluation.diagnosis import FigureDiagnosis
    from sarl.rewards.base import Reward

#: Fields tried for the ground truth, in order, when ``--truth-field`` is not given.
TRUTH_FIELDS = ("ground_truth", "answer")
#: Skipped lines named on stderr (the rest are counted).
SHOWN_SKIPS = 5

NamesArg = Annotated[
    list[str],
    typer.Argument(
        metavar="NAME",
        help="Registered rewards (see `sarl rewards`) or package.module:Class, one or more.",
        show_default=False,
    ),
]
SettingsOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--settings",
        "-s",
        help="A reward's settings: NAME=FILE (YAML or JSON, checked by its typed settings "
        "model); FILE alone when one reward is named. Repeatable.",
        metavar="NAME=FILE",
        show_default=False,
    ),
]
GroupByOpt = Annotated[
    str,
    typer.Option(
        "--group-by",
        "-g",
        help="Field whose exact value groups the responses to one prompt (pairs are within a "
        "group; group rewards score whole groups).",
        metavar="FIELD",
    ),
]
TruthOpt = Annotated[
    str | None,
    typer.Option(
        "--truth-field",
        help="Field holding each line's ground truth (default: ground_truth, else answer).",
        metavar="FIELD",
        show_default=False,
    ),
]
ResamplesOpt = Annotated[
    int,
    typer.Option("--resamples", min=1, help="Bootstrap resamples of the prompts.", metavar="N"),
]
SeedOpt = Annotated[int, typer.Option("--seed", help="Seed of the bootstrap.", metavar="N")]
ConfidenceOpt = Annotated[
    float,
    typer.Option(
        "--confidence",
        min=0.5,
        max=0.999,
        help="Confidence of the intervals.",
        metavar="LEVEL",
    ),
]
PlotOpt = Annotated[
    Path | None,
    typer.Option(
        "--plot",
        help="Also draw the figures with their intervals to this PNG file.",
        metavar="FILE",
        show_default=False,
    ),
]
JsonOpt = Annotated[
    bool, typer.Option("--json", help="Print one JSON document instead of the table.")
]


@dataclass(frozen=True, slots=True)
class Trace:
    """One usable line: its number, the object as the rewards see it, truth and group."""

    number: int
    obj: dict[str, Any]
    response: str
    truth: str
    group: GroupKey


@dataclass
class Traces:
    """The usable lines, and ``(line, reason)`` of each line skipped."""

    lines: int = 0
    usable: list[Trace] = field(default_factory=list)
    skipped: list[tuple[int, str]] = field(default_factory=list)


def diagnose_command(
    names: NamesArg,
    input: lines.InputOpt = "-",
    settings: SettingsOpt = None,
    group_by: GroupByOpt = "prompt",
    truth_field: TruthOpt = None,
    resamples: ResamplesOpt = 1000,
    seed: SeedOpt = 0,
    confidence: ConfidenceOpt = 0.95,
    plot: PlotOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Measure how well rewards rank correct responses above wrong ones, on traces with answers.

    Fields of a line:
    response = the text scored;
    ground_truth (or answer, or --truth-field) = the reference answer (string or number);
    prompt (or the --group-by field) = the prompt whose responses are compared with each other;
    any field a reward reads (see `sarl reward score -h`).

    Printed per reward, per reward component and per trivial predictor:
    trivial.has_answer and trivial.format_valid = a boxed answer; a well-formed one;
    within-prompt AUROC (headline) = (correct, incorrect) pairs of a prompt ordered right;
    ties count 1/2;
    pooled AUROC = P(a correct response scores above an incorrect one), 0.5 = chance;
    pair agreement, pair ties = the pairs ordered right, tied;
    vs trivial = minus the strongest trivial predictor ("below trivial": not beaten);
    \\[low, high] = bootstrap interval over prompts (a warning under 20 prompts with pairs);
    n, prompts, pairs = responses with a value, prompts with pairs / with a value, pairs.
    A response is correct when its last \\boxed{} answer equals the truth.

    Exit codes:
    0 = every line used by every reward;
    1 = some lines skipped (their reasons on stderr);
    2 = bad options or settings, or no usable line;
    3 = internal error.
    """
    if not group_by:
        raise opt.fail("--group-by: must name a field")
    if truth_field == "":
        raise opt.fail("--truth-field: must name a field")
    parsed = _all_settings(names, settings)
    with lines.open_input(input) as stream:
        traces = read_traces(stream, group_by, truth_field)
    _check_usable(traces, input, truth_field)
    built = _build_all(parsed)
    try:
        with lines.internal_errors():
            columns, failed = score_traces(built, traces.usable, group_by)
    finally:
        for reward in built.values():
            reward.close()
    with lines.internal_errors():
        rows = _diagnose(columns, traces.usable, resamples, confidence, seed)
    _report_skips(traces.skipped, failed)
    context = _context(input, traces, failed, group_by, truth_field, resamples, confidence, seed)
    if as_json:
        from sarl.evaluation.diagnosis import diagnosis_json

        typer.echo(json.dumps(diagnosis_json(rows, context), allow_nan=False))
    else:
        diagnose_table.print_table(rows, context)
    if plot is not None:
        diagnose_table.plot(rows, context, plot)
    partial = traces.skipped or any(failed.values())
    raise typer.Exit(code=EXIT_INVALID_LINES if partial else EXIT_OK)


# -- options ---------------------------------------------------------------------------------------


def _all_settings(names: Sequence[str], given: Sequence[str] | None) -> dict[str, Any]:
    """Each NAME's validated settings (exit 2 naming the reward, the file or the field)."""
    from sarl.cli.reward_score import _settings

    if len(set(names)) != len(names):
        twice = sorted({n for n in names if names.count(n) > 1})
        raise opt.fail(f"NAME: {', '.join(twice)} named twice (each reward once)")
    files = settings_files(names, given or [])
    return {name: _settings(name, files.get(name)) for name in names}


def settings_files(names: Sequence[str], given: Sequence[str]) -> dict[str, Path]:
    """``--settings`` values as reward -> file: ``NAME=FILE``, or ``FILE`` with one reward."""
    out: dict[str, Path] = {}
    for value in given:
        name, sep, path = value.partition("=")
        if sep and name in names:
            target, file = name, path
        elif len(names) == 1:
            target, file = names[0], value
        else:
            raise opt.fail(
                f"--settings {value!r}: with several rewards give NAME=FILE, NAME one of "
                f"{', '.join(names)}"
            )
        if target in out:
            raise opt.fail(f"--settings: two files for reward {target!r}")
        out[target] = Path(file)
    return out


def _build_all(settings: Mapping[str, Any]) -> dict[str, Reward]:
    from sarl.cli.reward_score import _build

    built: dict[str, Reward] = {}
    try:
        for name, parsed in settings.items():
            built[name] = _build(name, parsed)
    except typer.Exit:
        for reward in built.values():
            reward.close()
        raise
    return built


# -- reading ---------------------------------------------------------------------------------------


def read_traces(stream: IO[bytes], group_by: str, truth_field: str | None) -> Traces:
    """Every line of ``stream``: usable (a :class:`Trace`) or skipped with its reason."""
    traces = Traces()
    for number, raw in lines.numbered_lines(stream):
        traces.lines += 1
        try:
            traces.usable.append(parse_trace(number, raw, group_by, truth_field))
        except lines.LINE_ERRORS as e:
            traces.skipped.append((number, lines.one_line(e)))
    return traces


def parse_trace(number: int, raw: bytes, group_by: str, truth_field: str | None) -> Trace:
    """One line as a :class:`Trace`; a ValueError subclass names the field and the fix."""
    obj = lines.decode_json(raw)
    response = response_field(obj)
    truth = _truth(obj, truth_field)
    key = group_key(obj, group_by)
    # The rewards read the truth as ground_truth (ground_truth, tag_lcs, ...), whatever its field.
    return Trace(number, {**obj, "ground_truth": truth}, response, truth, key)


def _truth(obj: Mapping[str, Any], truth_field: str | None) -> str:
    """The ground truth of one line as text (dataset answers are often numbers)."""
    fields = (truth_field,) if truth_field else TRUTH_FIELDS
    name = next((f for f in fields if obj.get(f) is not None), None)
    if name is None:
        wanted = " or ".join(fields)
        fix = "" if truth_field else " (or name the field with --truth-field)"
        raise SampleError(f"{wanted}: missing or null: give the line its reference answer{fix}")
    value = obj[name]
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise SampleError(f"{name}: expected a string or a number, got {json_type(value)}")
    return value if isinstance(value, str) else str(value)


def _check_usable(traces: Traces, path: str, truth_field: str | None) -> None:
    """Exit 2 when no line can be used: nothing to measure (the first reasons said)."""
    if traces.usable:
        return
    if not traces.lines:
        raise opt.fail(
            f"--input {path}: no lines; expected JSON Lines with response, ground_truth and "
            "prompt fields"
        )
    by_reason: dict[str, list[int]] = {}
    for number, why in traces.skipped:
        by_reason.setdefault(why, []).append(number)
    reasons = "; ".join(
        f"line {', '.join(map(str, numbers[:3]))}{' ...' if len(numbers) > 3 else ''}: {why}"
        for why, numbers in list(by_reason.items())[:3]
    )
    raise opt.fail(f"--input {path}: no usable line of {traces.lines}: {reasons}")


# -- scoring ---------------------------------------------------------------------------------------


def score_traces(
    rewards: Mapping[str, Reward], traces: Sequence[Trace], group_by: str
) -> tuple[dict[str, dict[str, list[float]]], dict[str, list[tuple[int, str]]]]:
    """``columns[reward][figure]``: each trace's score and components (NaN where undefined or
    not scored), and ``failed[reward]``: ``(line, reason)`` of the traces it could not score."""
    from sarl import progress
    from sarl.cli.offline_scoring import OfflineScorer
    from sarl.cli.score_summary import show_progress

    payload = b"".join(json.dumps(t.obj).encode("utf-8") + b"\n" for t in traces)
    columns: dict[str, dict[str, list[float]]] = {}
    failed: dict[str, list[tuple[int, str]]] = {}
    for name, reward in rewards.items():
        figures = ("score", *reward.component_keys)
        values: dict[str, list[float]] = {f: [] for f in figures}
        failed[name] = []
        shown = show_progress()
        with progress.progress_bar(
            total=len(traces) if shown else None,
            desc=f"scoring with {name}",
            unit=" lines",
            file=sys.stderr,
            enabled=shown,
            mininterval=0.5,
            leave=False,
        ) as bar:
            scorer = OfflineScorer(reward, group_by=group_by, progress=bar.update)
            for batch in scorer.results(io.BytesIO(payload)):
                for result in batch:
                    trace = traces[result.number - 1]  # the scorer numbers the payload's lines
                    row = result.row
                    if "error" in row:
                        reason = str(row["error"]).split(": ", 1)[-1]
                        failed[name].append((trace.number, reason))
                    for f in figures:
                        value = row.get(f)
                        values[f].append(float("nan") if value is None else float(value))
        columns[name] = values
    return columns, failed


def _diagnose(
    columns: Mapping[str, Mapping[str, Sequence[float]]],
    traces: Sequence[Trace],
    resamples: int,
    confidence: float,
    seed: int,
) -> list[FigureDiagnosis]:
    from sarl.evaluation.diagnosis import diagnose
    from sarl.evaluation.trivial import trivial_scores
    from sarl.rewards.math_answer import response_correct

    correct = [response_correct(t.response, t.truth) for t in traces]
    groups = [t.group for t in traces]  # exact values: "1" and 1 are two prompts
    baselines = trivial_scores([t.response for t in traces])
    return diagnose(
        columns,
        correct,
        groups,
        baselines=baselines,
        resamples=resamples,
        confidence=confidence,
        seed=seed,
    )


# -- output ----------------------------------------------------------------------------------------


def _report_skips(skipped: Sequence[tuple[int, str]], failed: Mapping[str, Sequence[Any]]) -> None:
    """Skipped lines and lines a reward could not score, on stderr (the first few named)."""
    for what, items in (
        ("skipped", skipped),
        *((f"not scored by {n}", f) for n, f in failed.items()),
    ):
        if not items:
            continue
        typer.echo(f"warning: {len(items)} lines {what}:", err=True)
        for number, why in list(items)[:SHOWN_SKIPS]:
            typer.echo(f"  line {number}: {why}", err=True)
        if len(items) > SHOWN_SKIPS:
            typer.echo(f"  ... and {len(items) - SHOWN_SKIPS} more", err=True)


def _context(
    path: str,
    traces: Traces,
    failed: Mapping[str, Sequence[Any]],
    group_by: str,
    truth_field: str | None,
    resamples: int,
    confidence: float,
    seed: int,
) -> dict[str, Any]:
    from sarl.rewards.math_answer import response_correct

    usable = traces.usable
    return {
        "input": path,
        "lines": traces.lines,
        "responses": len(usable),
        "correct": sum(response_correct(t.response, t.truth) for t in usable),
        "groups": len({t.group for t in usable}),
        "skipped": len(traces.skipped),
        "not_scored": {name: len(items) for name, items in failed.items()},
        "group_by": group_by,
        "truth_field": truth_field or " or ".join(TRUTH_FIELDS),
        "resamples": resamples,
        "confidence": confidence,
        "seed": seed,
    }


__all__ = ["TRUTH_FIELDS", "Trace", "Traces", "diagnose_command", "parse_trace", "read_traces"]
