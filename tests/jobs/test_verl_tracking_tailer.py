"""The verl job's driver follows verl's metrics file record by record, whatever happens to it.

The writer is verl 0.9.1's own ``verl.utils.tracking.Tracking`` with the ``file`` backend
(``FileLogger``, ``verl/utils/tracking.py`` lines 529-548: ``$VERL_FILE_LOGGER_PATH`` opened
``"wb"``, one ``{"step": N, "data": {...}}`` line per ``log``); the reader is
:class:`sarl_jobs.verl_tracking.MetricsTailer` feeding a recording sink in place of the Tracker.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("verl")

from sarl_jobs.verl_tracking import MetricsTailer, request_snapshot


class Sink:
    """Records what the tailer logs; a snapshot writes the steps seen so far."""

    def __init__(self) -> None:
        self.logged: list[tuple[int, dict[str, float]]] = []
        self.lock = threading.Lock()

    def log_metrics(self, metrics: Mapping[str, float | None], step: int) -> None:
        with self.lock:
            self.logged.append((step, {k: float(v) for k, v in metrics.items() if v is not None}))

    def snapshot(self, dest: Path) -> int:
        with self.lock:
            steps = [step for step, _ in self.logged]
        dest.mkdir(parents=True)
        (dest / "steps.json").write_text(json.dumps(steps))
        return len(steps)

    def steps(self) -> list[int]:
        with self.lock:
            return [step for step, _ in self.logged]


@pytest.fixture
def metrics(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "tracking" / "metrics.jsonl"
    path.parent.mkdir()
    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", str(path))
    return path


def verl_logger() -> Any:
    from verl.utils.tracking import Tracking

    return Tracking("proj", "exp", default_backend=["file"])


def test_each_record_lands_at_its_step_under_the_names_verls_mlflow_logger_gave(
    metrics: Path,
) -> None:
    import numpy as np

    writer, sink = verl_logger(), Sink()
    tailer = MetricsTailer(metrics, sink)
    data = {
        "actor/loss": np.float32(0.5),
        "critic/score/mean": 2,
        "val-core/arith/acc/mean@1": 0.25,
        "timing//gen": 1.5,
        "response_length/clip_ratio": float("nan"),  # orjson writes null
        "flag": True,
        "lengths": np.array([1, 2]),
        "name": "text",
    }
    writer.log(data, step=1)
    writer.log({"actor/loss": 0.25}, step=2)
    writer.finish()

    assert tailer.poll() == 2
    assert sink.logged == [
        (
            1,
            {
                "actor/loss": 0.5,
                "critic/score/mean": 2.0,
                "val-core/arith/acc/mean_at_1": 0.25,
                "timing/gen": 1.5,
            },
        ),
        (2, {"actor/loss": 0.25}),
    ]
    assert tailer.poll() == 0  # nothing new: nothing logged twice


def test_a_partial_last_line_waits_for_its_end(metrics: Path) -> None:
    sink = Sink()
    tailer = MetricsTailer(metrics, sink)
    line = json.dumps({"step": 7, "data": {"actor/loss": 0.1}}).encode() + b"\n"
    with metrics.open("ab", buffering=0) as f:
        f.write(line[:10])
        assert tailer.poll() == 0 and sink.logged == []
        f.write(line[10:])
    assert tailer.poll() == 1
    assert sink.logged == [(7, {"actor/loss": 0.1})]


def test_a_truncated_file_is_followed_from_its_start(metrics: Path) -> None:
    """verl opens the file "wb": a second logger on the same path truncates it in place."""
    sink = Sink()
    tailer = MetricsTailer(metrics, sink)
    first = verl_logger()
    for step in (1, 2, 3):
        first.log({"actor/loss": float(step), "critic/score/mean": float(step)}, step=step)
    first.finish()
    tailer.poll()
    inode = metrics.stat().st_ino

    second = verl_logger()  # a restarted trainer
    second.log({"actor/loss": 4.0}, step=4)
    assert metrics.stat().st_ino == inode  # the same file, shorter
    assert tailer.poll() == 1
    second.log({"actor/loss": 5.0}, step=5)
    second.finish()
    assert tailer.poll() == 1
    assert sink.steps() == [1, 2, 3, 4, 5]


def test_a_re_created_file_is_followed_from_its_start_even_when_longer(metrics: Path) -> None:
    sink = Sink()
    tailer = MetricsTailer(metrics, sink)
    first = verl_logger()
    first.log({"actor/loss": 1.0}, step=1)
    tailer.poll()
    first.log({"actor/loss": 2.0}, step=2)  # written, not read yet
    first.finish()
    metrics.unlink()
    second = verl_logger()  # a new file (another inode), longer than what was read
    for step in (3, 4, 5):
        second.log({"actor/loss": float(step), "critic/score/mean": float(step)}, step=step)
    second.finish()

    tailer.poll()
    assert sink.steps() == [1, 2, 3, 4, 5]  # step 2 read from the old file before switching


def test_a_line_that_is_no_record_is_skipped(metrics: Path) -> None:
    sink = Sink()
    metrics.write_bytes(
        b'{"step": 1, "data": {"a": 1}}\nnot json\n[1, 2]\n{"step": 2, "data": 3}\n'
    )
    tailer = MetricsTailer(metrics, sink)
    assert tailer.poll() == 4
    assert sink.logged == [(1, {"a": 1.0})]


def test_a_snapshot_request_is_answered_after_every_line_written_before_it(metrics: Path) -> None:
    """The checkpoint callback's request (another process in the job) is served once the lines
    verl wrote before the save are logged; the tailer thread serves it."""
    requests = metrics.parent / "snapshots"
    requests.mkdir()
    sink = Sink()
    tailer = MetricsTailer(metrics, sink, requests=requests, poll_s=0.05)
    writer = verl_logger()
    tailer.start()
    try:
        for step in (1, 2, 3):
            writer.log({"actor/loss": float(step)}, step=step)
        answer = request_snapshot(metrics, step=4, wait_s=300)
    finally:
        tailer.stop()
        writer.finish()
    assert answer is not None
    folder, records = answer
    assert records == 3
    assert json.loads((folder / "steps.json").read_text()) == [1, 2, 3]
    assert sorted(p.name for p in requests.iterdir()) == [folder.name]  # request and answer gone


def test_stop_reads_what_verl_wrote_last(metrics: Path) -> None:
    sink = Sink()
    tailer = MetricsTailer(metrics, sink, poll_s=3600)  # the thread reads only at start and stop
    writer = verl_logger()
    tailer.start()
    for step in (1, 2):
        writer.log({"actor/loss": float(step)}, step=step)
    writer.finish()
    tailer.stop()
    assert sink.steps() == [1, 2]
    tailer.stop()  # once only
    assert sink.steps() == [1, 2]


def test_without_an_answer_the_request_is_withdrawn(metrics: Path) -> None:
    """No driver follows the file: the callback uploads without a tail (its records stay in the
    driver's spool) and leaves no request behind."""
    requests = metrics.parent / "snapshots"
    requests.mkdir()
    assert request_snapshot(metrics, step=2, wait_s=0.2) is None
    assert list(requests.iterdir()) == []
