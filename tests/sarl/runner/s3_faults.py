"""Shared by the runner's S3 fault tests: a bucket on the session's moto server, and the storage
tests' fault proxy (``tests/sarl/storage/test_retries.py``) answering ``500 InternalError``
instead of its ``503 SlowDown`` to the requests it is told to fail."""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections.abc import Callable, Iterator
from http.server import ThreadingHTTPServer

from tests.sarl.storage.conftest import ACCESS_KEY, SECRET_KEY
from tests.sarl.storage.test_retries import FaultyProxy, _handler

INTERNAL = b"<?xml version='1.0'?><Error><Code>InternalError</Code><Message>boom</Message></Error>"
CREDENTIALS = {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY}
Fail = Callable[[str, str, int], bool]


def make_bucket(s3_endpoint: str) -> str:
    """A new bucket on the moto server at ``s3_endpoint``."""
    from minio import Minio

    client = Minio(s3_endpoint.removeprefix("http://"), access_key=ACCESS_KEY,
                   secret_key=SECRET_KEY, secure=False)  # fmt: skip
    name = f"sarl-{uuid.uuid4().hex[:12]}"
    client.make_bucket(name)
    return name


@contextlib.contextmanager
def proxies_500(s3_endpoint: str) -> Iterator[Callable[[Fail], tuple[str, FaultyProxy]]]:
    """``start(fail)`` -> (endpoint URL, proxy) in front of ``s3_endpoint``; all stop on exit."""
    servers: list[ThreadingHTTPServer] = []

    def start(fail: Fail) -> tuple[str, FaultyProxy]:
        proxy = FaultyProxy(s3_endpoint, fail)
        base = _handler(proxy)

        class Handler500(base):  # type: ignore[misc, valid-type]
            def _answer(self, status: int, headers: dict[str, str], data: bytes,
                        head: bool = False) -> None:  # fmt: skip
                if status == 503:
                    status, data = 500, INTERNAL
                super()._answer(status, headers, data, head)

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler500)
        threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}", proxy

    try:
        yield start
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()


def manifest_puts(step: int, failures: int) -> Fail:
    """Fail the first ``failures`` PUTs of step ``step``'s manifest (the checkpoint's commit)."""
    name = f"step-{step:08d}/manifest.json"
    return lambda method, path, attempt: method == "PUT" and name in path and attempt <= failures
