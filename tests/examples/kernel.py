"""A real Jupyter kernel driven cell by cell, for what a notebook user does beyond running a
notebook top to bottom: interrupting a cell, running again in the same kernel.

Used by the kernel tests in this package. :class:`Kernel` starts an IPython kernel of this
interpreter (like :mod:`tests.examples.notebooks`) through jupyter_client's ``KernelManager``,
in its own process group as Jupyter starts kernels; :meth:`Kernel.interrupt` is the notebook's
"interrupt" button (``KernelManager.interrupt_kernel``: SIGINT to the kernel's process group).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jupyter_client.manager import KernelManager


@dataclass
class Reply:
    """What one executed cell produced: its status, streams, displayed data and error."""

    status: str = "ok"
    stdout: str = ""
    stderr: str = ""
    data: list[dict[str, Any]] = field(default_factory=list)
    ename: str = ""
    evalue: str = ""

    @property
    def html(self) -> str:
        return "\n".join(d["text/html"] for d in self.data if "text/html" in d)


class Kernel:
    """One kernel; ``execute`` runs a cell to the end, ``submit`` + ``finished`` + ``collect``
    let the caller act (interrupt) while it runs."""

    def __init__(self, km: KernelManager) -> None:
        self.km = km
        self.client = km.client()
        self.client.start_channels()
        self.client.wait_for_ready(timeout=120)
        self._replies: dict[str, Reply] = {}
        self._done: set[str] = set()

    @property
    def pid(self) -> int:
        """The kernel process's id."""
        provisioner: Any = self.km.provisioner
        return int(provisioner.process.pid)

    def submit(self, code: str) -> str:
        """Start running ``code``; the message id to :meth:`collect` its reply with."""
        msg_id = str(self.client.execute(code))
        self._replies[msg_id] = Reply()
        return msg_id

    def finished(self, msg_id: str) -> bool:
        """Whether cell ``msg_id`` ended (reads the messages that arrived, without waiting)."""
        while msg_id not in self._done and self.client.iopub_channel.msg_ready():
            self._read(self.client.get_iopub_msg(timeout=1))
        return msg_id in self._done

    def collect(self, msg_id: str, timeout_s: float = 900) -> Reply:
        """Outputs of cell ``msg_id`` once the kernel is idle again (``timeout_s`` between two
        messages at most)."""
        while msg_id not in self._done:
            self._read(self.client.get_iopub_msg(timeout=timeout_s))
        return self._replies[msg_id]

    def execute(self, code: str, timeout_s: float = 900) -> Reply:
        """Run ``code`` to the end."""
        return self.collect(self.submit(code), timeout_s)

    def interrupt(self) -> None:
        """What the notebook's interrupt button does."""
        self.km.interrupt_kernel()

    def _read(self, msg: dict[str, Any]) -> None:
        reply = self._replies.get(msg["parent_header"].get("msg_id", ""))
        if reply is None:
            return
        kind, content = msg["msg_type"], msg["content"]
        if kind == "stream":
            if content["name"] == "stdout":
                reply.stdout += content["text"]
            else:
                reply.stderr += content["text"]
        elif kind in ("display_data", "execute_result", "update_display_data"):
            reply.data.append(content["data"])
        elif kind == "error":
            reply.status, reply.ename, reply.evalue = "error", content["ename"], content["evalue"]
        elif kind == "status" and content["execution_state"] == "idle":
            self._done.add(msg["parent_header"]["msg_id"])


@contextmanager
def kernel(cwd: Path, env: Mapping[str, str] | None = None) -> Iterator[Kernel]:
    """A kernel of this interpreter started in ``cwd``; shut down (and killed) at the end."""
    km = KernelManager(kernel_name="python3")
    km.kernel_cmd = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    km.start_kernel(cwd=str(cwd), env={**os.environ, **(env or {})})
    k = Kernel(km)
    try:
        yield k
    finally:
        k.client.stop_channels()
        km.shutdown_kernel(now=True)
