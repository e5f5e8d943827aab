"""What a local run says about a resume that found no checkpoint (``sarl.runner.resume``).

Every run of ``sarl study run`` starts with resume on, so a first run must say nothing; the
old line "resume: no complete checkpoint under <path>" was printed by every fresh run (issue
40 item 6). A run killed before its first checkpoint is said (the real kill-and-resume case is
in ``test_resume_after_kill.py``). Pure function: the checkpoint is the store's own record type.
"""

from __future__ import annotations

import pytest

from sarl.runner.resume import resume_note
from sarl.storage import CheckpointInfo


def _checkpoint() -> CheckpointInfo:
    return CheckpointInfo(4, "file:///ckpt/step-00000004", "", (), {"mlflow_run_id": "abc"})


@pytest.mark.parametrize(
    ("resume", "run_id"), [(True, None), (False, None), (False, "abc")], ids=str
)
def test_a_first_run_says_nothing(resume: bool, run_id: str | None) -> None:
    assert resume_note(resume, None, run_id) is None


def test_a_resume_from_a_checkpoint_says_nothing_here() -> None:
    assert resume_note(True, _checkpoint(), "abc") is None


def test_a_run_killed_before_its_first_checkpoint_is_said_without_the_store_path() -> None:
    note = resume_note(True, None, "abc123")
    assert note == (
        "resume: no checkpoint yet; training starts from step 0 again in MLflow run abc123 "
        "(stopped before its first checkpoint)"
    )
