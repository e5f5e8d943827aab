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
   token is often passed as the user (``https://<token>@host``). Scheme-less forms too:
   ``user:password@host:port`` and ``//user[:password]@host`` (``alice@example.com`` passes).
2. **Token shapes** that are credentials by their format alone: AWS access key ids
   (``AKIA``/``ASIA`` + 16), PEM private keys (``-----BEGIN ... PRIVATE KEY-----``), GitHub
   (``ghp_``/``gho_``/``ghu_``/``ghs_``/``ghr_`` + 36, ``github_pat_``), GitLab (``glpat-``),
   Hugging Face (``hf_`` + 30), OpenAI/Anthropic-style (``sk-`` + 20), Slack (``xox?-``, and
   webhook URLs), Google API keys (``AIza`` + 35) and OAuth client secrets (``GOCSPX-``), Stripe
   live keys, Telegram bot tokens, npm (``npm_``), PyPI (``pypi-``), SendGrid (``SG.``),
   Databricks (``dapi``), PuTTY private key files, JSON Web Tokens (``eyJ...eyJ...sig``) and
   ``Bearer <16+ chars>``, ``Basic <base64>`` (:mod:`sarl.spec.secret_shapes`). To keep false
   positives low, the random part after a vendor prefix must mix character classes (upper,
   lower, digit: two of them; ``sk-`` all three, so a model called
   ``sk-llama-3-8b-instruct-v2`` passes).
3. **A value under a secret-named key.** A key is secret-named when, with its separators
   removed (``PassWord``, ``pass-phrase``, ``X-Api-Key``, ``mysqlPassword``), it contains
   ``password``, ``passwd``, ``passphrase``, ``pwd``, ``secret``, ``credential``, ``creds``,
   ``apikey``, ``privatekey``, ``accesskey``, ``authorization``, ``authtoken``, ``bearer``,
   ``cookie``, ``accountkey``... (:data:`_SECRET_WORDS`), or its last word (``camelCase``,
   ``snake``, ``kebab`` split) is ``pass``, ``pw``, ``token``, ``auth`` or ``sig`` (``db_pass``,
   ``hf_token``; not ``pass_at_k``, ``token_budget``), or it holds "password" in another
   language (``mot_de_passe``, ``пароль``). A key is read percent-decoded (``api%5Fkey``) and
   with look-alike Cyrillic and Greek letters as Latin (``раssword``). Places: the ``value`` of
   an environment entry (``{name: OPENAI_API_KEY, value: ...}`` in any list) is judged under
   its ``name``, and in an argument list ``["--env", "HF_TOKEN", "<value>"]`` the value under
   the variable's name. Under such a key every leaf is refused but null, booleans,
   ``""``, references ``$VAR``/``${VAR}`` and tokenizer vocabulary (``<think>``, ``[SEP]``):
   strings, numbers, dates (YAML reads ``2024-01-01`` as one); a list is judged item by item; a
   mapping is refused whole unless it is a reference to a Secret (keys such as ``secret_name``,
   ``name``, ``key``, ``secretKeyRef``: ``hf_token: {secret_name: hf, key: HF_TOKEN}``). Not
   secret-named: keys that *name* where the secret is or describe it (last word ``env``,
   ``file``, ``path``, ``name``, ``ref``, ``type``, ``url``...: ``api_key_env``, ``token_file``,
   ``secret_name``), the Secret-name fields ``credentials_secret``/``existing_secret``/
   ``image_pull_secrets``, and tokenizer vocabulary keys (``eos_token``, ``pad_token``...).
4. **A secret-named flag's or setting's value inside a string**: ``--api-key=v``,
   ``--api-key v``, ``["--api-key", "v"]`` in an argument list, ``password=v``,
   ``X-Api-Key: v``, ``?access_token=v``.

Last line, for whatever the rules miss: every printed or logged spec goes through
:func:`redact`, every message through :func:`redact_text`, and error messages show an input
value only when it is a number or a short non-random word (:func:`describe_value`), with the
input's other strings removed from validators' messages (:func:`scrub_values`); the operator
redacts status conditions, ``PermanentError`` and admission messages.

Not caught: a bare random string under an innocent key (indistinguishable from an id or a
hash; an error about that field shows ``<str>`` instead of it), a password in a URL whose
``/`` is not percent-encoded (not a valid URL: the consumer would not read it as credentials
either).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

from sarl.spec.secret_scan import assignments, userinfo_spans
from sarl.spec.secret_shapes import FOREIGN_WORDS, REDACTED, TOKEN_RULES, classes, fold_key

_USE_INSTEAD: Final = (
    "put the secret in an environment variable or a Kubernetes Secret and name it instead "
    "(e.g. api_key_env: OPENAI_API_KEY; spec.storage.credentials_secret for S3)"
)
_USERINFO_HINT: Final = (
    "remove 'user:password@' and pass credentials as environment variables "
    "(AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, MLFLOW_TRACKING_USERNAME/MLFLOW_TRACKING_PASSWORD) "
    "or, on a cluster, a Kubernetes Secret (spec.storage.credentials_secret)"
)


#: Words that make a key secret-named wherever they stand in it, found in the key with every
#: separator removed, so ``PassWord``, ``pass-phrase``, ``X-Api-Key`` and ``mysqlPassword``
#: match as well as ``password``.
_SECRET_WORDS: Final = re.compile(
    r"password|passwd|passphrase|passcode|pwd|secret|credential|creds|apikey|privatekey|"
    r"accesskey|authorization|authtoken|apitoken|accesstoken|refreshtoken|sessiontoken|"
    r"bearer|cookie|sshkey|signingkey|encryptionkey|masterkey|licensekey|deploykey|"
    r"accountkey|sharedaccess|sastoken"  # Azure: AccountKey=, SharedAccessSignature=
)
#: Words that are secret-named only as a key's last word: ``db_pass``, ``hf_token``,
#: ``basic_auth`` are credentials, ``pass_at_k``, ``token_budget``, ``auth_url`` are not.
_SECRET_LAST_WORDS: Final = frozenset({"pass", "pw", "token", "auth", "sig"})  # SAS ?sig=
#: A key ending in one of these words names *where* a secret is (``api_key_env``,
#: ``token_file``, ``secret_name``, ``secret_key_ref``), or describes it (``auth_type``).
_REFERENCE_WORDS: Final = frozenset(
    {
        "env", "envvar", "var", "variable", "file", "path", "dir", "name", "names", "ref",
        "type", "kind", "method", "scheme", "url", "uri", "endpoint", "host",
    }
)  # fmt: skip
#: Keys that hold the *name* of a Kubernetes Secret, not a secret.
_SECRET_NAME_KEYS: Final = frozenset(
    {"credentials_secret", "existing_secret", "image_pull_secrets"}
)
#: Keys a reference to a secret is made of (``hf_token: {secret_name: hf, key: HF_TOKEN}``,
#: ``valueFrom: {secretKeyRef: {name, key}}``): a mapping under a secret-named key is
#: accepted when all its keys are these or reference keys, and refused whole otherwise.
_REFERENCE_KEYS: Final = frozenset({"name", "key", "optional", "namespace", "value_from"})
#: Tokenizer vocabulary ("eos_token: </s>") is not a credential.
_VOCAB_KEY: Final = re.compile(
    r"(?:^|_)(?:eos|bos|pad|unk|sep|cls|mask|stop|start|end|special|think|answer|step|tool)"
    r"_token$"
)
_VOCAB_VALUE: Final = re.compile(r"^(?:<[^<>\s]+>|\[[A-Za-z_]+\])$")
_REFERENCE: Final = re.compile(r"^\$(?:\{[A-Za-z_][A-Za-z0-9_]*\}|[A-Za-z_][A-Za-z0-9_]*)$")
_LITERAL: Final = "a literal value under a secret-named key"
_NESTED: Final = "a mapping under a secret-named key (only a reference such as {secret_name, key})"
_ASSIGNED: Final = "a value given to a secret-named flag or setting inside a string"
# ``--api-key=v``, ``--api-key v`` (a flag's value) and ``password=v``, ``X-Api-Key: v``,
# ``?access_token=v`` (an assignment inside a string) are credentials when the name is
# secret-named (:func:`is_secret_key`); :func:`~sarl.spec.secret_scan.assignments` finds them.
# A value longer than this is never a ``$VAR`` reference or vocabulary: judged without a copy.
_PLAIN_VALUE_MAX: Final = 256
#: A list item that is a flag alone (``["--api-key", "<value>"]``): the next item is its value.
_FLAG_ALONE: Final = re.compile(r"^--?(?P<name>[A-Za-z][\w.\-]*)$")
_ENV_NAME: Final = re.compile(r"^[A-Z][A-Z0-9_]*$")


def _normalise_key(key: str) -> str:
    """``apiKey``, ``APIKey``, ``API-Key``, ``tags.api.key`` -> ``api_key``-style snake case."""
    # A lookaround, not ``([A-Z]+)([A-Z][a-z])``: that rescans a run of capitals from each of
    # its letters (quadratic in a long upper-case key).
    snake = re.sub(r"(?<=[A-Z])(?=[A-Z][a-z])", "_", key)
    snake = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", snake)
    return re.sub(r"[^A-Za-z0-9]+", "_", snake).strip("_").lower()


def is_secret_key(key: str) -> bool:
    """Whether a mapping key (or a command-line flag's name) names a secret value (rule 3 of
    the module docstring), in any of the languages of
    :data:`~sarl.spec.secret_shapes.FOREIGN_WORDS`, percent-encoded or in look-alike letters."""
    latin, bare = fold_key(key)
    name = _normalise_key(latin)
    words = name.split("_")
    if (
        not bare
        or name in _SECRET_NAME_KEYS
        or words[-1] in _REFERENCE_WORDS
        or _VOCAB_KEY.search(name)
    ):
        return False
    if words[-1] in _SECRET_LAST_WORDS or _SECRET_WORDS.search(name.replace("_", "")):
        return True
    return bool(FOREIGN_WORDS.search(bare))


def _is_reference_key(key: str) -> bool:
    name = _normalise_key(key)
    return name in _REFERENCE_KEYS or name.split("_")[-1] in _REFERENCE_WORDS


def _is_plain_value(value: str) -> bool:
    """An empty string, a ``$VAR`` reference or tokenizer vocabulary: not a secret anywhere."""
    return not value.strip() or bool(_REFERENCE.match(value) or _VOCAB_VALUE.match(value))


def _assigned_secrets(text: str) -> Iterator[tuple[int, int]]:
    """The (start, end) of the values of ``--secret-flag=value`` and ``secret_name=value``
    assignments inside ``text``, in linear time (no value is copied but short ones)."""
    for name, start, end in assignments(text):
        if end - start < 4 or text[start] == "-" or not is_secret_key(name):
            continue
        if end - start > _PLAIN_VALUE_MAX:
            yield start, end
            continue
        value = text[start:end]
        if not _is_plain_value(value) and value != REDACTED:
            yield start, end


def _has_userinfo(text: str) -> bool:
    return next(userinfo_spans(text), None) is not None


def _redact_userinfo(text: str) -> str:
    out, done = [], 0
    for start, end, prefix in userinfo_spans(text):
        out += [text[done:start], prefix, REDACTED, "@"]
        done = end
    return "".join([*out, text[done:]])


def secret_kind(value: Any, key: str = "") -> str | None:
    """What secret ``value`` (a leaf found under ``key``) looks like, or None; never the value.
    Under a secret-named key every leaf but null, a boolean, an empty string, a ``$VAR``
    reference and tokenizer vocabulary is a secret: a number, a date (YAML reads
    ``2024-01-01`` as one), bytes as well as a string."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, str):
        if _has_userinfo(value):
            return "a URL with credentials (user:password@)"
        for rule in TOKEN_RULES:
            if rule.matches(value):
                return rule.kind
        if next(_assigned_secrets(value), None) is not None:
            return _ASSIGNED
        return _LITERAL if is_secret_key(key) and not _is_plain_value(value) else None
    if isinstance(value, Mapping | list | tuple):  # containers: see find_secret
        return None
    return _LITERAL if is_secret_key(key) else None


def _refused_whole(value: Mapping[Any, Any], key: str) -> bool:
    """A non-empty mapping under a secret-named key that is not a reference to a Secret."""
    return (
        bool(value)
        and is_secret_key(key)
        and not all(isinstance(k, str) and _is_reference_key(k) for k in value)
    )


def _item_keys(items: list[Any] | tuple[Any, ...], key: str) -> list[str]:
    """The key each list item is judged under: the list's, or a secret-named flag's name for
    the item after the flag alone (``["--api-key", "<value>"]``)."""
    keys = [key] * len(items)
    for i, item in enumerate(items[:-1]):
        flag = _FLAG_ALONE.match(item) if isinstance(item, str) else None
        after = items[i + 1]
        if flag and is_secret_key(flag["name"]) and not str(after).startswith("-"):
            keys[i + 1] = flag["name"]
        # ``["--env", "HF_TOKEN", "<value>"]``: a flag, an environment variable's name, its value
        elif flag and i + 2 < len(items) and isinstance(after, str) and _ENV_NAME.match(after):
            keys[i + 2] = after if is_secret_key(after) else keys[i + 2]
    return keys


def _entry_key(mapping: Mapping[Any, Any], key: Any) -> str:
    """The key ``mapping[key]`` is judged under: its own, or for the ``value`` of an
    environment entry (``{name: OPENAI_API_KEY, value: ...}``, in ``env`` or any list) the
    entry's ``name``."""
    name = mapping.get("name")
    return name if key == "value" and isinstance(name, str) else str(key)


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
        if _refused_whole(value, key):
            return SecretFinding(path, _NESTED)
        for k, v in value.items():
            if isinstance(k, str) and secret_kind(k) is not None:  # never put it in the path
                return SecretFinding(join_path(path, "<a key>"), f"{secret_kind(k)} as a key")
            found = find_secret(v, join_path(path, str(k)), _entry_key(value, k))
            if found is not None:
                return found
        return None
    if isinstance(value, list | tuple):
        for i, (item, item_key) in enumerate(zip(value, _item_keys(value, key), strict=True)):
            found = find_secret(item, f"{path}[{i}]", item_key)
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
    text = _redact_userinfo(text)
    for rule in TOKEN_RULES:
        text = rule.redact(text)
    spans: list[tuple[int, int]] = []  # the values' spans, overlapping ones merged
    for start, end in sorted(_assigned_secrets(text)):
        if spans and start <= spans[-1][1]:
            spans[-1] = (spans[-1][0], max(end, spans[-1][1]))
        else:
            spans.append((start, end))
    out, done = [], 0  # one join: replacing span by span copied the text per span
    for start, end in spans:
        out += [text[done:start], REDACTED]
        done = end
    return "".join([*out, text[done:]])


_SHOWABLE: Final = re.compile(r"^[A-Za-z0-9_.\-/ ]{0,40}$")


def _showable(value: Any) -> bool:
    """Whether an error message may show ``value``: a number, a boolean, null, or a short word
    that does not look random (``'dpo'``, ``'Bad_Name'``, ``'16GB'``: what a typo looks like).
    A string mixing upper case, lower case and digits, or letters and digits over 16
    characters, or holding any other character (``:``, ``@``, ``=``...) is a credential as often
    as not, whatever field it was put in."""
    if isinstance(value, bool | int | float) or value is None:
        return True
    if not isinstance(value, str) or not _SHOWABLE.match(value):
        return False
    letters_and_digits = any(c.isalpha() for c in value) and any(c.isdigit() for c in value)
    return classes(value) < 3 and not (len(value) > 16 and letters_and_digits)


def describe_value(value: Any) -> str:
    """What an error message shows of an input value (after :func:`redact`): a number, a
    boolean or a short word (:func:`_showable`), or a short list of them, as it is; anything
    else as its type only (``<str>``, ``<mapping>``, ``<list>``, ``<date>``), since a string
    under any key may be a credential no rule recognises (a token pasted in a wrong field)."""
    if value == REDACTED or _showable(value):
        return repr(value)
    if isinstance(value, list | tuple) and all(_showable(v) for v in value):
        text = repr(list(value))
        return text if len(text) <= 80 else "<list>"
    if isinstance(value, Mapping):
        return "<mapping>"
    return f"<{type(value).__name__}>"


def scrub_values(text: str, value: Any) -> str:
    """``text`` (a validator's message) without the strings ``value`` holds that an error may
    not show (:func:`_showable`): a validator that words its error with ``{v!r}`` would echo
    what the rules did not recognise. Quoted
    occurrences are replaced whatever their length, bare ones from 8 characters on (shorter
    ones are words of the message too often)."""
    hidden = (leaf for leaf in _string_leaves(value) if not _showable(leaf))
    for leaf in sorted(hidden, key=len, reverse=True):
        text = text.replace(repr(leaf), "<the value>")
        if len(leaf) >= 8:
            text = text.replace(leaf, "<the value>")
    return redact_text(text)


def _string_leaves(value: Any) -> set[str]:
    if isinstance(value, Mapping):
        return {s for v in value.values() for s in _string_leaves(v)}
    if isinstance(value, list | tuple | set):
        return {s for item in value for s in _string_leaves(item)}
    return {value} if isinstance(value, str) and value else set()


def redact(value: Any, key: str = "") -> Any:
    """``value`` with every secret-looking leaf redacted, by the rules of :func:`find_secret`
    (a literal under a secret-named key becomes ``***``; URLs and token shapes inside a string
    are replaced in place). Mappings and lists are copied (tuples become lists), other values
    returned as they are. The one redaction used before a spec is logged or printed."""
    if isinstance(value, Mapping):
        if _refused_whole(value, key):
            return REDACTED
        return {_redact_key(k): redact(v, _entry_key(value, k)) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact(item, k) for item, k in zip(value, _item_keys(value, key), strict=True)]
    if isinstance(value, str):
        return REDACTED if is_secret_key(key) and not _is_plain_value(value) else redact_text(value)
    if secret_kind(value, key) is not None:  # a number, a date... under a secret-named key
        return REDACTED
    return value


def _redact_key(key: Any) -> Any:
    return redact_text(key) if isinstance(key, str) else key


__all__ = [
    "REDACTED",
    "SecretFinding",
    "SecretInSpecError",
    "describe_value",
    "find_secret",
    "is_secret_key",
    "join_path",
    "redact",
    "redact_text",
    "refuse_secrets",
    "scrub_values",
    "secret_kind",
]
