"""The operator's MLflow run tags never carry a credential (belt and braces: validation refuses
one first): ``run_tags`` redacts the user's ``spec.tracking.tags``."""

from __future__ import annotations

from sarl_operator.tracking import UID_TAG, run_tags

TOKEN = "hf_" + "hZEmnoOEYISjraJtbySaKCNnSuYAvukaTt"


def test_run_tags_are_redacted() -> None:
    extra = {
        "team": "rl",
        "api_key": "abc123",
        "source": "http://admin:s3cr3t@minio:9000",
        "note": TOKEN,
    }
    tags = {t["key"]: t["value"] for t in run_tags("exp", "ns", "uid-1", extra)}
    assert tags == {
        "team": "rl",
        "api_key": "***",
        "source": "http://***@minio:9000",
        "note": "***",
        "sarl.dev/experiment": "exp",
        "sarl.dev/namespace": "ns",
        UID_TAG: "uid-1",
    }
