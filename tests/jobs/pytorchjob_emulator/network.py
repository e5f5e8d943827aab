"""Where replicas may run: the namespace capabilities of this machine, and the pod network
(a network namespace per pod on a host bridge, or the loopback).
"""

from __future__ import annotations

import contextlib
import os
import secrets as token
import shlex
import shutil
import signal
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Literal

from tests.jobs.pytorchjob_emulator.controller import LOOPBACK, EmulationError

Network = Literal["auto", "netns", "loopback"]

# ---- runtime: capabilities and the pod network ----


def _run(*argv: str) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(f"{shlex.join(argv)}: exit {done.returncode}: {done.stderr.strip()}")
    return done.stdout


@cache
def namespaces_unavailable() -> str | None:
    """Why containers cannot get private mount/UTS namespaces here (None: they can)."""
    if os.geteuid() != 0:
        return "needs root for mount and PID namespaces (unshare)"
    if not shutil.which("unshare"):
        return "no unshare (util-linux)"
    try:
        _run("unshare", "--mount", "--uts", "--pid", "--fork", "--mount-proc", "true")
    except RuntimeError as e:
        return str(e)
    return None


@cache
def netns_unavailable() -> str | None:
    """Why pods cannot get their own network namespaces here (None: they can)."""
    if (reason := namespaces_unavailable()) is not None:
        return reason
    if not shutil.which("ip"):
        return "no ip command (iproute2)"
    probe = f"sarl-probe-{token.token_hex(3)}"
    try:
        _run("ip", "netns", "add", probe)
        _run("ip", "netns", "del", probe)
    except RuntimeError as e:
        return str(e)
    return None


@dataclass
class PodNetwork:
    """Where pods live: their own network namespaces on a host bridge, or the loopback."""

    mode: Literal["netns", "loopback"]
    host_address: str
    _prefix: str = ""  # 10.213.<n>
    _token: str = ""
    _links: list[str] = field(default_factory=list)  # host veth ends
    _netns: list[str] = field(default_factory=list)

    @property
    def bridge(self) -> str:
        return f"sarlbr{self._token}"

    def attach(self, pods: Sequence[str]) -> dict[str, tuple[str | None, str]]:
        """A network namespace (None on loopback) and an address per pod."""
        if self.mode == "loopback":
            return {pod: (None, LOOPBACK) for pod in pods}
        out: dict[str, tuple[str | None, str]] = {}
        for pod in pods:
            slot = len(self._netns)
            if slot > 250:
                raise EmulationError("more than 250 pods on one PodNetwork")
            ns, host_end = f"sarl-{self._token}-{slot}", f"sarl{self._token}h{slot}"
            address = f"{self._prefix}.{slot + 2}"
            self._netns.append(ns)  # recorded first, so that a failure below is cleaned up
            self._links.append(host_end)
            _run("ip", "netns", "add", ns)
            _run("ip", "link", "add", host_end, "type", "veth", "peer", "name", "eth0", "netns", ns)
            _run("ip", "link", "set", host_end, "master", self.bridge, "up")
            inside = ("ip", "-n", ns)
            _run(*inside, "addr", "add", f"{address}/24", "dev", "eth0")
            _run(*inside, "link", "set", "eth0", "up")
            _run(*inside, "link", "set", "lo", "up")
            # A default route, as a pod has: Ray finds its node address by the route out.
            _run(*inside, "route", "add", "default", "via", self.host_address)
            out[pod] = (ns, address)
        return out

    def release(self, namespaces: Sequence[str]) -> list[str]:
        """Kill what is left in these namespaces and remove them with their veths; returns the
        errors (empty when everything went)."""
        errors = []
        for ns in namespaces:
            with contextlib.suppress(RuntimeError):
                for pid in _run("ip", "netns", "pids", ns).split():
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(int(pid), signal.SIGKILL)
            slot = self._netns.index(ns)
            # Deleting the host end deletes its peer (eth0) too.
            for step in (("link", "del", self._links[slot]), ("netns", "del", ns)):
                try:
                    _run("ip", *step)
                except RuntimeError as e:
                    if not _gone(e):
                        errors.append(str(e))
            self._netns[slot] = self._links[slot] = ""
        return errors

    def teardown(self) -> list[str]:
        """:meth:`release` every namespace, then remove the bridge; returns the errors."""
        errors = self.release([ns for ns in self._netns if ns])
        if self._token:
            try:
                _run("ip", "link", "del", self.bridge)
            except RuntimeError as e:
                if not _gone(e):
                    errors.append(str(e))
        self._token = ""
        return errors


def _gone(error: RuntimeError) -> bool:
    """Whether an ``ip ... del`` failed only because the object is already gone."""
    return "Cannot find device" in str(error) or "No such file" in str(error)


def _free_subnet() -> str:
    used = _run("ip", "-4", "-o", "addr", "show")
    for n in range(256):
        if f" 10.213.{n}." not in used:
            return f"10.213.{n}"
    raise RuntimeError("no free 10.213.<n>.0/24 subnet")


@contextlib.contextmanager
def pod_network(network: Network = "auto") -> Iterator[PodNetwork]:
    """A :class:`PodNetwork`: ``"netns"`` (raise if unavailable), ``"loopback"``, or ``"auto"``
    (netns when :func:`netns_unavailable` says it works)."""
    if network == "netns" and (reason := netns_unavailable()) is not None:
        raise EmulationError(f"network namespaces unavailable: {reason}")
    if network == "loopback" or (network == "auto" and netns_unavailable() is not None):
        yield PodNetwork("loopback", LOOPBACK)
        return
    prefix = _free_subnet()
    net = PodNetwork("netns", f"{prefix}.1", _prefix=prefix, _token=token.token_hex(3))
    try:
        _run("ip", "link", "add", net.bridge, "type", "bridge")
        _run("ip", "addr", "add", f"{net.host_address}/24", "dev", net.bridge)
        _run("ip", "link", "set", net.bridge, "up")
        yield net
    finally:
        errors = net.teardown()
        if errors:
            raise RuntimeError(f"pod network teardown: {'; '.join(errors)}")
