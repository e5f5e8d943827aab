"""``--set KEY=VALUE``: change fields of a raw spec document before it is validated.

Called by ``sarl run``, ``sarl validate``, ``sarl study run`` and ``sarl submit``
(:mod:`sarl.cli.run`, :mod:`sarl.cli.study_run`, :mod:`sarl.cli.cluster`), so that trying
``max_steps: 5`` does not need a copy of the YAML.

* KEY is a dotted path from the document root, with list items by index in either spelling:
  ``spec.algorithm.max_steps``, ``spec.reward[1].weight`` or ``spec.reward.1.weight``. The
  ``spec.`` prefix (a Study's ``spec.base.`` too) may be left out where only one place has the
  first field: ``algorithm.max_steps=5`` is ``spec.algorithm.max_steps=5`` (:func:`with_prefix`).
* VALUE is parsed as YAML (within :mod:`sarl.spec.documents`' limits), so ``5`` is a number,
  ``true`` a boolean, ``null`` is null (``max_steps=null``: no cap, whatever the preset says),
  and ``[a, b]`` or ``{k: v}`` replace a whole list or mapping.
* The path is checked against the models before anything changes: a key no model has is refused
  naming the closest valid key (``--set spec.algorithm.max_step=5: spec.algorithm has no field
  'max_step'; did you mean 'max_steps'?``). Inside free mappings (a reward's ``settings``, an
  arm's ``override``, labels) any key goes; validation checks them afterwards, as in a file.
* Missing mappings on the way are created (``spec.algorithm`` need not be in the file: the
  preset's fields stay under it); a list item must exist (or be the next one, appended), since
  the rest of a list the file does not hold would come from a preset it replaces.

Errors are :class:`~sarl.spec.loader.SpecError` with one line naming ``--set`` and the key; the
value is never echoed (it may be a credential: validation refuses those by field, see
:mod:`sarl.spec.secrets`).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from sarl.spec.documents import DocumentError, DocumentValueError, parse_yaml
from sarl.spec.experiment import Experiment
from sarl.spec.loader import SpecError, load_document
from sarl.spec.study import Study, is_study_document
from sarl.spec.suggest import child_type, did_you_mean, fields_at, path

#: One path segment: a name, optionally followed by ``[index]`` items.
_SEGMENT = re.compile(r"^([^.\[\]]+)((?:\[\d+\])*)$")
_EXAMPLE = "e.g. --set spec.algorithm.max_steps=5"


def load_with_sets(
    source: str | Path | dict[str, Any], sets: Sequence[str] | None
) -> tuple[dict[str, Any], str]:
    """The raw document of ``source`` (:func:`~sarl.spec.loader.load_document`) with the
    ``sets`` applied, and its label for messages."""
    data, label = load_document(source)
    return (apply_sets(data, sets) if sets else data), label


def apply_sets(data: dict[str, Any], assignments: Sequence[str]) -> dict[str, Any]:
    """A copy of the raw document ``data`` with every ``KEY=VALUE`` of ``assignments`` applied
    in order (see the module docstring); ``data`` itself is left as it is."""
    model: type[BaseModel] = Study if is_study_document(data) else Experiment
    out = copy.deepcopy(data)
    for item in assignments:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise SpecError(f"--set: expected KEY=VALUE ({_EXAMPLE}), got one without '='")
        loc = with_prefix(model, parse_key(key), key)
        check_path(model, loc, key)
        _assign(out, loc, _value(raw, key), key)
    return out


def parse_key(key: str) -> tuple[str | int, ...]:
    """``spec.reward[1].weight`` (or ``spec.reward.1.weight``) -> ``("spec", "reward", 1,
    "weight")``."""
    loc: list[str | int] = []
    for segment in key.split("."):
        match = _SEGMENT.match(segment.strip())
        if match is None:
            raise SpecError(f"--set {key}: {segment!r} is not a field name or [index] ({_EXAMPLE})")
        name, items = match.groups()
        loc.append(int(name) if name.isdigit() else name)
        loc.extend(int(i) for i in re.findall(r"\d+", items))
    return tuple(loc)


def with_prefix(model: type[BaseModel], loc: Sequence[str | int], key: str) -> tuple[Any, ...]:
    """``loc`` from the document root: a key that starts below ``spec`` (``algorithm.max_steps``;
    a Study's ``base.seed`` or, one level deeper, ``algorithm.max_steps`` under ``spec.base``)
    gets the missing prefix when exactly one place has its first field. SpecError naming the
    key and the choices when several do or none does."""
    top = fields_at(model, ()) or []
    if not loc or not isinstance(loc[0], str) or loc[0] in top:
        return tuple(loc)
    places = [p for p in _prefixes(model) if loc[0] in (fields_at(model, p) or ())]
    if len(places) == 1:
        return (*places[0], *loc)
    if places:
        choices = " or ".join(f"--set {path((*p, *loc))}=..." for p in places)
        raise SpecError(f"--set {key}: {loc[0]!r} is a field of several places; write {choices}")
    known = sorted({f for p in ((), *_prefixes(model)) for f in fields_at(model, p) or ()})
    hint = did_you_mean(loc[0], known) or f"known: {', '.join(known)}"
    where = " or ".join(path(p) for p in _prefixes(model))
    raise SpecError(f"--set {key}: no field {loc[0]!r} at the top or under {where}; {hint}")


def _prefixes(model: type[BaseModel]) -> list[tuple[str, ...]]:
    out: list[tuple[str, ...]] = [("spec",)] if "spec" in (fields_at(model, ()) or ()) else []
    out = [("spec",)] if "spec" in (fields_at(model, ()) or ()) else []
    if out and "base" in (fields_at(model, out[0]) or ()):
        out.append(("spec", "base"))
    return out


def check_path(model: type[BaseModel], loc: Sequence[str | int], key: str) -> None:
    """SpecError naming the first part of ``loc`` that no field of the models has, with the
    closest valid key; parts inside free mappings are not checked (validation does that)."""
    node: Any = model
    for i, part in enumerate(loc):
        fields = fields_at(model, loc[:i])
        if fields is not None and (not isinstance(part, str) or part not in fields):
            where = path(loc[:i]) or "the document"
            hint = did_you_mean(part, fields) or f"known fields: {', '.join(fields)}"
            raise SpecError(f"--set {key}: {where} has no field {part!r}; {hint}")
        node = child_type(node, part)
        if node is None:
            kind = "a list" if isinstance(part, int) else "a mapping"
            raise SpecError(f"--set {key}: {path(loc[:i]) or 'the document'} is not {kind}")
        if node is Any:
            return  # a free mapping or value: its keys are checked by validation


def _value(raw: str, key: str) -> Any:
    try:
        return parse_yaml(raw, f"--set {key}")
    except DocumentValueError as e:  # a duplicate key or a huge number: quoting is no fix
        raise SpecError(str(e)) from e
    except DocumentError as e:
        raise SpecError(
            f"{e}; VALUE is YAML: quote text holding ': ', '{{' or '[' (\"...\")"
        ) from e


def _assign(data: dict[str, Any], loc: Sequence[str | int], value: Any, key: str) -> None:
    node: Any = data
    for i, part in enumerate(loc):
        where = path(loc[:i]) or "the document"
        if isinstance(part, int):
            if not isinstance(node, list):
                raise SpecError(f"--set {key}: {where} is not a list in the file")
            if part > len(node):
                items = f"{len(node)} item" + ("" if len(node) == 1 else "s")
                raise SpecError(
                    f"--set {key}: {where} has {items}, so there is no item [{part}] (the next "
                    f"one is [{len(node)}])"
                )
            if part == len(node):  # the next item: appended
                node.append(None)
        elif not isinstance(node, dict):
            raise SpecError(f"--set {key}: {where} is not a mapping in the file")
        if i == len(loc) - 1:
            node[part] = value
            return
        child = node[part] if isinstance(part, int) else node.get(part)
        if child is None and isinstance(loc[i + 1], int):
            # The items would come from the preset or the defaults, which the list replaces.
            raise SpecError(
                f"--set {key}: {path(loc[: i + 1])} is not in the file (its items come from the "
                f"preset or the defaults); set the whole list, e.g. "
                f"--set '{path(loc[: i + 1])}=[{{...}}]'"
            )
        if child is None:
            child = node[part] = {}
        node = child


__all__ = ["apply_sets", "check_path", "load_with_sets", "parse_key", "with_prefix"]
