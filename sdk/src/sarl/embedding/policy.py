"""Step embeddings from the policy being trained (``embedder.kind: policy``; SARL v1 A.1, A).

Implementation A of SARL v1 Appendix A.1: run the policy itself on the generated sequence and
take each step's embedding as the mean of its token hidden states at layer l. Who calls what:

1. ``make_embedder`` builds an unbound :class:`PolicyEmbedder` (the structure reward holds it).
2. The trainer integration binds the policy once the trainer exists:
   ``sarl.integrations.trl.bind_policy(rewards, trainer)`` (the local runner does this) calls
   :meth:`PolicyEmbedder.bind_trainer`, so every batch uses ``trainer.model`` as it is then.
3. For each batch, the TRL reward function opens :meth:`PolicyEmbedder.batch` with the prompts,
   the ``completion_ids`` TRL sampled and the texts the reward scores. On entry, for every
   completion: decode the ids as TRL does (:func:`~sarl.embedding.spans.token_char_spans`),
   check the decoded text *is* the scored text, find the steps' character spans with the
   structure reward's own rules (:func:`~sarl.embedding.spans.step_char_spans`), map them to
   token positions, run prompt + completion through the policy (batched, right-padded, eval mode,
   ``torch.no_grad``, modes restored after: :mod:`sarl.embedding.hidden_states`) and mean-pool
   layer l over each step's tokens.
4. Inside the batch, the structure scorer calls :meth:`PolicyEmbedder.embed` with the step strings
   of all responses, as with any embedder; the strings must be exactly the steps found in step 3,
   in order (else :class:`~sarl.embedding.base.EmbeddingError`), and their vectors are returned.

The prompt is part of the sequence (its tokens are context, never pooled): the states are those
the policy had while writing each step, and a step's first token does not sit at position 0,
where decoder LMs park attention-sink activations that would dominate a mean. Plain-text prompts
are tokenized as TRL tokenizes them (``tokenizer(prompt)``); chat prompts with the tokenizer's
chat template (TRL's ``chat_template_kwargs``/tools are not known here).

All forward passes happen when the batch opens, one per ``batch_size`` completions whether or
not a completion has steps, so under FSDP every rank makes the same number of forward calls.
Outside a bound batch :meth:`embed` raises an error naming ``embedder.kind``: there is no policy
outside training (``kind: hf_causal`` embeds with a fixed model instead).
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from sarl.embedding.base import EmbeddingError, FloatArray
from sarl.embedding.hidden_states import (
    DEFAULT_LAYER,
    LayerChoice,
    Positions,
    num_hidden_layers,
    pool_layer,
    resolve_layer,
)
from sarl.embedding.spans import SegmentationSettings, step_token_positions, token_char_spans
from sarl.rewards.structure.segmentation import step_char_spans

DEFAULT_BATCH_SIZE = 8  # completions per forward pass

NOT_BOUND = (
    "embedder.kind 'policy': no policy model is bound. This embedder pools the hidden states of "
    "the model being trained, so it works only inside training, where the trainer integration "
    "binds it (the local TRL runner does; see sarl.integrations.trl.bind_policy). To embed steps "
    "with a fixed causal LM use embedder.kind 'hf_causal' with embedder.model."
)
NO_BATCH = (
    "embedder.kind 'policy': embed() was called outside a training batch. This embedder embeds "
    "the steps of the completions the trainer sampled, so the trainer integration must open "
    "PolicyEmbedder.batch(...) with their completion_ids around the reward call."
)

Prompt = str | Sequence[Mapping[str, Any]] | None


@dataclass(frozen=True)
class CompletionSteps:
    """The steps of one completion and their vectors (row i embeds ``texts[i]``)."""

    texts: tuple[str, ...]
    vectors: FloatArray  # (len(texts), dim), unit rows
    token_positions: tuple[Positions, ...]  # per step, positions in the completion ids


@dataclass(frozen=True)
class _Batch:
    texts: tuple[str, ...]  # every step of every completion, in order
    vectors: FloatArray  # (len(texts), dim)


# embedder id -> its open batch. One module-level variable (ContextVars are never freed), a
# fresh dict per entry, so nested or concurrent batches of several embedders never mix.
_OPEN: contextvars.ContextVar[Mapping[int, _Batch] | None] = contextvars.ContextVar(
    "sarl_policy_batches", default=None
)


class PolicyEmbedder:
    """Embeds the steps of sampled completions with the policy's own hidden states at ``layer``.

    ``batch_size`` completions per forward pass; ``max_tokens`` (None: no cap) bounds prompt +
    completion tokens per sequence by cutting the prompt from the left (the completion is never
    cut: the trainer already ran it at full length).
    """

    def __init__(
        self,
        *,
        layer: LayerChoice = DEFAULT_LAYER,
        batch_size: int = DEFAULT_BATCH_SIZE,
        max_tokens: int | None = None,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"embedder.batch_size: must be >= 1, got {batch_size}")
        if max_tokens is not None and max_tokens < 1:
            raise ValueError(f"embedder.max_tokens: must be >= 1, got {max_tokens}")
        self.layer = layer
        self.batch_size = batch_size
        self.max_tokens = max_tokens
        self._get_model: Callable[[], Any] | None = None
        self._tokenizer: Any = None

    @property
    def bound(self) -> bool:
        """True once a policy has been bound."""
        return self._get_model is not None

    def bind(self, model: Any, tokenizer: Any) -> None:
        """Use ``model`` (a Hugging Face causal LM, updated in place by training) and its
        tokenizer (a fast tokenizer gives the cheap token-offset path)."""
        self._get_model = lambda: model
        self._tokenizer = tokenizer

    def bind_trainer(self, trainer: Any) -> None:
        """Use a transformers/TRL trainer's policy: ``trainer.model`` is read at every batch (a
        trainer may replace it when it prepares the model for distributed training) and the
        tokenizer is ``trainer.processing_class`` (a processor's ``tokenizer``)."""
        processing = trainer.processing_class
        self._get_model = lambda: trainer.model
        self._tokenizer = getattr(processing, "tokenizer", processing)

    def embed_completions(
        self,
        prompts: Sequence[Prompt],
        completion_ids: Sequence[Sequence[int]],
        responses: Sequence[str],
        segmentation: SegmentationSettings,
    ) -> list[CompletionSteps]:
        """Per completion, its steps (found with ``segmentation``) and their vectors.

        ``responses[i]`` must be ``completion_ids[i]`` decoded with special tokens skipped (what
        TRL passes as the completion and the reward scores); EmbeddingError names the first one
        that is not.
        """
        if not len(prompts) == len(completion_ids) == len(responses):
            raise ValueError(
                f"embedder.kind 'policy': got {len(prompts)} prompts, {len(completion_ids)} "
                f"completion_ids and {len(responses)} responses"
            )
        if self._get_model is None:
            raise EmbeddingError(NOT_BOUND)
        model, tokenizer = self._get_model(), self._tokenizer
        layer = resolve_layer(self.layer, num_hidden_layers(model))
        sequences: list[list[int]] = []
        pools: list[list[Positions]] = []
        steps: list[tuple[tuple[str, ...], tuple[Positions, ...]]] = []
        for i, (prompt, ids, response) in enumerate(
            zip(prompts, completion_ids, responses, strict=True)
        ):
            texts, positions = _locate_steps(tokenizer, ids, response, segmentation, i)
            context = self._context(tokenizer, prompt, len(ids))
            sequences.append([*context, *(int(t) for t in ids)])
            pools.append([p + len(context) for p in positions])
            steps.append((texts, positions))
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        rows = pool_layer(
            model, sequences, pools, layer=layer, batch_size=self.batch_size, pad_id=pad
        )
        return [
            CompletionSteps(texts=t, vectors=v, token_positions=p)
            for (t, p), v in zip(steps, rows, strict=True)
        ]

    @contextmanager
    def batch(
        self,
        prompts: Sequence[Prompt],
        completion_ids: Sequence[Sequence[int]],
        responses: Sequence[str],
        segmentation: SegmentationSettings,
    ) -> Iterator[None]:
        """Embed the batch's steps now; inside, :meth:`embed` returns them (see the module
        docstring). Visible to the calling thread and to work it hands its context to
        (``asyncio.to_thread``, tasks)."""
        done = self.embed_completions(prompts, completion_ids, responses, segmentation)
        texts = tuple(t for c in done for t in c.texts)
        with_steps = [c.vectors for c in done if c.texts]
        vectors = np.concatenate(with_steps) if with_steps else np.zeros((0, 0), np.float32)
        token = _OPEN.set({**(_OPEN.get() or {}), id(self): _Batch(texts=texts, vectors=vectors)})
        try:
            yield
        finally:
            _OPEN.reset(token)

    def embed(self, texts: Sequence[str]) -> FloatArray:
        """The vectors of the open batch's steps; ``texts`` must be those steps, in order."""
        if isinstance(texts, str):
            raise TypeError("texts must be a sequence of strings, not a single string")
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        if self._get_model is None:
            raise EmbeddingError(NOT_BOUND)
        batch = (_OPEN.get() or {}).get(id(self))
        if batch is None:
            raise EmbeddingError(NO_BATCH)
        if tuple(texts) != batch.texts:
            raise EmbeddingError(_mismatch(list(texts), batch.texts))
        return batch.vectors.copy()  # callers may normalise in place; the batch stays intact

    def _context(self, tokenizer: Any, prompt: Prompt, completion_tokens: int) -> list[int]:
        """The prompt's token ids as the policy saw them, cut from the left to ``max_tokens``."""
        if prompt is None:
            return []
        if isinstance(prompt, str):
            ids = list(tokenizer(prompt)["input_ids"])  # as TRL tokenizes plain-text prompts
        else:
            rendered = tokenizer.apply_chat_template(
                list(prompt), add_generation_prompt=True, tokenize=True, return_dict=True
            )
            ids = list(rendered["input_ids"])
            if ids and isinstance(ids[0], list):  # some versions batch a single conversation
                ids = list(ids[0])
        if self.max_tokens is not None:
            room = max(0, self.max_tokens - completion_tokens)
            ids = ids[-room:] if room else []
        return [int(t) for t in ids]


def _locate_steps(
    tokenizer: Any,
    ids: Sequence[int],
    response: str,
    segmentation: SegmentationSettings,
    index: int,
) -> tuple[tuple[str, ...], tuple[Positions, ...]]:
    """One completion's step texts and, per step, its token positions in ``ids``."""
    located = token_char_spans(tokenizer, ids)
    if located.text != response:
        raise EmbeddingError(
            f"embedder.kind 'policy': completion {index}: the scored text is not its "
            "completion_ids decoded with special tokens skipped (as TRL decodes plain-text "
            "completions), so its steps cannot be mapped to tokens; chat completions parsed into "
            "messages are not supported by this embedder"
        )
    spans = step_char_spans(response, segmentation)
    positions = step_token_positions(located.spans, spans)
    return tuple(response[a:b] for a, b in spans), tuple(positions)


def _mismatch(asked: list[str], bound: tuple[str, ...]) -> str:
    """Say where the steps to embed first differ from the open batch's steps."""
    for i, (a, b) in enumerate(zip(asked, bound, strict=False)):
        if a != b:
            return (
                f"embedder.kind 'policy': step {i} to embed is {a[:60]!r}, but the open batch's "
                f"step {i} is {b[:60]!r}; the reward's segmentation and the embedder's differ"
            )
    return (
        f"embedder.kind 'policy': asked for {len(asked)} steps, but the open batch has "
        f"{len(bound)}; the reward's segmentation and the embedder's differ"
    )
