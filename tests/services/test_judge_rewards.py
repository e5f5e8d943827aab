"""Judge-based rewards through the reward service: the judge endpoint is deployment-time
configuration (``--reward-settings NAME=FILE``), never something a request can set.

Real parts: the reward service subprocess on the real KServe server, and a real local
OpenAI-compatible chat server (``tests.support.chat_server``) standing in for the judge model.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from sarl_services.testing import running_service
from tests.support.chat_server import ChatReply, running_chat_server

TRACE = "<think><ask>What is 2+2?</ask><reflect>It is 4.</reflect></think><answer>4</answer>"
VERDICT = json.dumps({"pairs": [{"pair": 1, "relevance": 1, "quality": 1}]})


def test_structured_qa_judge_configured_at_deployment(tmp_path: Path) -> None:
    with running_chat_server(lambda _request: ChatReply(VERDICT)) as judge:
        settings = tmp_path / "structured_qa.json"
        settings.write_text(json.dumps({"judge_client": {"url": judge.url, "model": "judge"}}))
        args = ["--reward-settings", f"structured_qa={settings}"]
        with running_service("reward", args, log_dir=tmp_path) as reward:
            url = f"{reward.url}/v1/rewards/structured_qa"
            ok = httpx.post(
                url, json={"requests": [{"response": TRACE, "ground_truth": "4"}]}, timeout=60
            )
            hijack = httpx.post(
                url,
                timeout=60,
                json={
                    "requests": [{"response": TRACE, "ground_truth": "4"}],
                    "settings": {"judge_client": {"url": "http://10.0.0.1", "model": "x"}},
                },
            )
        assert len(judge.requests) == 1  # exactly one judge call, for the one trajectory
    assert ok.status_code == 200, ok.text
    (result,) = ok.json()["results"]
    assert result["r_correct"] == 1.0 and result["r_judge"] == 1.0 and result["judge_failed"] == 0.0
    assert hijack.status_code == 400
    assert "settings.judge_client" in hijack.text


def test_bad_deployment_settings_fail_at_start(tmp_path: Path) -> None:
    import subprocess
    import sys

    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"lambda_judge": 5.0, "judge": False}))
    proc = subprocess.run(
        [sys.executable, "-m", "sarl.cli.main", "serve", "reward", "--reward-settings",
         f"structured_qa={bad}"], capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 2
    assert "lambda_judge" in proc.stderr
