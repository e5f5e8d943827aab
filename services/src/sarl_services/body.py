"""Read a request body under byte, memory and depth limits and decode it as a JSON object.

Called by the embedding and reward routes (one :class:`BodyReader` per service process) before
any parsing. Memory is bounded before it is spent, in three steps:

1. **Bytes on the wire**: an oversize upload is refused with 413 from its ``Content-Length``
   or, for chunked uploads, as soon as the bytes read pass ``--max-body-bytes``.
2. **Bodies in flight**: every body's bytes are reserved in the process-wide
   :class:`~sarl_services.limits.BodyBudget` before they are read, and the memory decoding
   will take before it is decoded; a body that does not fit waits briefly, then gets 503 +
   Retry-After unread. Until the handler reads, uvicorn holds at most 64 KiB of a body per
   connection and stops reading the socket (uvicorn 0.54.0,
   ``uvicorn/protocols/http/flow_control.py``: ``HIGH_WATER_LIMIT``, applied in
   ``httptools_impl.py`` / ``h11_impl.py``), so waiting bodies cost no memory.
3. **Decoded size**: :func:`sarl_services.json_scan.scan` counts the body's values and nesting
   on its bytes first. A body nested deeper than :data:`MAX_DEPTH` gets 400; one whose
   decoding would take more than :data:`DECODE_FACTOR` x ``--max-body-bytes`` (e.g. 32 MiB of
   ``{"requests": [{}, {}, ...]}``, about 1.5 GB once decoded) gets 413; neither is decoded.

So bodies being read and decoded take at most :data:`BUDGET_FACTOR` x ``--max-body-bytes``
together, whatever clients send.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import orjson
from fastapi import Request

from sarl_services.errors import BadRequest, PayloadTooLarge, ServiceError
from sarl_services.json_scan import JsonShape, TooDeep, scan
from sarl_services.limits import BodyBudget

#: Deepest nesting of arrays and objects a body may have; request bodies need 5 or so.
MAX_DEPTH = 32
#: Decoding one body may take at most this many times ``--max-body-bytes`` (orjson's parse tree
#: and the Python objects). A body of float vectors (~20 bytes a number) takes ~3.7 times its
#: size; 3 bytes of `{},` take ~47 times.
DECODE_FACTOR = 6
#: Bodies being received and decoded take at most this many times ``--max-body-bytes``
#: together: one largest body (1 + DECODE_FACTOR) with room for a few more being received.
BUDGET_FACTOR = 8
# Bigger bodies are scanned and decoded on a worker thread so they do not stall the event loop.
_DECODE_INLINE_BYTES = 256 * 1024
_MiB = 2**20


def _size(n: int) -> str:
    return f"{n / _MiB:.1f} MiB" if n >= _MiB else f"{n} bytes"


def _too_large(limit: int) -> PayloadTooLarge:
    return PayloadTooLarge(f"request body exceeds the limit of {limit} bytes (--max-body-bytes)")


def _declared_size(request: Request, limit: int) -> int | None:
    declared = request.headers.get("content-length")
    if declared is None:
        return None
    try:
        size = int(declared)
    except ValueError as e:
        raise BadRequest("Content-Length header is not an integer") from e
    if size > limit:
        raise _too_large(limit)
    return size


class BodyReader:
    """Reads and decodes the bodies of one service's requests under ``limit`` bytes each and a
    shared :class:`~sarl_services.limits.BodyBudget`; create one per process."""

    def __init__(self, limit: int, *, budget: BodyBudget | None = None) -> None:
        self.limit = limit
        self.budget = budget or BodyBudget(BUDGET_FACTOR * limit)

    async def read_json_object(self, request: Request) -> dict[str, Any]:
        """The body as a JSON object: 413 over the byte limit or the decoded-size limit, 400
        unless valid JSON, an object, and at most :data:`MAX_DEPTH` deep; 503 while the
        budget for bodies in flight is spent. The decoded object leaves the budget at once;
        a caller that keeps it while waiting uses :meth:`json_object`."""
        payload, kept = await self._json_object(request)
        self.budget.release(kept)
        return payload

    @asynccontextmanager
    async def json_object(self, request: Request) -> AsyncIterator[dict[str, Any]]:
        """:meth:`read_json_object` whose decoded object stays in the budget until the block
        ends: decoded requests waiting for a scoring slot count against it too, so bodies read
        while the service is busy wait (then 503) instead of piling up decoded."""
        payload, kept = await self._json_object(request)
        try:
            yield payload
        finally:
            self.budget.release(kept)

    async def _json_object(self, request: Request) -> tuple[dict[str, Any], int]:
        """The decoded body and the bytes of it still held in the budget (its objects')."""
        try:
            raw = await self._read(request)
        except ServiceError as e:
            # Refused before the body was read whole (413 from Content-Length or the bytes read,
            # 503 for the budget): closing the connection keeps uvicorn from reading the rest
            # only to drop it, as it does to keep a connection alive (uvicorn 0.54,
            # httptools_impl.py: on_body after response_complete).
            e.headers["Connection"] = "close"
            raise
        held = len(raw)
        try:
            shape = await self._scan(raw)
            await self.budget.acquire(shape.decode_bytes)
            held += shape.decode_bytes
            payload = await _decode(raw)
        except BaseException:
            self.budget.release(held)
            raise
        self.budget.release(held - shape.object_bytes)  # the bytes and orjson's tree are gone
        return payload, shape.object_bytes

    async def _read(self, request: Request) -> bytearray:
        """The body's bytes, reserved in the budget before they are read (held on return; given
        back here on failure)."""
        held = 0
        try:
            declared = _declared_size(request, self.limit)
            if declared is not None:  # reserved before a byte is read
                await self.budget.acquire(declared)
                held = declared
            raw = bytearray()
            async for chunk in request.stream():
                if len(raw) + len(chunk) > self.limit:
                    raise _too_large(self.limit)
                if len(raw) + len(chunk) > held:  # chunked upload: reserve as it arrives
                    await self.budget.acquire(len(raw) + len(chunk) - held)
                    held = len(raw) + len(chunk)
                raw += chunk
        except BaseException:
            if held:
                self.budget.release(held)
            raise
        if held > len(raw):  # a body shorter than its Content-Length (cut short): keep it exact
            self.budget.release(held - len(raw))
        return raw

    async def _scan(self, raw: bytearray) -> JsonShape:
        try:
            if len(raw) > _DECODE_INLINE_BYTES:
                shape = await asyncio.to_thread(scan, raw, MAX_DEPTH)
            else:
                shape = scan(raw, MAX_DEPTH)
        except TooDeep as e:
            raise BadRequest(
                f"request body: arrays and objects nest deeper than {e.limit} levels, the limit; "
                "no request needs more"
            ) from e
        if shape.decode_bytes > DECODE_FACTOR * self.limit:
            raise PayloadTooLarge(
                f"request body: decoding it would take about {_size(shape.decode_bytes)} "
                f"({shape.values} JSON values in {len(raw)} bytes), over the limit of "
                f"{DECODE_FACTOR} x --max-body-bytes ({_size(DECODE_FACTOR * self.limit)}); "
                "send fewer values per request"
            )
        return shape


async def _decode(raw: bytearray) -> dict[str, Any]:
    try:
        if len(raw) > _DECODE_INLINE_BYTES:
            payload = await asyncio.to_thread(orjson.loads, raw)
        else:
            payload = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise BadRequest(f"request body is not valid JSON: {e}") from e
    if not isinstance(payload, dict):
        raise BadRequest("request body must be a JSON object")
    return payload
