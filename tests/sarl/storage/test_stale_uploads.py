"""An incomplete multipart upload that a failed save could not abort is aborted by the next start.

The S3 server is a real moto server of the test's own (``ThreadedMotoServer``), stopped in the
middle of a multipart upload: the next part and then minio's abort both fail to connect, so the
upload stays open. The server is then started again on the same port with the same state (moto
keeps its buckets per process, not per server), and a new store's ``clean_leftovers`` (what a
run calls when it starts) must abort that upload and leave the upload of another run's prefix
alone. The rule for a *live* save's upload (initiated after the store opened: never touched) is
checked on :func:`~sarl.storage.s3.is_stale` directly: moto reports one fixed initiation time
for every upload.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from minio import Minio

from sarl.storage import StorageError, open_store
from sarl.storage.s3 import PART_SIZE, is_stale
from tests.sarl.storage.conftest import ACCESS_KEY, SECRET_KEY, write_tree


class Server:
    """A moto S3 server that can be stopped and started again on the same port."""

    def __init__(self) -> None:
        self.port = 0
        self._server: Any = None
        self.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        from moto.server import ThreadedMotoServer

        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)
        self._server.start()
        self.port = self._server.get_host_and_port()[1]

    def stop(self) -> None:
        self._server.stop()


@pytest.fixture
def server(s3_env: dict[str, str]) -> Iterator[Server]:
    pytest.importorskip("moto")
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    s = Server()
    yield s
    s.stop()


def _uploads(client: Minio, bucket: str, prefix: str) -> list[str]:
    return [u.object_name for u in client._list_multipart_uploads(bucket, prefix=prefix).uploads]


def test_an_upload_left_open_by_a_failed_abort_is_aborted_at_the_next_start(
    server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = Minio(
        f"127.0.0.1:{server.port}", access_key=ACCESS_KEY, secret_key=SECRET_KEY, secure=False
    )
    bucket = "sarl-stale-uploads"
    client.make_bucket(bucket)
    client._create_multipart_upload(bucket, "other-run/step-00000001/files/w.bin", {})
    src = write_tree(tmp_path / "src", {"model/weights.bin": os.urandom(PART_SIZE + 1024)})
    store = open_store(f"s3://{bucket}/exp", endpoint_url=server.endpoint)

    upload_part = Minio._upload_part

    def part_then_endpoint_down(self: Minio, *args: Any, **kwargs: Any) -> Any:
        etag = upload_part(self, *args, **kwargs)
        self._http.clear()  # no kept-alive connection outlives the server
        server.stop()  # the endpoint goes down: the next part and minio's abort both fail
        return etag

    monkeypatch.setattr(Minio, "_upload_part", part_then_endpoint_down)
    with pytest.raises(StorageError, match="uploading"):
        store.save(1, src, {})
    monkeypatch.setattr(Minio, "_upload_part", upload_part)

    server.start()
    key = "exp/step-00000001/files/model/weights.bin"
    assert _uploads(client, bucket, "exp/") == [key]  # left open: the abort never reached S3

    again = open_store(f"s3://{bucket}/exp", endpoint_url=server.endpoint)
    assert again.clean_leftovers() == [key]
    assert _uploads(client, bucket, "exp/") == []
    assert _uploads(client, bucket, "other-run/") == ["other-run/step-00000001/files/w.bin"]


def test_an_unreachable_endpoint_does_not_stop_the_start(
    server: Server, caplog: pytest.LogCaptureFixture
) -> None:
    store = open_store("s3://sarl-stale-uploads-down/exp", endpoint_url=server.endpoint)
    server.stop()
    with caplog.at_level(logging.WARNING, logger="sarl.storage.s3"):
        assert store.clean_leftovers() == []
    assert "left to the bucket's lifecycle rule" in caplog.text
    server.start()  # for the fixture's stop


OPENED = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("initiated", "stale"),
    [
        (OPENED - timedelta(hours=30), True),  # a save killed long ago
        (OPENED - timedelta(seconds=1), True),  # a save killed just before this start
        (None, True),  # the server gives no time: the run's lock rules out a live save
        (OPENED, False),
        (OPENED + timedelta(seconds=1), False),  # a save that started after the store opened
    ],
)
def test_only_uploads_initiated_before_the_store_opened_are_stale(
    initiated: datetime | None, stale: bool
) -> None:
    assert is_stale(initiated, OPENED) is stale
