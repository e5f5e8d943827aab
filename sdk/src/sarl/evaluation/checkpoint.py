"""Which model an evaluation runs: a checkpoint (local dir or store URI) or the base model.

Called by the evaluation job (``sarl_jobs.evaluate``) with ``--checkpoint`` /
``SARL_CHECKPOINT_URI``:

* a local directory holding a Hugging Face model (``config.json`` + weights) is used as is;
* anything else is a checkpoint store URI (``s3://bucket/prefix`` or a store directory, see
  :func:`sarl.storage.open_store`): its latest *complete* checkpoint is downloaded into the
  work directory (re-used when already there: ``download`` renames into place only when every
  file verified, so an existing directory is complete);
* in a checkpoint, the model is the root (TRL and the local runner save HF model dirs) or
  ``actor/huggingface/`` (verl, with ``hf_model`` in ``checkpoint.save_contents``).

Without a checkpoint the spec's base model is used: ``builtin:tiny-qwen`` is prepared locally
(:func:`sarl.runner.tiny.prepare_tiny_policy`), an ``s3://`` model is downloaded into the work
directory and a ``pvc://`` one read where the operator mounted it
(:func:`sarl.storage.models.materialize`), anything else is passed on as a directory or a Hub id.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sarl.spec.experiment import Experiment

VERL_HF_SUBDIR = Path("actor") / "huggingface"
_WEIGHTS = ("*.safetensors", "pytorch_model*.bin")


@dataclass(frozen=True)
class ModelSource:
    """What to load (a directory or Hub id), where it came from, and the training step."""

    path: str
    origin: str
    step: int | None = None


def has_weights(path: Path) -> bool:
    return (path / "config.json").is_file() and any(
        next(path.glob(p), None) is not None for p in _WEIGHTS
    )


def hf_model_dir(root: Path, origin: str) -> Path:
    """The HF model directory inside a checkpoint (see the module docstring); ValueError
    naming ``origin`` and what was found otherwise."""
    for candidate in (root, root / VERL_HF_SUBDIR):
        if has_weights(candidate):
            return candidate
    if (root / VERL_HF_SUBDIR / "config.json").is_file():
        raise ValueError(
            f"{origin}: {VERL_HF_SUBDIR}/ has a config but no weights; save verl checkpoints "
            "with 'hf_model' in actor.checkpoint.save_contents"
        )
    found = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())[:10]
    raise ValueError(
        f"{origin}: no Hugging Face model (config.json + *.safetensors) at the root or in "
        f"{VERL_HF_SUBDIR}/; files found: {found}"
    )


def resolve_model(
    exp: Experiment, checkpoint: str | None, workdir: Path, *, progress: bool = True
) -> ModelSource:
    """The model to evaluate (see the module docstring)."""
    if checkpoint:
        local = Path(checkpoint).expanduser()
        if "://" not in checkpoint and local.is_dir() and not any(local.glob("step-*")):
            # A model or verl/TRL checkpoint directory, not a checkpoint store.
            return ModelSource(str(hf_model_dir(local, checkpoint)), checkpoint)
        return _from_store(exp, checkpoint, workdir)
    spec = exp.spec
    if spec.model.is_builtin:
        from sarl.runner.tiny import prepare_tiny_policy

        path = prepare_tiny_policy(
            spec.data, spec.model, cache_dir=workdir / "cache",
            max_response_tokens=spec.algorithm.max_response_length, progress=progress,
        )  # fmt: skip
        return ModelSource(str(path), spec.model.name)
    from sarl.storage.models import materialize  # a Hub id, or s3:// / pvc:// on local disk

    model = materialize(spec.model.name, workdir, endpoint_url=spec.storage.endpoint_url)
    return ModelSource(model, spec.model.name)


def _from_store(exp: Experiment, uri: str, workdir: Path) -> ModelSource:
    from sarl.storage import open_store

    store = open_store(uri, endpoint_url=exp.spec.storage.endpoint_url)
    latest = store.latest()
    if latest is None:
        raise ValueError(f"checkpoint: no complete checkpoint in {store.uri}")
    dest = workdir / "checkpoints" / f"step-{latest.step:08d}"
    if not dest.is_dir() or not any(dest.iterdir()):
        store.download(latest, dest)
    return ModelSource(str(hf_model_dir(dest, latest.uri)), latest.uri, latest.step)
