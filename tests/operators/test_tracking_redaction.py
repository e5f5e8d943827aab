"""The operator's MLflow run tags never carry a credential (belt and braces: validation refuses
one first): ``run_tags`` redacts the user's ``spec.tracking.tags``. And what an MLflow URI
answers never reaches the status or Events a tenant reads, and no call waits long on it."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import kopf
import pytest

from sarl_operator import experiment_handlers
from sarl_operator.reconcile import TRACKING_DOWN, Settings
from sarl_operator.tracking import UID_TAG, MlflowTracking, TrackingError, run_tags
from tests.operators.cases import PLATFORM
from tests.support.mlflow_server import free_port

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


# ---- what an MLflow URI's failures may show a tenant (issue 36 item 5) ----

MARKER = "internal-admin-page-body"


class _Leaky(http.server.BaseHTTPRequestHandler):
    """An internal service behind the URI: every reply a 502 whose body must not leak."""

    def do_GET(self) -> None:
        self._reply()

    def do_POST(self) -> None:
        self._reply()

    def _reply(self) -> None:
        body = f"<html>{MARKER} at 10.0.0.7</html>".encode()
        self.send_response(502)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def leaky_uri() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Leaky)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("where", ["replying", "closed"])
def test_mlflow_failures_reach_status_and_events_as_a_fixed_text(
    leaky_uri: str, where: str
) -> None:
    """A real HTTP server replying 502 with a body, or a closed port: the TrackingReady
    condition, every Event and the TemporaryError (kopf posts its text as an Event) carry
    :data:`TRACKING_DOWN` only; no URL, connection error or reply body. Kubernetes API: the
    in-memory fake of test_handlers (no API server needed for the status written here)."""
    from tests.operators.test_handlers import FakeApi, _body

    uri = leaky_uri if where == "replying" else f"http://127.0.0.1:{free_port()}"
    settings = Settings(verl_image="img", platform=PLATFORM, tracking_uri=uri)
    events: list[tuple[str, ...]] = []
    patch: dict[str, Any] = {}
    with pytest.raises(kopf.TemporaryError) as err:
        experiment_handlers.reconcile(
            _body("sarl-grpo-math"),
            patch,
            FakeApi(),
            settings=settings,
            post_event=lambda _obj, *event: events.append(event),
            tracker_factory=lambda u: MlflowTracking(u, sleep=lambda _s: None),
        )
    shown = [str(err.value), json.dumps(patch), json.dumps(events)]
    assert str(err.value) == TRACKING_DOWN
    for text in shown:
        assert MARKER not in text and "127.0.0.1" not in text and "ConnectError" not in text


def test_every_mlflow_call_has_a_short_connect_timeout() -> None:
    """httpx's timeout of each request (its ``timeout`` extension): connecting is bounded by
    ``connect_timeout_s`` (3 s), reading by ``timeout_s``; retries are bounded."""
    seen: list[dict[str, float]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.extensions["timeout"])
        return httpx.Response(503)

    tracking = MlflowTracking(
        "http://mlflow:5000", transport=httpx.MockTransport(handler), sleep=lambda _s: None
    )
    with pytest.raises(TrackingError):
        tracking.latest_progress("run")
    assert len(seen) == tracking.max_retries + 1 == 3
    assert seen[0]["connect"] == 3.0 and seen[0]["read"] == 10.0
