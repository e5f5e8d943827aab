"""``sarl reward score NAME``: score existing traces offline with any registered reward.

The line contract and exit codes are :mod:`sarl.cli.lines`'s; the scoring engine (samples,
groups, isolation of failures) is :mod:`sarl.cli.offline_scoring`, except for ``structure``,
whose lines follow the structure reward's own contract (``step_labels`` or ``step_embeddings``
may replace the response; the output adds each line's ``labels``): :mod:`sarl.cli.structure_lines`,
also the engine of the hidden old name ``sarl reward structure``. The fields each reward reads are
:mod:`sarl.rewards.inputs`'s table. This module holds the command: options, the reward's settings
(``--settings`` file and ``--set`` overrides, validated by the reward's own typed settings model,
so remote endpoints — embedder, judge, decomposer — are the URLs given there, as in training),
the output (stdout, or ``--out DIR/scores.jsonl`` plus reasoning maps for ``structure``), the
progress bar and the summary (:mod:`sarl.cli.score_summary`).
"""

from __future__ import annotations

import copy
import json
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, TYPE_CHECKING, Annotated, Any, TextIO

import typer
from pydantic import BaseModel

from sarl.cli import lines
from sarl.cli import options as opt
from sarl.cli.lines import EXIT_INVALID_LINES, EXIT_OK
from sarl.rewards.base import Reward
from sarl.rewards.inputs import reward_inputs
from sarl.rewards.registry import RewardConfigError, get_reward_class, parse_settings

if TYPE_CHECKING:
    from sarl.cli.offline_scoring import LineResult
    from sarl.cli.score_summary import Summary
    from sarl.cli.structure_lines import StructureLine
    from sarl.embedding.base import Embedder
    from sarl.rewards.structure.result import StructureResult

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
SetOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--set",
        help="Change one of the reward's settings (after --settings), e.g. --set "
        "clustering=hdbscan or --set embedder.url=http://host:8000 (VALUE is YAML). Repeatable.",
        metavar="KEY=VALUE",
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
    set_: SetOpt = None,
    group_by: GroupByOpt = "prompt",
    out: OutOpt = None,
    maps: MapsOpt = None,
) -> None:
    """Score each JSON line's response with the reward NAME; a summary goes to stderr.

    Fields of a line (others reach the reward as Sample.extra):
    response = the text scored (every reward);
    prompt = the problem (optional);
    step_labels or step_embeddings = may replace the response (structure);
    ground_truth = needed by ground_truth, ground_truth_math_verify, structured_qa, tag_lcs, rlkd;
    teacher = rlkd's teacher path or steps;
    --group-by field = groups of ttrl, empo, tag_lcs (exact value).

    Output: one JSON object per input line, in order.
    A scored line: {"score": ..., <component>: ...} (NaN as null); structure adds "labels".
    A line that could not be scored: {"error": "line N: ...", "line": N}.
    A group with invalid lines is scored with its valid ones.

    Exit codes:
    0 = every line scored;
    1 = some lines could not be scored (see their error objects);
    2 = bad options or settings;
    3 = internal error (one line on stderr; output stops).
    """
    parsed = _settings(name, settings, set_ or [])
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


def _settings(name: str, path: Path | None, sets: Sequence[str] = ()) -> BaseModel:
    """The reward's validated settings from ``--settings`` and ``--set`` (defaults without
    them); exit 2 naming the option, the file or the field otherwise."""
    try:
        cls = get_reward_class(name)
    except RewardConfigError as e:
        raise opt.fail(str(e)) from e
    why = reward_inputs(getattr(cls, "name", name)).offline
    if why is not None:
        raise opt.fail(f"reward {name!r} cannot score existing traces: {why}")
    where = "--settings" if not sets else ("--set" if path is None else "--settings/--set")
    try:
        return parse_settings(name, _with_sets(_load_settings(path), sets))
    except RewardConfigError as e:
        raise opt.fail(f"{where}: {e}") from e


def _with_sets(data: dict[str, Any], sets: Sequence[str]) -> dict[str, Any]:
    """A copy of the settings mapping with each ``KEY=VALUE`` applied in order: KEY a dotted path
    (``embedder.url``), VALUE parsed as YAML. Unknown keys are left to the settings model, which
    names them; the value is never echoed (it may be a credential)."""
    from sarl.spec.documents import DocumentError, parse_yaml

    out = copy.deepcopy(data)
    for item in sets:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise opt.fail("--set: expected KEY=VALUE (e.g. --set clustering=hdbscan)")
        try:
            value = parse_yaml(raw, f"--set {key}")
        except DocumentError as e:
            raise opt.fail(f'{lines.one_line(e)}; VALUE is YAML: quote text ("...")') from e
        node = out
        *parents, last = key.split(".")
        for i, part in enumerate(parents):
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                where = ".".join(parents[: i + 1])
                raise opt.fail(f"--set {key}: {where} is not a mapping of settings")
            node = child
        node[last] = value
    return out


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
    from sarl.cli.score_summary import Summary, progress_bar
    from sarl.cli.structure_lines import StructureLine

    summary = Summary()
    picked: list[StructureLine] = []
    with progress_bar(f"scoring with {reward.name}", path) as bar:
        for batch in _line_results(reward, stream, group_by, bar.update):
            for result in batch:
                summary.add(result.row)
                sink.write(json.dumps(result.row, allow_nan=False) + "\n")
                if isinstance(result, StructureLine) and _drawable(result, picked, n_maps):
                    picked.append(result)
            sink.flush()
    if not picked or out is None:
        return summary, 0
    return summary, _draw_maps(picked, out)


def _drawable(line: StructureLine, picked: list[StructureLine], n_maps: int) -> bool:
    """Whether to draw this line's map: a scored line, while fewer than ``n_maps`` are picked."""
    return line.result is not None and len(picked) < n_maps


def _line_results(
    reward: Reward, stream: IO[bytes], group_by: str, progress: Any
) -> Iterator[list[LineResult] | list[StructureLine]]:
    """Batches of line results: ``structure`` by its own line contract (labels or embeddings
    may replace the response), the other rewards by :class:`OfflineScorer`."""
    from sarl.cli.offline_scoring import OfflineScorer
    from sarl.cli.structure_lines import LazyEmbedder, score_lines
    from sarl.rewards.structure.reward import StructureReward

    if not isinstance(reward, StructureReward):
        yield from OfflineScorer(reward, group_by=group_by, progress=progress).results(stream)
        return
    scorer = reward.scorer

    def built() -> Embedder:  # the reward built it (exit 2 if it could not), unless given none
        if scorer.embedder is None:
            raise ValueError("embedder: none configured")
        return scorer.embedder

    embedder = LazyEmbedder(built)
    # The scorer's own clustering: its `workers` pool (closed by reward.close()), as in training.
    cluster = scorer.score_embeddings_batch
    for batch in score_lines(stream, scorer.config, embedder, _structure_row, cluster=cluster):
        progress(len(batch))
        yield batch


def _structure_row(result: StructureResult) -> dict[str, Any]:
    """The reward's score and components, as for every reward, and the labels of the steps."""
    from sarl.cli.offline_scoring import output_row
    from sarl.rewards.structure.reward import to_output

    return {**output_row(to_output(result)), "labels": list(result.labels)}


def _draw_maps(picked: list[StructureLine], out: Path) -> int:
    """Draw the maps; a failure (a disk full) is a warning, not a result."""
    from sarl.cli.maps import draw_line_maps
    from sarl.cli.offline_scoring import SCORING_ERRORS

    try:
        return len(draw_line_maps(picked, out))
    except SCORING_ERRORS as e:
        typer.echo(f"warning: reasoning maps not drawn: {lines.one_line(e)}", err=True)
        return 0
