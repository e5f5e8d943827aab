"""One owner per run (issue 37 item 4): the run lease in the checkpoint store, on a local directory
and on the moto S3 server (real conditional writes over HTTP: ``If-None-Match: *`` to create,
``If-Match: <etag>`` to renew). Before the lease, two ``--resume``s from two machines sharing the
store both trained and wrote the same checkpoints; only a per-workdir ``flock`` existed.

"Another machine" is a :class:`Holder` with another host name: the lease compares holders by id
and checks liveness only for processes of this host, so that is what a second machine looks like.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from sarl.storage import CheckpointStore
from sarl.storage.lease import STALE_PERIODS, Holder, Lease, LeaseHeld, LeaseLost, lease_for
from tests.sarl.storage.conftest import Harness

OTHER = Holder("other-machine-holder", "gpu-node-7", 4242, "2026-01-01T00:00:00+00:00")


def _other(store: CheckpointStore) -> Lease:
    lease = lease_for(store)
    lease.holder = OTHER
    return lease


def _age(harness: Harness, seconds: float) -> None:
    """Make the stored lease look last renewed ``seconds`` ago (its holder stopped renewing)."""
    lease = lease_for(harness.store)
    current = lease.backend.read()
    assert current is not None
    doc = json.loads(current[0].to_bytes())
    doc["renewed_at"] = (datetime.now(UTC) - timedelta(seconds=seconds)).isoformat()
    harness.put("lease.json", json.dumps(doc).encode())


def test_second_owner_is_refused_naming_the_first(harness: Harness) -> None:
    first = _other(harness.store)
    first.acquire()
    first.renew(run_id="abc123")
    second = lease_for(harness.store)
    with pytest.raises(LeaseHeld) as caught:
        second.acquire()
    message = str(caught.value)
    assert "pid 4242 on gpu-node-7" in message and "MLflow run abc123" in message
    assert "last renewed" in message and "\n" not in message
    assert not second.held
    with pytest.raises(LeaseHeld):  # --take-over does not take a live lease
        second.acquire(take_over=True)


def test_stale_lease_is_taken_over_only_when_asked(harness: Harness) -> None:
    first = _other(harness.store)
    first.acquire()
    _age(harness, STALE_PERIODS * first.period_s + 60)
    second = lease_for(harness.store)
    with pytest.raises(LeaseHeld, match="stale.*--take-over"):
        second.acquire()
    second.acquire(take_over=True)
    assert second.held and second.taken_from is not None
    assert second.taken_from.holder == OTHER
    # The old owner finds out at its next renewal or checkpoint check.
    with pytest.raises(LeaseLost, match=r"taken over by pid \d+ on "):
        first.check()


def test_renew_keeps_the_run_and_release_frees_it(harness: Harness) -> None:
    lease = lease_for(harness.store)
    lease.acquire()
    lease.renew(run_id="r1")
    lease.check()
    lease.renew()
    lease.release()
    other = _other(harness.store)
    other.acquire()  # free again
    assert other.held


def test_a_dead_process_of_this_host_is_taken_over(harness: Harness) -> None:
    """A run SIGKILLed on this machine: its pid is gone, so the resume there needs no flag."""
    import socket
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], check=True,
                          capture_output=True, text=True)  # fmt: skip
    dead = _other(harness.store)
    dead.holder = Holder("dead-holder", socket.gethostname(), int(proc.stdout), "2026-01-01")
    dead.acquire()
    lease = lease_for(harness.store)
    lease.acquire()
    assert lease.held and lease.taken_from is not None


def test_two_creates_at_once_one_wins(harness: Harness) -> None:
    """The conditional create: both saw no lease, only one write may succeed."""
    from sarl.storage.lease import LeaseDoc

    a, b = lease_for(harness.store), _other(harness.store)
    now = datetime.now(UTC).isoformat()
    assert a.backend.write(LeaseDoc(a.holder, now, a.period_s), None)
    assert not b.backend.write(LeaseDoc(b.holder, now, b.period_s), None)
    current = a.backend.read()
    assert current is not None and current[0].holder == a.holder
