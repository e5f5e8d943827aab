"""``sarl reward score NAME``: score existing traces offline with any registered reward.

The line contract and exit codes are ``sarl reward structure``'s (:mod:`sarl.cli.lines`); the
scoring engine (samples, groups, isolation of failures) is :mod:`sarl.cli.offline_scoring`; the
fields each reward reads are :mod:`sarl.rewards.inputs`'s table. This module holds the command:
options, the ``--settings`` file (validated by the reward's own typed settings model, so remote
endpoints — embedder, judge, decomposer — are the URLs given there, as in training), the output
(stdout, or ``--out DIR/scores.jsonl`` plus reasoning maps for ``structure``), the progress bar
and the summary (:mod:`sarl.cli.score_summary`).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, TYPE_CHECKING, Annotated, Any, TextIO

import typer
from pydantic import BaseModel

from sarl.cli import lines
from sarl.cli import options as opt
from sarl.cli.lines import EXIT_INVALID_LINES, EXIT_OK
from sarl.rewards.base import Reward, Sample
from sarl.rewards.inputs import reward_inputs
from sarl.rewards.registry import RewardConfigError, get_reward_class, parse_settings

if TYPE_CHECKING:
    from sarl.cli.score_summary import Summary

#: Reasoning maps ``--out`` draws for ``structure`` when ``--maps`` is not given.
DEFAULT_MAPS = 8

NameArg = Annotated[
    str,
    typer.Argument(
        metavar="NAME",
        help="Registered reward (see `sarl rewards`) or package.module:Class.",
        show_default=False,
    ),
]
SettingsOpt = Annotated[
    Path | None,
    typer.Option(
        "--settings",
        "-s",
        help="YAML or JSON file with the reward's settings (checked by its typed settings model).",
        metavar="FILE",
        show_default=False,
    ),
]
GroupByOpt = Annotated[
    str,
    typer.Option(
        "--group-by",
        "-g",
        help="Field whose exact value groups lines, for group rewards (ttrl, empo, tag_lcs).",
        metavar="FIELD",
    ),
]
OutOpt = Annotated[
    Path | None,
    typer.Option(
        "--out",
        "-o",
        help="Directory for scores.jsonl (instead of stdout) and structure maps.",
        metavar="DIR",
        show_default=False,
    ),
]
MapsOpt = Annotated[
    int | None,
    typer.Option(
        "--maps",
        min=0,
        help=f"structure with --out: reasoning maps of the first N scored lines ({DEFAULT_MAPS}).",
        metavar="N",
        show_default=False,
    ),
]


def score_command(
    name: NameArg,
    input: lines.InputOpt = "-",
    settings: SettingsOpt = None,
    group_by: GroupByOpt = "prompt",
    out: OutOpt = None,
    maps: MapsOpt = None,
) -> None:
    """Score each JSON line's response with the reward NAME; a summary goes to stderr.

    Fields of a line (others reach the reward as Sample.extra):
    response = the text scored (every reward);
    prompt = the problem (optional);
    ground_truth = needed by ground_truth, ground_truth_math_verify, structured_qa, tag_lcs, rlkd;
    teacher = rlkd's teacher path or steps;
    --group-by field = groups of ttrl, empo, tag_lcs (exact value).

    Output: one JSON object per input line, in order.
    A scored line: {"score": ..., <component>: ...} (NaN as null).
    A line that could not be scored: {"error": "line N: ...", "line": N}.
    A group with invalid lines is scored with its valid ones.

    Exit codes:
    0 = every line scored;
    1 = some lines could not be scored (see their error objects);
    2 = bad options or settings;
    3 = internal error (one line on stderr; output stops).
    """
    parsed = _settings(name, settings)
    if not group_by:
        raise opt.fail("--group-by: must name a field")
    n_maps = _maps_wanted(name, out, maps)
    with lines.open_input(input) as stream:
        reward = _build(name, parsed)
        try:
            with _output(out) as sink, lines.internal_errors():
                summary, drawn = _run(reward, stream, sink, group_by, input, n_maps, out)
        finally:
            reward.close()
    from sarl.cli.score_summary import print_summary  # rich and tqdm: only when scoring

    print_summary(summary, reward.name)
    if out is not None:
        maps_note = f" and {drawn} reasoning maps" if n_maps else ""
        typer.echo(f"wrote {summary.lines} results to {out / 'scores.jsonl'}{maps_note}", err=True)
    raise typer.Exit(code=EXIT_INVALID_LINES if summary.invalid else EXIT_OK)


def _settings(name: str, path: Path | None) -> BaseModel:
    """The reward's validated settings from ``--settings`` (defaults without it); exit 2 naming
    the file or the field otherwise."""
    try:
        cls = get_reward_class(name)
    except RewardConfigError as e:
        raise opt.fail(str(e)) from e
    why = reward_inputs(getattr(cls, "name", name)).offline
    if why is not None:
        raise opt.fail(f"reward {name!r} cannot score existing traces: {why}")
    try:
        return parse_settings(name, _load_settings(path))
    except RewardConfigError as e:
        raise opt.fail(f"--settings: {e}") from e


def _load_settings(path: Path | None) -> dict[str, Any]:
    if path is None:
        return {}
    if not path.is_file():
        raise opt.fail(f"--settings: no such file {str(path)!r}")
    from sarl.spec.documents import DocumentError, parse_yaml, read_spec_file

    try:  # YAML is a superset of JSON; the spec files' limits (size, depth, aliases) hold
        data = parse_yaml(read_spec_file(path), str(path))
    except DocumentError as e:
        raise opt.fail(f"--settings: not valid YAML or JSON: {lines.one_line(e)}") from e
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise opt.fail(f"--settings {path}: expected a mapping of setting names to values")
    return data


def _maps_wanted(name: str, out: Path | None, maps: int | None) -> int:
    """How many reasoning maps to draw: only ``structure`` has maps, and only into ``--out``."""
    is_structure = getattr(get_reward_class(name), "name", None) == "structure"
    if maps is not None and not is_structure:
        raise opt.fail(f"--maps: only the structure reward draws reasoning maps, not {name!r}")
    if maps is not None and out is None:
        raise opt.fail("--maps: needs --out DIR (the maps are PNG files there)")
    if out is None or not is_structure:
        return 0
    return DEFAULT_MAPS if maps is None else maps


def _build(name: str, settings: BaseModel) -> Reward:
    """The reward with validated settings; one that cannot be built (a missing model, an
    optional dependency refused) is a usage error, before any line is read."""
    from sarl.rewards.registry import create_reward

    try:
        return create_reward(name, settings)
    except (RewardConfigError, ImportError, OSError, RuntimeError, ValueError) as e:
        raise opt.fail(f"reward {name!r} could not be built: {lines.one_line(e)}") from e


@contextmanager
def _output(out: Path | None) -> Iterator[TextIO]:
    if out is None:
        yield sys.stdout
        return
    try:
        out.mkdir(parents=True, exist_ok=True)
        sink = (out / "scores.jsonl").open("w", encoding="utf-8")
    except OSError as e:
        raise opt.fail(f"--out {out}: {lines.one_line(e)}") from e
    with sink:
        yield sink


def _run(
    reward: Reward,
    stream: IO[bytes],
    sink: TextIO,
    group_by: str,
    path: str,
    n_maps: int,
    out: Path | None,
) -> tuple[Summary, int]:
    """Score every line to ``sink``; the summary, and how many maps were drawn."""
    from sarl.cli.offline_scoring import OfflineScorer
    from sarl.cli.score_summary import Summary, progress_bar

    summary = Summary()
    picked: list[tuple[int, Sample]] = []
    with progress_bar(f"scoring with {reward.name}", path) as bar:
        scorer = OfflineScorer(reward, group_by=group_by, progress=bar.update)
        for batch in scorer.results(stream):
            for result in batch:
                summary.add(result.row)
                sink.write(json.dumps(result.row, allow_nan=False) + "\n")
                if result.sample is not None and len(picked) < n_maps:
                    picked.append((result.number, result.sample))
            sink.flush()
    if not picked or out is None:
        return summary, 0
    return summary, _draw_maps(reward, picked, out)


def _draw_maps(reward: Reward, picked: list[tuple[int, Sample]], out: Path) -> int:
    """Draw the maps; a failure (the embedder gone since scoring) is a warning, not a result."""
    from sarl.cli.maps import draw_line_maps
    from sarl.cli.offline_scoring import SCORING_ERRORS
    from sarl.rewards.structure.reward import StructureReward

    if not isinstance(reward, StructureReward):
        return 0
    try:
        return len(draw_line_maps(reward, picked, out))
    except SCORING_ERRORS as e:
        typer.echo(f"warning: reasoning maps not drawn: {lines.one_line(e)}", err=True)
        return 0
