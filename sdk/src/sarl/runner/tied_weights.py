"""Quiet transformers' "missing keys" warning on resume where the missing keys are tied weights.

Called around ``Trainer.train(resume_from_checkpoint=...)`` by the local session
(:mod:`sarl.runner.session`) and the TRL trainer job. A checkpoint of a model whose output
embedding is tied to its input embedding (the built-in tiny Qwen: ``tie_word_embeddings``) does
not store ``lm_head.weight``: ``save_pretrained`` drops the duplicate. Loading it, the Trainer
(``_issue_warnings_after_load`` in ``transformers/trainer.py``, 5.x) warns
``There were missing keys in the checkpoint model loaded: ['lm_head.weight'].`` on every resume,
though the weight is restored through the tensor it shares. :func:`quiet_tied_missing_keys`
drops that one record when *every* key it names shares its tensor with a parameter the
checkpoint did hold; any other missing key, and every other warning, still shows.
"""

from __future__ import annotations

import ast
import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

_LOGGER = "transformers.trainer"
_MISSING = re.compile(r"There were missing keys in the checkpoint model loaded: (\[.*\])\.?$")


def tied_names(model: Any) -> dict[str, frozenset[str]]:
    """Parameter name -> the other names of the same tensor (only names that share one)."""
    groups: dict[int, list[str]] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        groups.setdefault(id(param), []).append(name)
    return {
        name: frozenset(names) - {name}
        for names in groups.values()
        if len(names) > 1
        for name in names
    }


class _TiedMissingKeys(logging.Filter):
    def __init__(self, model: Any) -> None:
        super().__init__()
        self._model = model

    def filter(self, record: logging.LogRecord) -> bool:
        match = _MISSING.match(record.getMessage())
        if match is None:
            return True
        try:
            keys = ast.literal_eval(match.group(1))
        except (ValueError, SyntaxError):
            return True
        if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
            return True
        missing = set(keys)
        tied = tied_names(self._model)  # read now: the Trainer may have wrapped or re-tied it
        expected = all(tied.get(key, frozenset()) - missing for key in missing)
        return not (missing and expected)


@contextmanager
def quiet_tied_missing_keys(model: Any) -> Iterator[None]:
    """Within the block, drop the Trainer's missing-keys warning when it names only tied
    weights of ``model`` (see the module docstring)."""
    logger = logging.getLogger(_LOGGER)
    quiet = _TiedMissingKeys(model)
    logger.addFilter(quiet)
    try:
        yield
    finally:
        logger.removeFilter(quiet)


__all__ = ["quiet_tied_missing_keys", "tied_names"]
