"""Services under test, started once per session as real subprocesses on loopback ports.

* ``stack``: the embedding service (bundled all-MiniLM-L6-v2) and a reward service that embeds
  through it — the production wiring.
* ``fake_stack``: a reward service limited to one request at a time (queue of one) whose
  embedder is the sdk's fake OpenAI-compatible server in this process, so tests can slow it
  down or make it fail.
* ``loading``: one embedding and one reward service whose ``load()`` is delayed for an hour,
  to observe the not-ready state.
* ``guarded``: a reward service deployed with secrets in its environment, the ``rlkd``
  decomposer pointed (by the operator's ``--reward-settings``) at a :class:`HeaderRecorder`,
  and an operator maximum ``--max-setting structure.max_steps=64``: the target of the
  hostile-settings tests.

All are started together on first use (start-up dominates the suite's time) and their process
groups are stopped at the end of the session.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from sarl.embedding.local import LocalEmbedder
from sarl_services.testing import ServiceProcess, start_service
from tests.support.embedding_server import EmbeddingServer

EMBEDDING_NAME = "all-MiniLM-L6-v2"
# Small limits so the 400/413 paths are cheap to reach; still above the client's batch of 128.
EMBEDDING_ARGS = ["--max-inputs", "256", "--max-input-chars", "50000", "--max-body-bytes", "200000"]
REWARD_ARGS = ["--max-items", "64", "--max-body-bytes", "100000"]


@dataclass
class Stack:
    embedding: ServiceProcess
    reward: ServiceProcess


@dataclass
class FakeStack:
    embedder: EmbeddingServer
    reward: ServiceProcess


@dataclass
class Loading:
    embedding: ServiceProcess
    reward: ServiceProcess


#: In the guarded service's environment: the operator's key for the decomposer, and a secret
#: no request may reach (standing for AWS_SECRET_ACCESS_KEY and the like).
OPERATOR_KEY = ("SARL_TEST_OPERATOR_KEY", "operator-token")
SECRET = ("SARL_TEST_SECRET", "s3cr3t-value-that-must-never-leave")
GUARDED_MAX_STEPS = 64


class HeaderRecorder:
    """A loopback HTTP server that records each request's path and Authorization header and
    answers 503 (the rlkd decomposer the guarded service calls)."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str | None]] = []
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                recorder.seen.append((self.path, self.headers.get("Authorization")))
                self.send_response(503)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


@dataclass
class Guarded:
    reward: ServiceProcess
    decomposer: HeaderRecorder


@dataclass
class _Services:
    stack: Stack
    fake: FakeStack
    loading: Loading
    guarded: Guarded


@pytest.fixture(scope="session")
def _services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[_Services]:
    logs: Path = tmp_path_factory.mktemp("service-logs")
    fake_embedder = EmbeddingServer().start()
    decomposer = HeaderRecorder()
    started: list[ServiceProcess] = []

    def start(kind: str, *args: str, env: dict[str, str] | None = None) -> ServiceProcess:
        started.append(start_service(kind, args, log_dir=logs, env=env))
        return started[-1]

    rlkd_settings = logs / "rlkd.json"
    decomposer_settings = {"url": decomposer.url, "model": "decomposer", "max_retries": 0}
    decomposer_settings["api_key_env"] = OPERATOR_KEY[0]
    rlkd_settings.write_text(json.dumps({"decomposer": decomposer_settings, "on_failure": "nan"}))

    try:
        embedding = start("embedding", *EMBEDDING_ARGS)
        reward = start(
            "reward", "--embedder", "openai", "--embedding-url", embedding.url,
            "--embedding-model", EMBEDDING_NAME, *REWARD_ARGS,
        )  # fmt: skip
        fake_reward = start(
            "reward", "--embedder", "openai", "--embedding-url", fake_embedder.url,
            "--embedding-model", "fake", "--embedding-max-retries", "0",
            "--embedding-timeout", "10", "--max-concurrency", "1", "--max-queue", "1",
        )  # fmt: skip
        loading = Loading(
            start("embedding", "--load-delay", "3600"), start("reward", "--load-delay", "3600")
        )
        guarded_reward = start(
            "reward", "--embedder", "openai", "--embedding-url", fake_embedder.url,
            "--embedding-model", "fake", "--reward-settings", f"rlkd={rlkd_settings}",
            "--max-setting", f"structure.max_steps={GUARDED_MAX_STEPS}",
            env=dict([OPERATOR_KEY, SECRET]),
        )  # fmt: skip
        guarded = Guarded(guarded_reward, decomposer)
        for service in (reward, fake_reward, guarded.reward, embedding):
            service.wait_until_ready()
        yield _Services(
            Stack(embedding, reward), FakeStack(fake_embedder, fake_reward), loading, guarded
        )
    finally:
        for service in started:
            service.stop()
        fake_embedder.stop()
        decomposer.stop()


@pytest.fixture(scope="session")
def stack(_services: _Services) -> Stack:
    return _services.stack


@pytest.fixture
def fake_stack(_services: _Services) -> Iterator[FakeStack]:
    fake = _services.fake
    fake.embedder.set_faults(None)
    fake.embedder.reset_stats()
    yield fake
    fake.embedder.set_faults(None)


@pytest.fixture(scope="session")
def loading(_services: _Services) -> Loading:
    return _services.loading


@pytest.fixture(scope="session")
def guarded(_services: _Services) -> Guarded:
    return _services.guarded


@pytest.fixture(scope="session")
def local_embedder() -> LocalEmbedder:
    """The sdk's in-process embedder of the same bundled model (the reference vectors)."""
    return LocalEmbedder()
