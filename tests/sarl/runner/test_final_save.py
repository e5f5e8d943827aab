"""S3 500s on the final checkpoint save (issue 37 item 6): before, four 500s in a row on the
manifest's PUT (one more than the S3 client's retries) failed a run whose training had finished.
Now the save is retried whole with backoff (bounded: ``SAVE_ATTEMPTS``); a final save that still
fails keeps the checkpoint locally, names it, and ``sarl run --resume`` uploads it
(:func:`~sarl.runner.saving.upload_pending`), while a save before the last step still fails the run.

Real components: the moto S3 server behind the fault proxy of ``tests/sarl/storage/test_retries``
(answering ``500 InternalError`` instead of its 503), transformers' own ``TrainingArguments`` and
``TrainerState`` driving :class:`~sarl.runner.callbacks.CheckpointCallback` as the Trainer does.
The backoff is shortened (what is tested is the number of attempts, not the waiting).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

pytest.importorskip("transformers")

from transformers import TrainerControl, TrainerState, TrainingArguments

from sarl.runner.callbacks import CheckpointCallback
from sarl.runner.saving import PENDING, SAVE_ATTEMPTS, upload_pending
from sarl.storage import StorageError, open_store
from tests.sarl.runner.s3_faults import CREDENTIALS, make_bucket, manifest_puts, proxies_500
from tests.sarl.storage.test_retries import FaultyProxy

LAST = 4


@pytest.fixture
def s3_bucket(s3_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> str:
    for name, value in CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    return make_bucket(s3_endpoint)


@pytest.fixture
def proxy500(s3_endpoint: str) -> Iterator[Callable[..., tuple[str, FaultyProxy]]]:
    with proxies_500(s3_endpoint) as start:
        yield start


@pytest.fixture(autouse=True)
def short_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sarl.runner.saving.BACKOFF_S", (0.05, 0.05))


def _trainer_checkpoint(output: Path, step: int) -> Path:
    local = output / f"checkpoint-{step}"
    (local / "model").mkdir(parents=True)
    (local / "model" / "weights.bin").write_bytes(bytes([step]) * 50_000)
    (local / "trainer_state.json").write_text(f'{{"global_step": {step}}}')
    return local


def _save(callback: CheckpointCallback, output: Path, step: int) -> None:
    """What the Trainer does at ``step``: write checkpoint-N, then call on_save."""
    _trainer_checkpoint(output, step)
    args = TrainingArguments(output_dir=str(output), report_to=[])
    state = TrainerState(global_step=step, max_steps=LAST)
    callback.on_save(args, state, TrainerControl())


def test_four_500s_on_the_final_save_are_retried_and_the_checkpoint_lands(
    proxy500: Callable[..., tuple[str, FaultyProxy]], s3_bucket: str, tmp_path: Path
) -> None:
    endpoint, proxy = proxy500(manifest_puts(LAST, failures=4))
    store = open_store(f"s3://{s3_bucket}/exp", endpoint_url=endpoint)
    callback = CheckpointCallback(store, 2, {"mlflow_run_id": "r"}, keep_last=2)

    _save(callback, tmp_path / "trainer", LAST)

    assert proxy.injected == 4
    latest = store.latest()
    assert latest is not None and latest.step == LAST and callback.saved == [LAST]


def test_a_final_save_the_store_keeps_refusing_is_kept_locally_and_uploaded_on_resume(
    proxy500: Callable[..., tuple[str, FaultyProxy]], s3_endpoint: str, s3_bucket: str,
    tmp_path: Path,
) -> None:  # fmt: skip
    endpoint, proxy = proxy500(manifest_puts(LAST, failures=10**6))
    store = open_store(f"s3://{s3_bucket}/exp", endpoint_url=endpoint)
    run_dir = tmp_path / "run"
    callback = CheckpointCallback(store, 2, {"mlflow_run_id": "r"}, keep_last=2, run_dir=run_dir)
    output = tmp_path / "trainer"

    _save(callback, output, 2)  # a healthy earlier checkpoint
    _save(callback, output, LAST)  # training is done; no exception: not a failed run

    pending = callback.pending
    assert pending is not None and pending.step == LAST
    assert Path(pending.local) == output / f"checkpoint-{LAST}" and Path(pending.local).is_dir()
    assert "InternalError" in pending.error
    assert proxy.injected == SAVE_ATTEMPTS * 4  # each attempt: 1 request + the client's 3 retries
    latest = store.latest()
    assert latest is not None and latest.step == 2  # the store's newest is still step 2

    # `sarl run --resume` with the store healthy again uploads it first.
    healthy = open_store(f"s3://{s3_bucket}/exp", endpoint_url=s3_endpoint)
    assert upload_pending(healthy, run_dir) == LAST
    latest = healthy.latest()
    assert latest is not None and latest.step == LAST
    assert latest.metadata == {"mlflow_run_id": "r", "step": LAST}
    assert not (run_dir / PENDING).exists()
    assert upload_pending(healthy, run_dir) is None


def test_a_save_before_the_last_step_that_keeps_failing_still_fails_the_run(
    proxy500: Callable[..., tuple[str, FaultyProxy]], s3_bucket: str, tmp_path: Path
) -> None:
    endpoint, _ = proxy500(manifest_puts(2, failures=10**6))
    store = open_store(f"s3://{s3_bucket}/exp", endpoint_url=endpoint)
    callback = CheckpointCallback(store, 2, {}, keep_last=2, run_dir=tmp_path / "run")
    with pytest.raises(StorageError, match="InternalError"):
        _save(callback, tmp_path / "trainer", 2)
    assert callback.pending is None
