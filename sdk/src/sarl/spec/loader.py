"""Load an Experiment (or a Study) from YAML (file or text) or a dict, with one-line errors.

Called by ``sarl run``/``sarl validate``, ``sarl.Client`` and the operator. Errors name the
field path as it is written in the document (``spec.reward[0].name``) and, for a number or a
short word, the offending value, e.g.
``spec.algorithm.learning_rate=-1.0: Input should be greater than 0``; any other value is shown
as its type only (``metadata.name=<str>: ...``): a string in any field may be a credential no
rule recognises. A typo gets the closest valid name (:mod:`sarl.spec.suggest`): an unknown key
(``spec.algoritm: unknown field; did you mean 'algorithm'?``), a value outside a field's choices,
a reward or preset name. A document of the other kind (a Study where an Experiment is loaded, or
the reverse) is refused by its ``kind`` alone. The models refuse credentials first, naming only
the field (:mod:`sarl.spec.secrets`), the input's strings are removed from validators' messages,
and every message goes through :func:`~sarl.spec.secrets.redact_text`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from sarl.rewards.registry import RewardConfigError
from sarl.spec.documents import DocumentError, check_tree, parse_yaml, read_spec_file
from sarl.spec.experiment import KIND, Experiment, _explicit
from sarl.spec.presets import deep_merge
from sarl.spec.secrets import SecretInSpecError, describe_value, redact, redact_text, scrub_values
from sarl.spec.study import STUDY_KIND, Study, StudyFieldError
from sarl.spec.suggest import NO_VALUE, FieldError, did_you_mean, hint_for, path, with_hint

_MAX_VALUE = 80


class SpecError(ValueError):
    """An Experiment document is invalid; the message is one line naming field and value.

    The message is passed through :func:`redact_text` (URL credentials, token shapes), whatever
    built it."""

    def __init__(self, message: str) -> None:
        super().__init__(redact_text(message))


def _show(value: Any, key: str = "") -> str:
    """The value as the message prints it: a number as it is (redacted under a secret-named
    ``key``), anything else as its type only (:func:`~sarl.spec.secrets.describe_value`)."""
    text = describe_value(redact(value, key))
    return text if len(text) <= _MAX_VALUE else text[: _MAX_VALUE - 3] + "..."


def _key(loc: Any) -> str:
    """The field name a dotted path or pydantic loc ends with (for key-based redaction)."""
    parts = loc.split(".") if isinstance(loc, str) else [p for p in loc if isinstance(p, str)]
    return str(parts[-1]) if parts else ""


def _shown(err: StudyFieldError) -> str:
    """``=<value>`` of a Study field error as messages show values (nothing for NO_VALUE)."""
    return "" if err.value is NO_VALUE else f"={_show(err.value, _key(err.loc))}"


def format_validation_error(
    err: ValidationError, source: str = "", model: type[BaseModel] | None = None
) -> str:
    """First error as ``path=value: message``, plus how many more there are.

    ``model`` is the model validated (:class:`Experiment`, :class:`Study`): an unknown key is
    matched against the fields at its place for a "did you mean" hint."""
    errors = err.errors()
    first = errors[0]
    loc: tuple[Any, ...] = tuple(first["loc"])
    msg = str(first["msg"]).removeprefix("Value error, ")
    ctx_err = (first.get("ctx") or {}).get("error")
    where = f"{source}: " if source else ""
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    if isinstance(ctx_err, SecretInSpecError):  # names the field, never the value
        return redact_text(f"{where}{ctx_err.describe(path(loc))}{more}")
    if isinstance(ctx_err, StudyFieldError):  # a cross-field Study rule names its own field
        msg = scrub_values(ctx_err.message, ctx_err.value)
        return redact_text(f"{where}{ctx_err.loc}{_shown(ctx_err)}: {msg}{more}")
    shown: Any = first.get("input")
    if isinstance(ctx_err, FieldError | RewardConfigError) and ctx_err.field is not None:
        # The validator of an object named the field inside it that is wrong.
        loc, shown, msg = (*loc, *ctx_err.field), ctx_err.value, ctx_err.detail
    elif isinstance(ctx_err, RewardConfigError):
        msg = str(ctx_err)
    elif first["type"] == "extra_forbidden":
        msg = with_hint("unknown field", hint_for(first, model))
    else:
        msg = with_hint(msg, hint_for(first, model))
    msg = scrub_values(msg, first.get("input"))  # validators may word errors with {v!r}
    # No value for a missing field, nor for an unknown key (its value is not what is wrong).
    bare = first["type"] in ("missing", "extra_forbidden") or shown is NO_VALUE
    value = "" if bare else f"={_show(shown, _key(loc))}"
    return redact_text(f"{where}{path(loc) or 'document'}{value}: {msg}{more}")


def check_kind(data: dict[str, Any], expected: str, label: str = "") -> None:
    """SpecError naming ``kind`` when the document is not of the ``expected`` kind: a Study
    loaded as an Experiment (or the reverse) would otherwise fail on every field at once."""
    kind = data.get("kind", expected)  # a missing kind is the model's default
    if kind == expected:
        return
    where = f"{label}: " if label else ""
    known = (KIND, STUDY_KIND)
    if kind in known:
        loader = "load_study" if kind == STUDY_KIND else "load_experiment"
        raise SpecError(
            f"{where}kind={kind!r}: this document is {_a(kind)} {kind}, not {_a(expected)} "
            f"{expected}; load it with {loader}()"
        )
    hint = did_you_mean(kind, known) or f"kind is {KIND!r} or {STUDY_KIND!r}"
    raise SpecError(f"{where}kind={_show(kind, 'kind')}: unknown kind; {hint}")


def load_experiment(
    source: str | Path | dict[str, Any] | Experiment,
    *,
    overrides: Mapping[str, Any] | None = None,
) -> Experiment:
    """Validate an Experiment from a YAML path, YAML text, a dict or an Experiment.

    ``overrides`` are fields merged over the document's ``spec`` before it is validated, as a
    Study arm's ``override`` is over its base: nested mappings merge, anything else (a list, as
    ``reward``) replaces (:func:`~sarl.spec.presets.deep_merge`); e.g. ``{"algorithm":
    {"max_steps": 16}}``. An error then names the field as usual, after ``<file> + overrides``.
    """
    if isinstance(source, Experiment):
        if not overrides:
            return source
        data, label = _explicit(source), ""
    else:
        data, label = load_document(source)
    if overrides:
        data, label = with_overrides(data, overrides), f"{label} + overrides" if label else ""
    return validate_document(data, label)


def with_overrides(data: dict[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of the raw document ``data`` with ``overrides`` merged over its ``spec`` (see
    :func:`load_experiment`); a ``spec`` that is not a mapping is left for validation to
    refuse."""
    spec = data.get("spec")
    if spec is None:
        spec = {}
    if not isinstance(spec, dict):
        return data
    return {**data, "spec": deep_merge(spec, dict(overrides))}


def load_document(source: str | Path | dict[str, Any]) -> tuple[dict[str, Any], str]:
    """The raw document (not validated) and a label for messages (the file name, or empty)."""
    label = ""
    if isinstance(source, Path) or (
        isinstance(source, str)
        and "\n" not in source
        and source.endswith((".yaml", ".yml", ".json"))
    ):
        path = Path(source)
        if not path.is_file():
            raise SpecError(f"{path}: no such file")
        label = str(path)
        data = _parse_yaml(path, label)
    elif isinstance(source, str):
        data = _parse_yaml(source, "<text>")
    else:
        data = source
        try:  # the same depth and size limits as a parsed file (the operator, sarl.Client)
            check_tree(data, label)
        except DocumentError as e:
            raise SpecError(str(e)) from e
    if not isinstance(data, dict):
        raise SpecError(
            f"{label or 'document'}: expected a mapping with apiVersion, kind, "
            f"metadata and spec, got {type(data).__name__}"
        )
    return data, label


def _a(kind: str) -> str:
    return "an" if kind[:1] in "AEIOU" else "a"


def validate_document(data: dict[str, Any], label: str = "") -> Experiment:
    """Validate a raw document; SpecError with one line naming the field and value."""
    check_kind(data, KIND, label)
    try:
        return Experiment.model_validate(data)
    except ValidationError as e:
        raise SpecError(format_validation_error(e, label, Experiment)) from e
    except (RewardConfigError, ValueError) as e:  # raised outside pydantic's wrapping
        raise SpecError(f"{label + ': ' if label else ''}{e}") from e


def _parse_yaml(source: str | Path, label: str) -> Any:
    """A file's or a text's YAML within :mod:`sarl.spec.documents`' limits (size, UTF-8,
    depth, alias expansion); SpecError with one line otherwise."""
    try:
        text = read_spec_file(source) if isinstance(source, Path) else source
        return parse_yaml(text, label)
    except DocumentError as e:
        raise SpecError(str(e)) from e


def load_study(source: str | Path | dict[str, Any] | Study) -> Study:
    """Validate a Study from a YAML path, YAML text, a dict or a Study (one-line SpecError)."""
    if isinstance(source, Study):
        return source
    data, label = load_document(source)
    return validate_study(data, label)


def validate_study(data: dict[str, Any], label: str = "") -> Study:
    """Validate a raw Study document; SpecError with one line naming the field and value."""
    check_kind(data, STUDY_KIND, label)
    try:
        return Study.model_validate(data)
    except ValidationError as e:
        raise SpecError(format_validation_error(e, label, Study)) from e
    except StudyFieldError as e:
        where = f"{label}: " if label else ""
        message = scrub_values(e.message, e.value)
        raise SpecError(f"{where}{e.loc}{_shown(e)}: {message}") from e
    except (RewardConfigError, ValueError) as e:
        raise SpecError(f"{label + ': ' if label else ''}{e}") from e
