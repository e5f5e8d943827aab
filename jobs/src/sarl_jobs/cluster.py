"""Where this pod sits in a Kubeflow PyTorchJob or TrainJob, and the Ray commands for its node.

Called by :mod:`sarl_jobs.verl_trainer` (node 0 starts the Ray head and the driver; other nodes
join it) and :mod:`sarl_jobs.trl_trainer` (the launcher's machine rank and main process). No
subprocess here; :func:`wait_for_head` opens TCP connections to the head's Ray port, the rest is
pure.

Two contracts, both read from upstream:

* the Training Operator's PyTorchJob (``pkg/controller.v1/pytorch/envvar.go`` and ``master.go``
  at v1.7.0 and v1.9.0), which sets on every replica ``PET_NNODES`` = number of replicas (Master
  + Workers), ``PET_NODE_RANK`` = ``RANK`` = replica index (Master 0, Worker ``i`` is ``i + 1``),
  ``PET_NPROC_PER_NODE`` = the job's ``nprocPerNode`` (``"auto"`` by default), ``WORLD_SIZE`` =
  replicas x ``nprocPerNode`` (1 when not a number): the number of *training processes*, not of
  nodes (the operator sets ``nprocPerNode`` to the GPUs per node, so reading ``WORLD_SIZE`` as the
  node count made a 1-node x 8-GPU verl job wait for 8 Ray nodes), ``MASTER_ADDR`` =
  ``PET_MASTER_ADDR`` = ``<job>-master-0`` and ``MASTER_PORT`` = ``PET_MASTER_PORT`` (23456 unless
  the ``pytorch`` container names a ``pytorchjob-port``);
* Kubeflow Trainer v2's torch plugin for a TrainJob (``pkg/runtime/framework/plugins/torch/
  torch.go`` at v2.3.0), which sets on the ``node`` container only the ``PET_*`` variables:
  ``PET_NNODES`` = ``trainer.numNodes``, ``PET_NPROC_PER_NODE`` = ``trainer.numProcPerNode`` or
  ``"auto"`` (with no GPU in the node's resources, ``auto`` becomes the CPU request, at least 1),
  ``PET_NODE_RANK`` from a fieldRef to the pod's ``batch.kubernetes.io/job-completion-index``
  annotation, ``PET_MASTER_ADDR`` = ``<trainjob>-node-0-0.<trainjob>`` (the first pod's hostname
  in the JobSet's headless Service) and ``PET_MASTER_PORT`` = 29500; no ``MASTER_ADDR``,
  ``MASTER_PORT``, ``RANK`` or ``WORLD_SIZE``.

So the node layout comes from the ``PET_*`` variables; ``WORLD_SIZE`` is only checked against
them. Without any of them the pod is a single node (a local smoke run).
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

logger = logging.getLogger(__name__)

RAY_PORT: Final = 6379
#: How long a worker waits for the head's Ray port before it exits 1 (a counted restart):
#: longer than pulling a ~20 GB trainer image onto a fresh node. ``SARL_HEAD_WAIT_S`` overrides.
HEAD_WAIT_S: Final = 1800.0
#: First and longest pause between two connection attempts (doubling in between).
HEAD_WAIT_FIRST_S: Final = 1.0
HEAD_WAIT_MAX_S: Final = 30.0
#: The Training Operator's default master port (``PyTorchJobDefaultPort``), used when neither
#: ``MASTER_PORT`` nor ``PET_MASTER_PORT`` is set.
DEFAULT_MASTER_PORT: Final = 23456


@dataclass(frozen=True)
class ClusterEnv:
    """This pod's place in the job: node ``node_rank`` of ``nnodes``, node 0 at
    ``master_addr:master_port``; ``nproc_per_node`` is the job's ``nprocPerNode`` when it is a
    number (None: ``auto`` or unset)."""

    master_addr: str
    master_port: int
    node_rank: int
    nnodes: int
    nproc_per_node: int | None = None

    @property
    def is_head(self) -> bool:
        return self.node_rank == 0

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> ClusterEnv:
        """From the PyTorchJob's or the TrainJob's variables (see the module docstring); errors
        name the variable and its value."""
        nproc_raw = environ.get("PET_NPROC_PER_NODE", "")
        nproc = _int(environ, "PET_NPROC_PER_NODE", None) if nproc_raw.isdigit() else None
        if "PET_NNODES" in environ:
            raw = environ["PET_NNODES"]
            if ":" in raw:
                raise ValueError(
                    f"PET_NNODES={raw!r}: an elastic node range; sarl jobs run a fixed number of "
                    "nodes (a PyTorchJob without elasticPolicy)"
                )
            nnodes = _int(environ, "PET_NNODES", 1)
        else:  # no Training Operator: WORLD_SIZE counts processes, nprocPerNode of them per node
            world = _int(environ, "WORLD_SIZE", 1)
            nnodes = max(world // (nproc or 1), 1)
        if environ.get("PET_NODE_RANK") == "":  # a fieldRef to a missing annotation
            raise ValueError(
                "PET_NODE_RANK is empty: the pod has no batch.kubernetes.io/job-completion-index "
                "annotation (not a pod of an Indexed Job)"
            )
        node_rank = _int(environ, "PET_NODE_RANK", _int(environ, "RANK", 0))
        env = cls(
            master_addr=environ.get(_source(environ, "MASTER_ADDR")) or "127.0.0.1",
            master_port=_int(environ, _source(environ, "MASTER_PORT"), DEFAULT_MASTER_PORT),
            node_rank=node_rank,
            nnodes=nnodes,
            nproc_per_node=nproc,
        )
        if env.nnodes < 1:
            raise ValueError(f"PET_NNODES={env.nnodes}: must be >= 1")
        if not 0 <= env.node_rank < env.nnodes:
            raise ValueError(
                f"PET_NODE_RANK={env.node_rank} is not in [0, PET_NNODES={env.nnodes})"
            )
        world_raw = environ.get("WORLD_SIZE")
        checkable = world_raw is not None and nproc is not None and "PET_NNODES" in environ
        if checkable and _int(environ, "WORLD_SIZE", 1) != env.nnodes * (nproc or 1):
            raise ValueError(
                f"WORLD_SIZE={world_raw} but PET_NNODES={env.nnodes} x "
                f"PET_NPROC_PER_NODE={nproc} = {env.nnodes * (nproc or 1)}: not a Training "
                "Operator environment"
            )
        return env

    def check_layout(self, *, nodes: int) -> None:
        """Raise ValueError when the job's node count is not the spec's ``resources.nodes``
        (the job was edited, or the pod runs another Experiment's config)."""
        if self.nnodes != nodes:
            raise ValueError(
                f"PET_NNODES={self.nnodes} but spec.resources.nodes={nodes}: the job and "
                "the Experiment disagree on the number of nodes"
            )


def _source(environ: Mapping[str, str], name: str) -> str:
    """Which variable to read: ``name`` or, where it is unset or empty, ``PET_<name>`` (a TrainJob
    sets only that one). A PyTorchJob sets both to the same value; different values raise."""
    pet_name = f"PET_{name}"
    value, pet = environ.get(name, ""), environ.get(pet_name, "")
    if value and pet and value != pet:
        raise ValueError(f"{name}={value!r} but {pet_name}={pet!r}: they must be the same")
    return name if value else pet_name


def _int(environ: Mapping[str, str], name: str, default: int | None) -> int:
    raw = environ.get(name)
    if raw is None or raw == "":
        if default is None:
            raise ValueError(f"{name} is not set")
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"job environment: {name}={raw!r} is not an integer") from None


def ray_start_command(env: ClusterEnv, *, num_gpus: int) -> list[str]:
    """``ray start`` for this node: the head on node 0, a blocking worker elsewhere.

    Workers ``--block`` so the pod lives as long as the Ray node does; the head returns and the
    driver (verl's ``main_ppo``) runs next in the same pod.
    """
    common = [f"--num-gpus={num_gpus}", "--disable-usage-stats"]
    if env.is_head:
        return ["ray", "start", "--head", f"--port={RAY_PORT}", *common]
    return ["ray", "start", f"--address={env.master_addr}:{RAY_PORT}", "--block", *common]


#: Ray 2.60's token authentication (``ray/_private/authentication/authentication_token_setup.py``:
#: ``RAY_AUTH_MODE=token``; the token from ``RAY_AUTH_TOKEN``, read by Ray's C++
#: ``AuthenticationTokenLoader``, or a file named by ``RAY_AUTH_TOKEN_PATH``).
RAY_AUTH_MODE_ENV: Final = "RAY_AUTH_MODE"
RAY_AUTH_TOKEN_ENV: Final = "RAY_AUTH_TOKEN"


def ray_auth_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The variables that turn on Ray's token authentication for this pod's Ray processes (head,
    workers, the verl driver): ``RAY_AUTH_MODE=token`` when ``RAY_AUTH_TOKEN`` is set (a tenant's
    pods get it from their Secret ``sarl-tenant``); nothing otherwise.

    Why: whoever reaches a Ray head's GCS (6379), client server (10001) or dashboard (8265) can
    run code in it (docs.ray.io/en/latest/ray-security). With the mode on, every Ray RPC and
    dashboard request carries the token and one without it (or with another) is refused. Set
    explicitly rather than left to Ray 2.60's default (which turns token mode on by itself when a
    token is found) so that an older or newer Ray behaves the same. An explicit ``RAY_AUTH_MODE``
    in the environment wins.
    """
    if not environ.get(RAY_AUTH_TOKEN_ENV, "").strip() or environ.get(RAY_AUTH_MODE_ENV):
        return {}
    return {RAY_AUTH_MODE_ENV: "token"}


class HeadUnreachable(RuntimeError):
    """The head's Ray port did not answer within the worker's wait."""


def head_wait_s(environ: Mapping[str, str]) -> float:
    """The worker's wait for the head: ``SARL_HEAD_WAIT_S`` seconds, else :data:`HEAD_WAIT_S`."""
    raw = environ.get("SARL_HEAD_WAIT_S", "")
    try:
        value = float(raw) if raw else HEAD_WAIT_S
    except ValueError:
        raise ValueError(f"SARL_HEAD_WAIT_S={raw!r} is not a number of seconds") from None
    if value <= 0:
        raise ValueError(f"SARL_HEAD_WAIT_S={raw!r}: must be > 0")
    return value


def _connect(host: str, port: int, timeout_s: float) -> None:
    with socket.create_connection((host, port), timeout=timeout_s):
        pass


def wait_for_head(
    host: str,
    port: int = RAY_PORT,
    *,
    timeout_s: float = HEAD_WAIT_S,
    first_delay_s: float = HEAD_WAIT_FIRST_S,
    max_delay_s: float = HEAD_WAIT_MAX_S,
    connect: Callable[[str, int, float], None] = _connect,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> float:
    """Return once ``host:port`` (the head's Ray GCS) accepts a TCP connection; the seconds
    waited. Raises :class:`HeadUnreachable` after ``timeout_s``.

    Why: the head's name resolves before its Ray port answers. JobSet's headless Service
    publishes not-ready addresses (``publishNotReadyAddresses``, defaulted true by JobSet
    v0.12.0's webhook, ``pkg/webhooks/jobset_webhook.go``) and a PyTorchJob Worker's init
    container waits only for the name, so a worker that ran ``ray start`` at once failed while
    the head still pulled its image, and every failure counted against the job's restarts.
    Attempts back off from ``first_delay_s`` doubling to ``max_delay_s``; each failed one is a
    log line naming the address, the reason and the time left.
    """
    start = clock()
    delay, attempt = first_delay_s, 0
    while True:
        attempt += 1
        try:
            connect(host, port, min(5.0, max(delay, 1.0)))
        except OSError as e:
            waited = clock() - start
            left = timeout_s - waited
            if left <= 0:
                raise HeadUnreachable(
                    f"the Ray head at {host}:{port} did not answer in {waited:.0f} s "
                    f"({attempt} attempts; last: {e}); exiting 1 so the job restarts this node "
                    "(raise SARL_HEAD_WAIT_S where the head takes longer to start)"
                ) from None
            logger.info(
                "waiting for the Ray head at %s:%d (attempt %d, %.0f s of %.0f s): %s; "
                "next try in %.0f s",
                host, port, attempt, waited, timeout_s, e, min(delay, left),
            )  # fmt: skip
            sleep(min(delay, left))
            delay = min(delay * 2, max_delay_s)
            continue
        waited = clock() - start
        if attempt > 1:
            logger.info("the Ray head at %s:%d answered after %.0f s", host, port, waited)
        return waited
