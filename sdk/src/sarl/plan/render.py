"""The resource plan as text (the table ``sarl plan`` prints) and as JSON-ready data.

Called by :mod:`sarl.cli.plan`. A Study is one line per arm (its seeds share one plan);
``terms=True`` adds each phase's per-GPU terms, which an Experiment always shows. The
assumptions behind the figures are printed under the table, so a reader can weigh them.
"""

from __future__ import annotations

from typing import Any

from sarl.plan import hours, memory, storage
from sarl.plan.plan import ExperimentPlan
from sarl.plan.study import StudyPlan
from sarl.plan.units import gib


def assumptions() -> list[str]:
    """The constants the plan assumes rather than derives (their sources: sarl.plan.*)."""
    return [
        f"GPU memory: {memory.LOGIT_COPIES} bf16 copies of the logits at a pass's peak; "
        f"CUDA context and NCCL {gib(memory.CUDA_OVERHEAD)}; a sleeping vLLM keeps "
        f"{gib(memory.VLLM_SLEEP_RESIDUAL)}; a phase may use {memory.USABLE_SHARE:.0%} of the "
        "GPU (the rest: allocator fragmentation); vLLM's share stays as set while training "
        "runs beside it during rollout",
        f"disks: {gib(storage.CACHES)} of caches per GPU trainer pod "
        f"({gib(storage.SMALL_CACHES)} on CPU or with the built-in model); checkpoints of 14 "
        "bytes per parameter (actor: fp32 shards, Adam, bf16 HF copy) and 12 (critic)",
        f"hours: {hours.PEAK_FLOPS / 1e12:.0f} TFLOP/s per GPU (H100 bf16 dense), training at "
        f"{hours.TRAINING_MFU:.0%} MFU, generation at {hours.GENERATION_MFU:.0%}; responses "
        f"{hours.RESPONSE_SHARE:.0%} and prompts {hours.PROMPT_SHARE:.0%} of their maximum "
        "length; validation passes not counted",
    ]


def _fits(plan: ExperimentPlan) -> str:
    fields = dict.fromkeys(c.field for c in plan.misfits)  # each field once, in order
    return "yes" if not fields else "NO: " + ", ".join(fields)


def _phase(plan: ExperimentPlan, index: int) -> str:
    if len(plan.phases) <= index:
        return "-"
    phase = plan.phases[index]
    return f"{phase.total / 2**30:.1f}/{phase.limit / 2**30:.0f} GiB"


def _num(value: float | int | None, fmt: str = "{:,.1f}") -> str:
    return "?" if value is None else fmt.format(value)


_HEADER = (
    "run",
    "GPUs",
    "train/GPU",
    "rollout/GPU",
    "KV tokens",
    "scratch",
    "checkpoint",
    "store/run",
    "steps",
    "GPU-h/run",
    "fits",
)


def _row(label: str, plan: ExperimentPlan) -> tuple[str, ...]:
    scratch = next((c for c in plan.checks if c.field == "spec.resources.scratch_size"), None)
    scratch_cell = "?"
    if scratch is not None and scratch.have is not None:
        scratch_cell = f"{scratch.need / 2**30:.0f}/{scratch.have / 2**30:.0f} GiB"
    return (
        label,
        f"{plan.trainer_gpus}+{plan.served_gpus}" if plan.served_gpus else str(plan.trainer_gpus),
        _phase(plan, 0),
        _phase(plan, 1),
        _num(plan.kv_cache_tokens, "{:,}"),
        scratch_cell,
        "?" if plan.checkpoint_bytes is None else gib(plan.checkpoint_bytes),
        "?" if plan.store_bytes is None else gib(plan.store_bytes),
        _num(plan.steps, "{:,}"),
        _num(plan.gpu_hours),
        _fits(plan),
    )


def _table(rows: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows
    ]


def _terms(plan: ExperimentPlan) -> list[str]:
    out = [
        f"  {plan.name}: {plan.model}, {_num(plan.parameters, '{:,}')} parameters, "
        f"{plan.tokens_per_pass:,} tokens per pass, {gib(plan.gpu_memory)} per GPU"
    ]
    for phase in plan.phases:
        out.append(f"    {phase.name}: {gib(phase.total)} of {gib(phase.limit)}")
        out += [f"      {gib(t.bytes):>10}  {t.name}" for t in phase.terms]
    return out


def _misfits(items: list[tuple[str, str]]) -> list[str]:
    if not items:
        return ["Fits: every check passes."]
    return ["Does not fit:"] + [f"  - {where}{message}" for where, message in items]


def experiment_text(plan: ExperimentPlan) -> str:
    """An Experiment's plan: the summary row, every phase's terms, misfits, notes."""
    lines = [f"Resource plan of Experiment {plan.name} ({plan.backend})", ""]
    lines += _table([_HEADER, _row(plan.name, plan)])
    lines += ["", *_terms(plan), ""]
    lines += _misfits([("", c.message()) for c in plan.misfits])
    lines += [f"Note: {n}" for n in plan.notes]
    lines += ["", "Assumptions:", *[f"  - {a}" for a in assumptions()]]
    return "\n".join(lines)


def study_text(plan: StudyPlan, *, terms: bool = False) -> str:
    """A Study's plan: one row per arm (seeds share a plan), totals, misfits, notes."""
    by_arm: dict[str, tuple[list[int], ExperimentPlan]] = {}
    for arm, seed, run in plan.runs:
        by_arm.setdefault(arm, ([], run))[0].append(seed)
    rows = [_HEADER] + [
        _row(f"{arm} (seeds {','.join(map(str, seeds))})", run)
        for arm, (seeds, run) in by_arm.items()
    ]
    lines = [
        f"Resource plan of Study {plan.name}: {len(plan.runs)} runs, {plan.parallelism} at once",
        "",
        *_table(rows),
        "",
        f"Study: store {'?' if plan.store_bytes is None else gib(plan.store_bytes)} "
        f"(all runs' checkpoints kept, {plan.parallelism} uploading); peak GPUs "
        f"{plan.peak_gpus}; GPU-hours {_num(plan.gpu_hours, '{:,.0f}')}",
    ]
    if terms:
        lines += ["", "Per-GPU memory by phase:"]
        shown: dict[str, str] = {}
        for _, run in by_arm.values():
            key = repr(run.phases)
            if key in shown:
                lines.append(f"  {run.name}: as {shown[key]}")
                continue
            shown[key] = run.name
            lines += _terms(run)
    seen: set[str] = set()
    items = []
    for where, check in plan.misfits:
        arm = where.split(" seed ", 1)[0]
        key = f"{arm}|{check.field}"
        if key not in seen:
            seen.add(key)
            items.append((f"{arm}: " if where != "study" else "", check.message()))
    lines += ["", *_misfits(items)]
    notes = sorted({n for _, _, run in plan.runs for n in run.notes})
    lines += [f"Note: {n}" for n in notes]
    lines += ["", "Assumptions:", *[f"  - {a}" for a in assumptions()]]
    return "\n".join(lines)


def as_json(plan: ExperimentPlan | StudyPlan) -> dict[str, Any]:
    """The plan as JSON-ready data, with each check's ``fits`` and the assumptions."""
    data = plan.model_dump(mode="json")
    data["fits"] = not plan.misfits
    data["assumptions"] = assumptions()
    return data
