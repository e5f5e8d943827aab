"""Load an Experiment (or a Study) from YAML (file or text) or a dict, with one-line errors.

Called by ``sarl run``/``sarl validate``, ``sarl.Client`` and the operator. Errors name the
field path and, for a number, the offending value, e.g.
``spec.algorithm.learning_rate=-1.0: Input should be greater than 0``; any other value is shown
as its type only (``metadata.name=<str>: ...``): a string in any field may be a credential no
rule recognises. The models refuse credentials first, naming only the field
(:mod:`sarl.spec.secrets`), the input's strings are removed from validators' messages, and
every message goes through :func:`~sarl.spec.secrets.redact_text`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from sarl.rewards.registry import RewardConfigError
from sarl.spec.documents import DocumentError, check_tree, parse_yaml, read_spec_file
from sarl.spec.experiment import Experiment
from sarl.spec.secrets import SecretInSpecError, describe_value, redact, redact_text, scrub_values
from sarl.spec.study import Study, StudyFieldError

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


def format_validation_error(err: ValidationError, source: str = "") -> str:
    """First error as ``path=value: message``, plus how many more there are."""
    errors = err.errors()
    first = errors[0]
    loc = ".".join(str(p) for p in first["loc"])
    msg = str(first["msg"]).removeprefix("Value error, ")
    ctx_err = (first.get("ctx") or {}).get("error")
    if isinstance(ctx_err, RewardConfigError):
        msg = str(ctx_err)
    msg = scrub_values(msg, first.get("input"))  # validators may word errors with {v!r}
    where = f"{source}: " if source else ""
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    if isinstance(ctx_err, SecretInSpecError):  # names the field, never the value
        return redact_text(f"{where}{ctx_err.describe(loc)}{more}")
    value = (
        "" if first["type"] == "missing" else f"={_show(first.get('input'), _key(first['loc']))}"
    )
    if isinstance(ctx_err, StudyFieldError):  # a cross-field Study rule names its own field
        loc, value = ctx_err.loc, f"={_show(ctx_err.value, _key(ctx_err.loc))}"
        msg = scrub_values(ctx_err.message, ctx_err.value)
    return redact_text(f"{where}{loc or 'document'}{value}: {msg}{more}")


def load_experiment(source: str | Path | dict[str, Any] | Experiment) -> Experiment:
    """Validate an Experiment from a YAML path, YAML text, a dict or an Experiment."""
    if isinstance(source, Experiment):
        return source
    data, label = load_document(source)
    return validate_document(data, label)


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


def validate_document(data: dict[str, Any], label: str = "") -> Experiment:
    """Validate a raw document; SpecError with one line naming the field and value."""
    try:
        return Experiment.model_validate(data)
    except ValidationError as e:
        raise SpecError(format_validation_error(e, label)) from e
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
    try:
        return Study.model_validate(data)
    except ValidationError as e:
        raise SpecError(format_validation_error(e, label)) from e
    except StudyFieldError as e:
        where = f"{label}: " if label else ""
        message = scrub_values(e.message, e.value)
        raise SpecError(f"{where}{e.loc}={_show(e.value, _key(e.loc))}: {message}") from e
    except (RewardConfigError, ValueError) as e:
        raise SpecError(f"{label + ': ' if label else ''}{e}") from e
