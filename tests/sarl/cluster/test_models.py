"""sarl.cluster.models and helpers: status parsing, ages like kubectl, merge patches, messages."""

from __future__ import annotations

import datetime as dt

import pytest

from sarl.cluster.client import merge_patch
from sarl.cluster.errors import api_message
from sarl.cluster.models import ExperimentInfo, ExperimentStatus, format_duration, parse_time


def test_status_from_the_crd_fields() -> None:
    st = ExperimentStatus.from_dict(
        {
            "phase": "Running",
            "lastStep": 4,
            "lastReward": 1,
            "mlflowRunId": "r1",
            "conditions": [{"type": "Ready", "status": "False", "message": "waiting for job"}],
        }
    )
    assert (st.last_step, st.last_reward, st.mlflow_run_id) == (4, 1.0, "r1")
    assert st.summary() == "Running, step 4, reward 1.0000" and not st.done
    assert st.failure_message() == "waiting for job"
    assert ExperimentStatus.from_dict(None).summary() == "no phase yet"


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (-3, "0s"),
        (42, "42s"),
        (119, "119s"),
        (300, "5m"),
        (7199, "119m"),
        (3 * 3600, "3h"),
        (3 * 86400, "3d"),
    ],
)
def test_durations_like_kubectl(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


def test_age_from_creation_timestamp() -> None:
    info = ExperimentInfo.from_object(
        {"metadata": {"name": "a", "namespace": "n", "creationTimestamp": "2025-01-01T00:00:00Z"}}
    )
    assert info.age(dt.datetime(2025, 1, 1, 0, 10, tzinfo=dt.UTC)) == "10m"
    assert ExperimentInfo(name="a", namespace="n").age() == "<unknown>"
    assert parse_time("not a time") is None


def test_merge_patch_removes_keys_the_new_spec_lacks() -> None:
    old = {"a": 1, "b": {"x": 1, "y": 2}, "c": [1, 2], "d": "same"}
    new = {"a": 2, "b": {"x": 1}, "c": [1], "d": "same", "e": {"k": "v"}}
    assert merge_patch(old, new) == {"a": 2, "b": {"y": None}, "c": [1], "e": {"k": "v"}}
    assert merge_patch(new, new) == {}


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ('{"kind": "Status", "message": "line one\\n  line two"}', "line one line two"),
        ('{"kind": "Status", "reason": "Forbidden"}', "Forbidden"),
        ("plain text body", "plain text body"),
        (None, "fallback"),
        ("x" * 500, "x" * 297 + "..."),
    ],
)
def test_api_message_is_one_bounded_line(body: str | None, expected: str) -> None:
    assert api_message(body, "fallback") == expected
