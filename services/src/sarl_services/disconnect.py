"""Stop a request's work once its client has gone.

Called by the routes of both services around the work of one request (queueing, embedding,
scoring), after the body has been read. Without it, a client that gave up (a trainer's timeout,
a killed job) still had its request queued and scored: four abandoned requests delayed a small
one by 41 s.

How the work stops: the work runs as an asyncio task, and a second task waits on the ASGI
``receive`` channel, which (its body read) answers only ``http.disconnect``, when the client
closes the connection. Then the work task is cancelled: a request still waiting for a scoring
slot leaves the queue, a remote embedding call is abandoned, an encode job still queued on a
worker thread never starts, and no further chunk of CPU work is started (the services run CPU
work in chunks on worker threads for this reason; a chunk already running finishes, since a
thread cannot be interrupted). The route then answers 499, which only the metrics see.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

from fastapi import Request

from sarl_services.errors import ClientClosed

_T = TypeVar("_T")


async def _client_gone(request: Request) -> None:
    """Return when the client has closed the connection (call after the body was read)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass  # an empty trailing body message; keep listening


async def unless_disconnected(request: Request, work: Coroutine[Any, Any, _T]) -> _T:
    """Await ``work``; cancel it and raise :class:`ClientClosed` if the client goes first."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_client_gone(request))
    try:
        done, _ = await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    except BaseException:  # this handler itself was cancelled (shutdown): take both down
        task.cancel()
        watcher.cancel()
        raise
    watcher.cancel()
    if task in done:
        return task.result()
    task.cancel()
    await asyncio.wait({task})  # let it release its slot and cancel what it waits on
    raise ClientClosed("the client closed the connection; its request was stopped")
