"""The one line a local run prints for a fault (issue 37 items 3, 6): which of the run's places a
full disk hit (named by the error's file or by the code that wrote), and a dead embedding service
named by its URL. Pure functions on real exceptions raised by real code paths: a write to a full
disk cannot be made here without root, so the ``OSError(ENOSPC)`` is raised where the write
would have failed (a spool file; a file the checkpoint store names)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from sarl.embedding.base import EmbeddingError
from sarl.runner.faults import explain


def _places(tmp_path: Path) -> dict[str, Path | str]:
    run = tmp_path / "runs" / "exp"
    return {"run": run, "spool": run / "tracking" / "abc", "trainer": run / "trainer",
            "checkpoints": str(tmp_path / "ckpt")}  # fmt: skip


def _enospc(filename: str | None = None) -> OSError:
    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), filename)


@pytest.mark.parametrize(
    ("where", "what"),
    [("spool", "tracking spool"), ("trainer", "trainer checkpoint"),
     ("checkpoints", "checkpoint store")],
)  # fmt: skip
def test_disk_full_names_the_place_of_the_file_and_its_free_space(
    tmp_path: Path, where: str, what: str
) -> None:
    places = _places(tmp_path)
    target = f"{places[where]}/some/file.bin"
    line = explain(_enospc(target), places)
    assert line is not None and "\n" not in line
    assert line.startswith(f"disk full writing the run's {what} at {target}: ")
    assert " free there" in line and "sarl run --local --resume" in line
    assert f"sarl tracking flush {places['spool']}" in line


def test_disk_full_without_a_file_name_is_placed_by_the_code_that_wrote(tmp_path: Path) -> None:
    """A buffered write (the spool's records file) raises without a file name."""
    from sarl.tracking.spool import Spool

    places = _places(tmp_path)
    spool = Spool(Path(places["spool"]), "abc", "http://mlflow")

    class Full:
        def write(self, data: bytes) -> int:
            raise _enospc()

    real, spool._file = spool._file, Full()  # type: ignore[assignment]
    try:
        with pytest.raises(OSError) as caught:
            spool.append("metrics", {"metrics": {"loss": 1.0}, "step": 1})
    finally:
        spool._file = real
        spool.close()
    line = explain(caught.value, places)
    assert line is not None
    assert line.startswith(f"disk full writing the run's tracking spool at {places['spool']}: ")


def test_a_dead_embedding_service_is_named_by_its_url(tmp_path: Path) -> None:
    err = EmbeddingError("http://127.0.0.1:9/v1/embeddings could not connect; gave up after 2")
    line = explain(err, _places(tmp_path))
    assert line is not None and "http://127.0.0.1:9/v1/embeddings" in line
    assert "embedding service" in line and "--resume" in line


def test_an_unknown_error_keeps_its_traceback(tmp_path: Path) -> None:
    assert explain(ValueError("a bug"), _places(tmp_path)) is None
    assert explain(OSError(errno.EACCES, "denied"), _places(tmp_path)) is None
