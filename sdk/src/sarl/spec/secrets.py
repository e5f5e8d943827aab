"""Secrets in specs: refuse credentials in an Experiment or Study, and redact what gets logged.

A spec is stored on the cluster (the Experiment object, ConfigMaps), printed by ``sarl validate``
and logged as MLflow params and the run's ``spec/*.yaml`` artifact, so a credential in it leaks
to everyone who can read any of those. Credentials belong in environment variables or, on a
cluster, in a Kubernetes Secret (``spec.storage.credentials_secret``, ``api_key_env`` naming a
variable).

Called by the spec models (:func:`refuse_secrets` in a ``mode="before"`` validator of
``Experiment``, ``ExperimentSpec`` and ``Study``, so every field is checked, reward settings and
Study arm overrides included, before anything else can echo a value), by the loader (error
values pass through :func:`redact`, messages through :func:`redact_text`), and by everything
that logs a spec: ``flatten_params`` (MLflow params), the ``Tracker`` (run tags), the local and
Study runners (the spec artifact), ``sarl validate``'s output and the operator's run tags. The
same rules decide what is refused and what is redacted, so redacting a spec that passed
validation changes nothing.

Rules (a string value anywhere in the document, at any depth):

1. **A URL with userinfo** (``scheme://user[:password]@host``, RFC 3986's authority): refused
   whatever the field (``storage.endpoint_url``, ``tracking.mlflow_uri``, embedder/judge URLs in
   reward settings, a URL inside ``extra_args``). A user without a password is refused too: a
   token is often passed as the user (``https://<token>@host``).
2. **Token shapes** that are credentials by their format alone: AWS access key ids
   (``AKIA``/``ASIA`` + 16), PEM private keys (``-----BEGIN ... PRIVATE KEY-----``), GitHub
   (``ghp_``/``gho_``/``ghu_``/``ghs_``/``ghr_`` + 36, ``github_pat_``), GitLab (``glpat-``),
   Hugging Face (``hf_`` + 30), OpenAI/Anthropic-style (``sk-`` + 20), Slack (``xox?-``), Google
   API keys (``AIza`` + 35), Stripe live keys, JSON Web Tokens (``eyJ...eyJ...sig``) and
   ``Bearer <16+ chars>``. To keep false positives low, the random part after a vendor prefix
   must mix character classes (upper, lower, digit: two of them; ``sk-`` all three, so a model
   called ``sk-llama-3-8b-instruct-v2`` passes).
3. **A literal under a secret-named key**: the key's last word is ``password``, ``passwd``,
   ``passphrase``, ``secret``, ``token``, ``api_key``/``apikey``, ``access_key``,
   ``secret_key``, ``private_key``, ``client_secret``, ``auth_token`` or ``session_token``
   (``camelCase``, ``-`` and ``.`` normalised to ``_``), and the value is a non-empty string or
   a number. Not refused: keys that *name* where the secret is (``api_key_env``,
   ``token_file``, ``secret_name``: their last word is not in the list), the Secret-name fields
   ``credentials_secret``/``existing_secret``, tokenizer vocabulary (``eos_token``,
   ``pad_token``..., or a value such as ``<think>``/``[SEP]``), references ``$VAR``/``${VAR}``,
   booleans, null, and nested mappings (e.g. a ``secretKeyRef``), which are checked key by key.

Not caught: a bare random string under an innocent key (indistinguishable from an id or a
hash), a password in a URL whose ``/`` is not percent-encoded (not a valid URL: the consumer
would not read it as credentials either).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

#: What a redacted value (or a URL's userinfo) is replaced with.
REDACTED: Final = "***"

_USE_INSTEAD: Final = (
    "put the secret in an environment variable or a Kubernetes Secret and name it instead "
    "(e.g. api_key_env: OPENAI_API_KEY; spec.storage.credentials_secret for S3)"
)
_USERINFO_HINT: Final = (
    "remove 'user:password@' and pass credentials as environment variables "
    "(AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, MLFLOW_TRACKING_USERNAME/MLFLOW_TRACKING_PASSWORD) "
    "or, on a cluster, a Kubernetes Secret (spec.storage.credentials_secret)"
)

# RFC 3986: authority = [ userinfo "@" ] host; userinfo has no '/', '?', '#' or '@'.
_USERINFO: Final = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.\-]*://)[^/?#@\s]+@")


def _classes(text: str) -> int:
    """How many of upper case, lower case and digits ``text`` contains (a randomness proxy)."""
    return sum(any(test(c) for c in text) for test in (str.isupper, str.islower, str.isdigit))


@dataclass(frozen=True)
class _TokenRule:
    """A credential recognised by its format, whose match mixes ``min_classes`` classes."""

    kind: str
    pattern: re.Pattern[str]
    min_classes: int = 0

    def matches(self, text: str) -> bool:
        return any(self._random(m) for m in self.pattern.finditer(text))

    def redact(self, text: str) -> str:
        return self.pattern.sub(lambda m: REDACTED if self._random(m) else m[0], text)

    def _random(self, match: re.Match[str]) -> bool:
        body = match.groupdict().get("body") or match[0]
        return _classes(body) >= self.min_classes


_B: Final = r"(?<![A-Za-z0-9_\-])"  # the token starts a word
# ``body`` is the random part whose character classes are counted (not the fixed prefix).
_TOKEN_RULES: Final[tuple[_TokenRule, ...]] = (
    _TokenRule(
        "an AWS access key id", re.compile(r"(?<![A-Z0-9])(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Z0-9])")
    ),
    _TokenRule(  # the whole block (to its END line, or to the end of the text)
        "a private key",
        re.compile(
            r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----"
            r"(?:.*?-----END[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|.*)",
            re.DOTALL,
        ),
    ),
    _TokenRule("a GitHub token", re.compile(_B + r"gh[pousr]_(?P<body>[A-Za-z0-9]{36,})"), 2),
    _TokenRule("a GitHub token", re.compile(_B + r"github_pat_(?P<body>\w{22,})"), 2),
    _TokenRule("a GitLab token", re.compile(_B + r"glpat-(?P<body>[A-Za-z0-9_\-]{20,})"), 2),
    _TokenRule("a Hugging Face token", re.compile(_B + r"hf_(?P<body>[A-Za-z0-9]{30,})"), 2),
    _TokenRule("an API key (sk-...)", re.compile(_B + r"sk-(?P<body>[A-Za-z0-9_\-]{20,})"), 3),
    _TokenRule("a Slack token", re.compile(_B + r"xox[abprs]-(?P<body>[A-Za-z0-9\-]{10,})"), 2),
    _TokenRule("a Google API key", re.compile(_B + r"AIza(?P<body>[A-Za-z0-9_\-]{35})"), 2),
    _TokenRule("a Stripe key", re.compile(_B + r"[sr]k_live_(?P<body>[A-Za-z0-9]{16,})"), 2),
    _TokenRule(
        "a JSON Web Token",
        re.compile(_B + r"eyJ[A-Za-z0-9_\-]{5,}\.eyJ[A-Za-z0-9_\-]{5,}\.[A-Za-z0-9_\-]{10,}"),
    ),
    _TokenRule("a bearer token", re.compile(r"(?i)\bbearer\s+[A-Za-z0-9._~+/\-]{16,}=*")),
)

_SECRET_KEY: Final = re.compile(
    r"(?:^|_)(?:password|passwd|passphrase|secret|token|api_?key|access_?key|secret_?key|"
    r"private_?key|client_?secret|auth_?token|session_?token)$"
)
#: Keys that hold the *name* of a Kubernetes Secret, not a secret.
_SECRET_NAME_KEYS: Final = frozenset({"credentials_secret", "existing_secret"})
#: Tokenizer vocabulary ("eos_token: </s>") is not a credential.
_VOCAB_KEY: Final = re.compile(
    r"(?:^|_)(?:eos|bos|pad|unk|sep|cls|mask|stop|start|end|special|think|answer|step|tool)"
    r"_token$"
)
_VOCAB_VALUE: Final = re.compile(r"^(?:<[^<>\s]+>|\[[A-Za-z_]+\])$")
_REFERENCE: Final = re.compile(r"^\$(?:\{[A-Za-z_][A-Za-z0-9_]*\}|[A-Za-z_][A-Za-z0-9_]*)$")
_LITERAL: Final = "a literal value under a secret-named key"


def _normalise_key(key: str) -> str:
    """``apiKey``, ``API-Key``, ``tags.api.key`` -> ``api_key``-style snake case."""
    snake = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", key)
    return re.sub(r"[\-. ]+", "_", snake).lower()


def is_secret_key(key: str) -> bool:
    """Whether a mapping key names a secret value (rule 3 of the module docstring)."""
    name = _normalise_key(key)
    return (
        bool(_SECRET_KEY.search(name))
        and name not in _SECRET_NAME_KEYS
        and not _VOCAB_KEY.search(name)
    )


def secret_kind(value: Any, key: str = "") -> str | None:
    """What secret ``value`` (found under ``key``) looks like, or None; never the value."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, str):
        if _USERINFO.search(value):
            return "a URL with credentials (user:password@)"
        for rule in _TOKEN_RULES:
            if rule.matches(value):
                return rule.kind
        reference = _REFERENCE.match(value) or _VOCAB_VALUE.match(value)
        if not value.strip() or reference or not is_secret_key(key):
            return None
        return _LITERAL
    if isinstance(value, int | float) and is_secret_key(key):
        return _LITERAL
    return None


@dataclass(frozen=True)
class SecretFinding:
    """A secret-looking value: where (``path``, e.g. ``spec.storage.endpoint_url``) and what."""

    path: str
    kind: str

    @property
    def hint(self) -> str:
        return _USERINFO_HINT if self.kind.startswith("a URL") else _USE_INSTEAD


class SecretInSpecError(ValueError):
    """A spec holds a secret-looking value. The message names the field and what to do
    instead; it never contains the value. ``path`` is relative to the validated object."""

    def __init__(self, finding: SecretFinding) -> None:
        self.finding = finding
        super().__init__(self.describe(""))

    @property
    def reason(self) -> str:
        """What was found and what to do instead, without the path."""
        return (
            f"holds {self.finding.kind} (not shown); a spec is stored on the cluster and logged "
            f"to MLflow, so {self.finding.hint}"
        )

    def describe(self, prefix: str) -> str:
        """``<prefix>.<path>: <reason>``, one line."""
        return f"{join_path(prefix, self.finding.path) or 'document'}: {self.reason}"


def join_path(prefix: str, path: str) -> str:
    """``spec`` + ``storage.x`` -> ``spec.storage.x``; ``spec.reward`` + ``[0].x`` keeps the
    index attached."""
    if not prefix or not path:
        return prefix or path
    return f"{prefix}{path}" if path.startswith("[") else f"{prefix}.{path}"


def find_secret(value: Any, path: str = "", key: str = "") -> SecretFinding | None:
    """The first secret-looking value in ``value`` (a document, a mapping, a model, a leaf),
    depth first in document order; None when there is none."""
    from pydantic import BaseModel

    if isinstance(value, BaseModel):
        value = value.model_dump()
    if isinstance(value, Mapping):
        for k, v in value.items():
            if isinstance(k, str) and secret_kind(k) is not None:  # never put it in the path
                return SecretFinding(join_path(path, "<a key>"), f"{secret_kind(k)} as a key")
            found = find_secret(v, join_path(path, str(k)), str(k))
            if found is not None:
                return found
        return None
    if isinstance(value, list | tuple):
        for i, item in enumerate(value):
            found = find_secret(item, f"{path}[{i}]", key)
            if found is not None:
                return found
        return None
    kind = secret_kind(value, key)
    return SecretFinding(path, kind) if kind is not None else None


def refuse_secrets(data: Any) -> None:
    """Raise :class:`SecretInSpecError` naming the first secret-looking value in ``data``."""
    found = find_secret(data)
    if found is not None:
        raise SecretInSpecError(found)


def redact_text(text: str) -> str:
    """``text`` with URL userinfo and token-shaped credentials replaced by ``***`` (rules 1, 2;
    a key's literal is only known in a structure: see :func:`redact`)."""
    text = _USERINFO.sub(lambda m: f"{m['scheme']}{REDACTED}@", text)
    for rule in _TOKEN_RULES:
        text = rule.redact(text)
    return text


def redact(value: Any, key: str = "") -> Any:
    """``value`` with every secret-looking leaf redacted, by the rules of :func:`find_secret`
    (a literal under a secret-named key becomes ``***``; URLs and token shapes inside a string
    are replaced in place). Mappings and lists are copied (tuples become lists), other values
    returned as they are. The one redaction used before a spec is logged or printed."""
    if isinstance(value, Mapping):
        return {_redact_key(k): redact(v, str(k)) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact(item, key) for item in value]
    if isinstance(value, str):
        return REDACTED if _is_literal_secret(value, key) else redact_text(value)
    if isinstance(value, int | float) and not isinstance(value, bool) and is_secret_key(key):
        return REDACTED
    return value


def _redact_key(key: Any) -> Any:
    return redact_text(key) if isinstance(key, str) else key


def _is_literal_secret(value: str, key: str) -> bool:
    return secret_kind(value, key) == _LITERAL


__all__ = [
    "REDACTED",
    "SecretFinding",
    "SecretInSpecError",
    "find_secret",
    "is_secret_key",
    "join_path",
    "redact",
    "redact_text",
    "refuse_secrets",
    "secret_kind",
]
