"""``sarl reward score structure`` honours the structure reward's ``workers`` setting (issue 40
follow-up): a chunk's embeddings are clustered in the scorer's own worker pool, as in the reward
service and the trainers, with output equal byte for byte to ``workers=1`` (in process).

Where the clustering ran is seen without timing: a spy replaces the scorer's chunk function
(``sarl.rewards.structure.scorer._score_chunk``, the one the pool submits) and appends the pid
of the process that ran it to a file named by an environment variable, which spawned workers
inherit; the spy is a module-level function, so the pool pickles it by reference and the
workers import it. Before this change the command never called that function (it clustered
in process through ``score_isolated``), so the file stayed empty and the pool test failed there.
The embedder is the loopback OpenAI-compatible server of ``tests.support``, over real HTTP.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import psutil
import pytest
from typer.testing import CliRunner

from sarl.cli import structure_lines
from sarl.cli.main import app
from sarl.rewards.structure import scorer as scorer_module
from sarl.rewards.structure.config import StructureRewardConfig
from sarl.rewards.structure.result import StructureResult
from tests.sarl.cli.conftest import RunCli
from tests.support.embedding_server import EmbeddingServer, running_embedding_server

PIDS_ENV = "SARL_TEST_CLUSTER_PIDS"
_REAL_SCORE_CHUNK = scorer_module._score_chunk
#: Lines whose steps are clustered: above the scorer's threshold for its pool.
CLUSTERED = scorer_module._MIN_PARALLEL_BATCH + 16


def _spy_score_chunk(
    chunk: list[tuple[npt.NDArray[np.floating], bool]], config: StructureRewardConfig
) -> list[StructureResult]:
    """The scorer's chunk function, recording "pid responses" first (parent or worker)."""
    with open(os.environ[PIDS_ENV], "a", encoding="utf-8") as f:
        f.write(f"{os.getpid()} {len(chunk)}\n")
    return _REAL_SCORE_CHUNK(chunk, config)


@pytest.fixture(scope="module")
def server() -> Iterator[EmbeddingServer]:
    with running_embedding_server(dim=16) as s:
        yield s


def mixed_lines() -> list[bytes]:
    """Text, step_labels and step_embeddings lines (several step counts, repeated steps) and
    bad lines, interleaved; ``CLUSTERED`` of them are clustered (embeddings or text)."""
    rng = np.random.default_rng(7)
    good: list[dict[str, Any]] = []
    for i in range(CLUSTERED - 10):
        steps = int(rng.integers(1, 13))
        rows = rng.normal(size=(steps, 8)).round(4)
        if steps > 3:
            rows[-1] = rows[0]  # a repeated step: a revisited node
        good.append({"id": f"e{i}", "step_embeddings": rows.tolist()})
    words = ["plan", "compute", "check", "recall", "guess", "verify"]
    for i in range(10):
        texts = [str(w) for w in rng.choice(words, size=int(rng.integers(2, 9)))]
        good.append({"id": f"t{i}", "response": "<think>" + "\n\n".join(texts) + "</think>42"})
    good += [
        {"step_labels": [0, 1, 2]},
        {"step_labels": [0, 1, 0, 2, 3]},
        {"response": "<think></think>42"},  # no steps: nothing to cluster
    ]
    order = rng.permutation(len(good))
    raw = [json.dumps(good[i]).encode() for i in order]
    bad = [
        b"not json",
        b"[1, 2]",
        json.dumps({"step_embeddings": [[0.0, 0.0]]}).encode(),
        json.dumps({"step_labels": [1], "step_embeddings": [[1.0]]}).encode(),
        json.dumps({"response": "<think>a\n\nb</think>", "step_embeddings": [[1.0]]}).encode(),
    ]
    for k, line in enumerate(bad):
        raw.insert(7 + 13 * k, line)
    return raw


def write_inputs(tmp_path: Path, server: EmbeddingServer) -> tuple[Path, Path]:
    data = tmp_path / "mixed.jsonl"
    data.write_bytes(b"\n".join(mixed_lines()) + b"\n")
    settings = tmp_path / "settings.json"
    embedder = {"kind": "openai", "url": server.url, "model": "hash"}
    settings.write_text(json.dumps({"embedder": embedder}), encoding="utf-8")
    return data, settings


def score_in_process(data: Path, settings: Path, workers: int) -> tuple[int, bytes]:
    args = ["reward", "score", "structure", "-i", str(data), "-s", str(settings)]
    result = CliRunner().invoke(app, [*args, "--set", f"workers={workers}"])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.stdout_bytes


def recorded(path: Path) -> list[tuple[int, int]]:
    if not path.exists():
        return []
    return [(int(p), int(n)) for p, n in (ln.split() for ln in path.read_text().splitlines())]


def test_workers_cluster_in_the_scorers_pool_and_print_what_one_process_prints(
    tmp_path: Path, server: EmbeddingServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    data, settings = write_inputs(tmp_path, server)
    monkeypatch.setattr(scorer_module, "_score_chunk", _spy_score_chunk)
    runs: dict[int, tuple[int, bytes, list[tuple[int, int]]]] = {}
    for workers in (1, 2):
        pids = tmp_path / f"pids-{workers}.txt"
        monkeypatch.setenv(PIDS_ENV, str(pids))
        code, out = score_in_process(data, settings, workers)
        runs[workers] = (code, out, recorded(pids))

    (code1, out1, in_process), (code2, out2, pooled) = runs[1], runs[2]
    assert pooled, "workers=2: the clustering never ran through the scorer (workers ignored)"
    assert {pid for pid, _ in in_process} == {os.getpid()}  # workers=1: in this process
    worker_pids = {pid for pid, _ in pooled}
    assert os.getpid() not in worker_pids, "workers=2 clustered in the command's own process"
    assert 1 <= len(worker_pids) <= 2  # the scorer's pool: at most `workers` processes
    assert len(pooled) > 1  # split into chunks, as the scorer splits a trainer's batch
    assert sum(n for _, n in pooled) == sum(n for _, n in in_process) == CLUSTERED
    # reward.close() stopped the pool when the command ended: its workers have exited.
    assert not any(_alive(pid) for pid in worker_pids)
    assert code1 == code2 == 1  # the bad lines
    assert out2 == out1


def _alive(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False


def test_the_console_script_prints_the_same_bytes_with_workers_2_as_with_1(
    tmp_path: Path, server: EmbeddingServer, run_cli: RunCli
) -> None:
    data, settings = write_inputs(tmp_path, server)
    args: Sequence[str] = ("reward", "score", "structure", "-i", str(data), "-s", str(settings))
    one = run_cli(*args, "--set", "workers=1")
    two = run_cli(*args, "--set", "workers=2")
    assert one.returncode == two.returncode == 1, two.stderr  # the bad lines
    assert two.stdout == one.stdout
    rows = [json.loads(line) for line in one.stdout.splitlines()]
    assert len(rows) == len(mixed_lines())
    errors = [r for r in rows if "error" in r]
    assert len(errors) == 5
    assert sum(1 for r in rows if r.get("num_steps", 0) > 0) == CLUSTERED + 2  # + labels lines


def test_a_batch_the_pool_refuses_is_scored_line_by_line_in_process() -> None:
    """Validation keeps every line the clustering could refuse out, so no real input makes the
    pool refuse: the refusal is faked, a ``ValueError`` as a worker's is re-raised, and it must
    not fail the chunk; its lines get exactly the in-process results, error lines too."""

    def refusing(
        embeddings: Sequence[npt.NDArray[np.floating]], truncated: Sequence[bool]
    ) -> list[StructureResult]:
        raise ValueError("a worker refused the batch")

    chunk = list(enumerate(mixed_lines()[:40], start=1))
    lazy = structure_lines.LazyEmbedder(lambda: HashEmbedder())
    config = StructureRewardConfig()

    def rows(**cluster: Any) -> list[dict[str, Any]]:
        scored = structure_lines.score_chunk(
            chunk, config, lazy, StructureResult.to_dict, **cluster
        )
        return [line.row for line in scored]

    assert rows(cluster=refusing) == rows()
    assert sum("error" in r for r in rows()) < 10  # most lines scored


class HashEmbedder:
    """A deterministic in-process stand-in for the embedder of the unit test above (the CLI
    tests use the real HTTP server): 8 values per text."""

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        rows = [np.random.default_rng(sum(t.encode())).normal(size=8) for t in texts]
        return np.asarray(rows, dtype=np.float32).reshape(len(texts), 8)
