"""The resource plan of one Experiment: GPU memory per phase, disks, store, GPUs and hours.

Called by :func:`sarl.plan.plan_experiment` (and through it by ``sarl plan``, ``sarl submit``
and the operator, via :func:`sarl.integrations.cluster.check_cluster`) and by
:mod:`sarl.plan.study`. Pure: reads the spec, never the cluster or the network. The terms and
their sources are in :mod:`sarl.plan.memory`, :mod:`sarl.plan.storage` and :mod:`sarl.plan.hours`;
this module adds them up per phase and checks each sum against what the spec asks for,
naming the field to change and the value that would fit (:class:`Check`).
"""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict

from sarl.plan import hours, memory, storage
from sarl.plan.shapes import ModelShape, shape_of
from sarl.plan.units import gi_quantity, gib, parse_quantity
from sarl.spec.cluster_fields import ServedModelSpec
from sarl.spec.experiment import Experiment


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Term(_Frozen):
    """One line of a phase's memory: what it is, bytes per GPU."""

    name: str
    bytes: int


class Phase(_Frozen):
    """A phase's per-GPU memory, its terms and the limit it must stay within."""

    name: str
    terms: list[Term]
    limit: int

    @property
    def total(self) -> int:
        return sum(t.bytes for t in self.terms)


class Check(_Frozen):
    """One fit test: ``need`` within ``have`` (both in the check's unit), and if not, the
    field to change and the value that would fit."""

    what: str
    need: int
    have: int | None  # None: unknown (nothing to check against)
    unit: str = "bytes"
    field: str
    fix: str = ""

    @property
    def fits(self) -> bool:
        return self.have is None or self.need <= self.have

    def message(self) -> str:
        if self.unit == "bytes":
            need = gib(self.need)
            have = "an unknown capacity" if self.have is None else gib(self.have)
        else:
            need, have = f"{self.need:,} {self.unit}", f"{self.have or 0:,} {self.unit}"
        return f"{self.field}: {self.what} needs {need}, has {have}; {self.fix}"


class ExperimentPlan(_Frozen):
    """Everything the plan found for one Experiment."""

    name: str
    backend: str
    model: str
    parameters: int | None
    gpus_per_pod: int
    trainer_gpus: int
    served_gpus: int
    gpu_memory: int
    tokens_per_pass: int
    phases: list[Phase]
    kv_cache_tokens: int | None
    checkpoint_bytes: int | None
    store_bytes: int | None
    scratch_bytes: int | None
    steps: int | None
    hours: float | None
    gpu_hours: float | None
    checks: list[Check]
    notes: list[str]

    @property
    def misfits(self) -> list[Check]:
        return [c for c in self.checks if not c.fits]


def tiny_shape(exp: Experiment) -> ModelShape:
    """The built-in model's shape (``runner.tiny`` builds a tied Qwen3 from these fields)."""
    t = exp.spec.model.tiny
    return ModelShape(
        hidden=t.hidden_size,
        layers=t.num_layers,
        heads=t.num_heads,
        kv_heads=t.num_kv_heads,
        head_dim=t.hidden_size // t.num_heads,
        intermediate=t.intermediate_size,
        vocab=t.vocab_size,
        tied_embeddings=True,
        qk_norm=True,
    )


def tokens_per_pass(exp: Experiment) -> int:
    """Tokens of one forward pass per GPU: the dynamic batch's budget (a longer sequence gets
    a pass of its own), else micro-batch x the longest sequence (padding counted as verl's
    remove-padding drops it only where responses end early). TRL batches whole responses
    (``responses_per_pass``)."""
    algo = exp.spec.algorithm
    longest = algo.max_prompt_length + algo.max_response_length
    if exp.spec.resources.backend == "trl":
        return algo.responses_per_pass * longest
    if algo.max_tokens_per_gpu is not None:
        return max(algo.max_tokens_per_gpu, longest)
    return algo.micro_batch_size_per_gpu * longest


def plan_experiment(
    exp: Experiment,
    *,
    train_rows: int | None = None,
    store_capacity: int | None = None,
    read_local: bool = False,
) -> ExperimentPlan:
    """The plan of ``exp``; ``train_rows`` (for the hours) and ``store_capacity`` (bytes) are
    what the spec cannot say; ``read_local`` lets a local model directory's ``config.json`` give
    the shape (the user's own ``sarl plan`` only: :func:`sarl.plan.shapes.shape_of`)."""
    spec, res, algo = exp.spec, exp.spec.resources, exp.spec.algorithm
    shape = shape_of(spec.model.name, tiny_shape(exp), read_local=read_local)
    gpus_per_pod = max(res.gpus_per_node, 1)
    world = res.nodes * gpus_per_pod
    gpu_memory = parse_quantity(res.gpu_memory)
    tokens = tokens_per_pass(exp)
    notes: list[str] = []
    served_gpus = sum(serving.gpus for _, _, serving in served_models(exp))
    checks: list[Check] = []
    phases: list[Phase] = []
    kv_tokens = checkpoint = store = scratch = None
    if shape is None:
        notes.append(
            f"model {spec.model.name!r}: architecture unknown (not a local directory with "
            "config.json, nor a model sarl knows: sarl.plan.shapes.KNOWN), so GPU memory, "
            "disks and hours are not checked"
        )
    elif res.gpus_per_node == 0:
        notes.append("spec.resources.gpus_per_node is 0: a CPU job, no GPU memory to plan")
    else:
        phases, kv_tokens = _phases(exp, shape, world, gpu_memory, tokens)
        checks += _memory_checks(exp, phases, kv_tokens, shape, world, gpu_memory)
        checks += _served_checks(exp, gpu_memory)
    if shape is not None:
        critic = algo.name == "ppo"
        checkpoint = storage.run_checkpoint(shape.parameters, critic=critic)
        store = storage.store_need(checkpoint, spec.storage.keep_last)
        gpu_job = res.gpus_per_node > 0 and not spec.model.is_builtin
        caches = storage.CACHES if gpu_job else storage.SMALL_CACHES
        scratch = storage.scratch_need(
            shape.parameters,
            critic=critic,
            keep_last=spec.storage.keep_last,
            nodes=res.nodes,
            caches=caches,
        )
        checks += _disk_checks(exp, scratch, caches, store, store_capacity)
    n_steps, run_hours = _hours(exp, shape, world, train_rows, notes)
    gpu_hours = None if run_hours is None else run_hours * (world + served_gpus)
    return ExperimentPlan(
        name=exp.name,
        backend=res.backend,
        model=spec.model.name,
        parameters=None if shape is None else shape.parameters,
        gpus_per_pod=gpus_per_pod,
        trainer_gpus=world,
        served_gpus=served_gpus,
        gpu_memory=gpu_memory,
        tokens_per_pass=tokens,
        phases=phases,
        kv_cache_tokens=kv_tokens,
        checkpoint_bytes=checkpoint,
        store_bytes=store,
        scratch_bytes=scratch,
        steps=n_steps,
        hours=run_hours,
        gpu_hours=gpu_hours,
        checks=checks,
        notes=notes,
    )


def _phases(
    exp: Experiment, shape: ModelShape, world: int, gpu_memory: int, tokens: int
) -> tuple[list[Phase], int | None]:
    algo = exp.spec.algorithm
    params = shape.parameters
    state = [
        Term(
            name="actor: fp32 weights, grads, Adam (sharded)",
            bytes=memory.sharded_state(params, world, trained=True),
        )
    ]
    if algo.name == "ppo":
        critic = memory.sharded_state(params, world, trained=True)
        state.append(Term(name="critic: fp32 weights, grads, Adam (sharded)", bytes=critic))
    if algo.kl_coef > 0:
        reference = memory.sharded_state(params, world, trained=False)
        state.append(Term(name="reference: fp32 weights (sharded)", bytes=reference))
    state.append(Term(name="CUDA context, NCCL", bytes=memory.CUDA_OVERHEAD))
    training = Phase(
        name="training (policy update)",
        terms=[
            *state,
            Term(name="unsharded blocks and embedding", bytes=memory.gathered(shape)),
            Term(
                name=f"activations ({tokens:,} tokens, checkpointed)",
                bytes=memory.activations(shape, tokens),
            ),
            Term(
                name=f"logits ({tokens:,} tokens x {shape.vocab:,}, {memory.LOGIT_COPIES} copies)",
                bytes=memory.logits(shape, tokens),
            ),
            Term(name="vLLM asleep (CUDA graphs)", bytes=memory.VLLM_SLEEP_RESIDUAL),
        ],
        limit=int(gpu_memory * memory.USABLE_SHARE),
    )
    share = memory.vllm_share(gpu_memory, algo.rollout_gpu_memory_utilization)
    if exp.spec.resources.backend == "trl":
        if not exp.spec.resources.trl_vllm:
            return [training], None  # transformers' generate, inside the training process
        # TRL's colocated vLLM (sarl.integrations.trl_cluster.generation_overrides) stays awake
        # through the update (TRL 1.16's vllm_enable_sleep_mode is off): its share counts in
        # the training phase. Where the image has no vLLM the job falls back to transformers.
        colocated = Term(
            name=f"vLLM colocated: {algo.rollout_gpu_memory_utilization:g} of the GPU (awake)",
            bytes=share,
        )
        terms = [t for t in training.terms if not t.name.startswith("vLLM asleep")]
        training = training.model_copy(update={"terms": [*terms, colocated]})
        return [training], memory.kv_cache_tokens(shape, share)
    rollout = Phase(
        name="rollout (vLLM generates)",
        terms=[
            *state,
            Term(
                name=f"vLLM: {algo.rollout_gpu_memory_utilization:g} of the GPU "
                "(weights, KV cache)",
                bytes=share,
            ),
        ],
        limit=gpu_memory,  # vLLM refuses to start when less than its share is free
    )
    return [training, rollout], memory.kv_cache_tokens(shape, share)


def _largest_budget(shape: ModelShape, training: Phase, tokens: int) -> int:
    """The largest tokens per pass (a multiple of 1024) whose update fits the phase's limit:
    the activation and logit terms are linear in tokens, the rest does not move."""
    moving = memory.activations(shape, tokens) + memory.logits(shape, tokens)
    fixed = training.total - moving
    return max(int((training.limit - fixed) / (moving / tokens)) // 1024 * 1024, 0)


def _memory_checks(
    exp: Experiment,
    phases: list[Phase],
    kv_tokens: int | None,
    shape: ModelShape,
    world: int,
    gpu_memory: int,
) -> list[Check]:
    algo = exp.spec.algorithm
    longest = algo.max_prompt_length + algo.max_response_length
    training = phases[0]
    fits_budget = _largest_budget(shape, training, tokens_per_pass(exp))
    verl = exp.spec.resources.backend == "verl"
    colocated = not verl and exp.spec.resources.trl_vllm
    if fits_budget < longest and colocated:
        field = "spec.algorithm.rollout_gpu_memory_utilization"
        fix = (
            "even one response per pass does not fit beside TRL's colocated vLLM, which stays "
            "on the GPU through the update: lower it, or set spec.resources.trl_vllm: false"
        )
    elif fits_budget < longest:
        field = "spec.resources.nodes"
        fix = (
            "even one response per pass does not fit: use more GPUs (spec.resources.nodes), "
            "GPUs with more memory (spec.resources.gpu_memory) or a shorter "
            "spec.algorithm.max_response_length"
        )
    elif verl:
        # The field to change is the one that sets the pass's size today.
        field = (
            "spec.algorithm.micro_batch_size_per_gpu"
            if algo.max_tokens_per_gpu is None
            else "spec.algorithm.max_tokens_per_gpu"
        )
        fix = (
            f"set spec.algorithm.max_tokens_per_gpu to at most {fits_budget:,} (verl's dynamic "
            f"batch; at least max_prompt_length + max_response_length = {longest:,})"
        )
    else:
        field = "spec.algorithm.micro_batch_size_per_gpu"
        fix = f"set it to at most {max(fits_budget // longest, 1)}"
    checks = [
        Check(
            what=f"the {training.name} on each GPU "
            f"({memory.USABLE_SHARE:.0%} of {gib(gpu_memory)} usable)",
            need=training.total,
            have=training.limit,
            field=field,
            fix=fix,
        )
    ]
    if len(phases) > 1 and kv_tokens is not None:
        rollout = phases[1]
        trainer_state = rollout.total - rollout.terms[-1].bytes
        most = math.floor((gpu_memory - trainer_state) / gpu_memory * 100) / 100
        share_fix = (
            f"set it to at most {most:.2f}"
            if most >= 0.05
            else "the trainer's state alone leaves vLLM no room: use more GPUs "
            "(spec.resources.nodes) or GPUs with more memory (spec.resources.gpu_memory)"
        )
        checks.append(
            Check(
                what=f"the {rollout.name} on each GPU (the trainer's state beside vLLM's share)",
                need=rollout.total,
                have=rollout.limit,
                field="spec.algorithm.rollout_gpu_memory_utilization",
                fix=share_fix,
            )
        )
        checks.append(
            Check(
                what="vLLM's KV cache per GPU (vLLM refuses to start when one longest sequence "
                "does not fit)",
                need=longest,
                have=kv_tokens,
                unit="tokens",
                field="spec.algorithm.rollout_gpu_memory_utilization",
                fix="raise it, or lower spec.algorithm.max_response_length",
            )
        )
    return checks


def served_models(exp: Experiment) -> list[tuple[str, str, ServedModelSpec]]:
    """(key, model, serving settings) of each model the operator serves for ``exp``: the
    embedding model of an ``openai`` embedder without a URL, a chat judge without one."""
    from sarl.integrations.cluster import chat_endpoints, served_embedders

    out: list[tuple[str, str, ServedModelSpec]] = []
    embedders = served_embedders(exp)
    if embedders:
        out.append(("embedding", embedders[0][1], exp.spec.serving.embedding))
    reward = [term.model_dump(mode="json") for term in exp.spec.reward]
    judges = [ep for _, ep in chat_endpoints(reward) if not ep.get("url")]
    if judges:
        out.append(("judge", str(judges[0].get("model") or ""), exp.spec.serving.judge))
    return out


def _served_checks(exp: Experiment, gpu_memory: int) -> list[Check]:
    """Each served model on its own GPUs: bf16 weights, one longest input's KV cache, vLLM's
    activations, within vLLM's default ``gpu_memory_utilization`` (0.9) of each GPU."""
    out: list[Check] = []
    for key, name, serving in served_models(exp):
        shape = shape_of(name)
        if shape is None:
            continue
        need = (
            shape.parameters * 2
            + shape.kv_bytes_per_token * serving.max_model_len
            + memory.vllm_activations(shape)
            + memory.CUDA_OVERHEAD
        ) // serving.gpus
        out.append(
            Check(
                what=f"the served {key} model {name} per GPU (weights, KV cache of "
                f"max_model_len {serving.max_model_len:,})",
                need=need,
                have=int(gpu_memory * 0.9),
                field=f"spec.serving.{key}.gpus",
                fix="serve it on more GPUs, or lower its max_model_len",
            )
        )
    return out


def _disk_checks(
    exp: Experiment, scratch: int, caches: int, store: int, store_capacity: int | None
) -> list[Check]:
    res, keep = exp.spec.resources, exp.spec.storage.keep_last
    checks = []
    if res.scratch_claim is None:  # a claim's size is the cluster's to know
        checks.append(
            Check(
                what=f"the trainer pod's scratch disk ({keep} local checkpoints, the policy, "
                f"caches of {gib(caches)})",
                need=scratch,
                have=parse_quantity(res.scratch_size),
                field="spec.resources.scratch_size",
                fix=f"set it to at least {gi_quantity(scratch)}",
            )
        )
    checks.append(
        Check(
            what=f"the object store ({keep} checkpoints kept plus one uploading)",
            need=store,
            have=store_capacity,
            field="spec.storage.checkpoint_uri",
            fix="point it at a store with room (external S3; the platform's bundled store is a "
            "trial store), or lower spec.storage.keep_last",
        )
    )
    return checks


def _hours(
    exp: Experiment, shape: ModelShape | None, world: int, rows: int | None, notes: list[str]
) -> tuple[int | None, float | None]:
    spec, algo = exp.spec, exp.spec.algorithm
    if rows is None and spec.data.task != "dataset":
        rows = spec.data.train_size
    if rows is None and spec.data.dataset:
        stem = spec.data.dataset.rsplit("/", 1)[-1].split(".", 1)[0]
        rows = hours.KNOWN_ROWS.get(stem)
    n = hours.steps(rows, algo.train_batch_size, algo.epochs, algo.max_steps)
    if n is None:
        notes.append(
            f"steps unknown: the rows of {spec.data.dataset!r} are not known (sarl plan "
            "--train-rows N), so hours are not estimated"
        )
        return None, None
    if shape is None or spec.resources.gpus_per_node == 0:
        return n, None
    step = hours.StepShape(
        prompts=algo.train_batch_size,
        trained_responses=algo.rollouts_per_prompt,
        generated_responses=spec.votes_per_prompt or algo.rollouts_per_prompt,
        prompt_tokens=algo.max_prompt_length * hours.PROMPT_SHARE,
        response_tokens=algo.max_response_length * hours.RESPONSE_SHARE,
        critic=algo.name == "ppo",
    )
    return n, n * hours.step_seconds(step, shape.parameters, world) / 3600
