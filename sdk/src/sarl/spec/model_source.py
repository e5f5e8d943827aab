"""Where a model comes from: the one parser of a model URI, and where each kind of source lands.

A model (the policy ``spec.model.name``, an embedder's ``model``, a judge's ``model``) is one of

* a Hugging Face Hub id: ``hf://org/name`` or a bare ``org/name`` (as before this module);
* ``s3://bucket/prefix``: a directory of Hugging Face files in an object store (``sarl models
  copy`` writes one, with :data:`MODEL_MANIFEST` last), for clusters without the Hub;
* ``pvc://claim/path``: a directory on a PersistentVolumeClaim in the Experiment's namespace;
* a local directory (local runs) or ``builtin:tiny-qwen`` (``spec.model``).

Called by the spec (``ModelSpec``'s validator), the operator (``sarl_operator.model_sources``:
a served model's KServe ``storageUri``, a trainer pod's volume), the jobs and the evaluation
(``sarl.storage.models.materialize``: the local directory a trainer loads) and ``sarl models
copy``. Pure: parsing never touches the network or the file system, and the operator never
fetches what a spec names (a spec is a tenant's untrusted input).

Errors are ValueErrors that name the field and the fix; a value that holds credentials (a URL
with ``user:password@``) is never echoed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Final, Literal

#: Written last by ``sarl models copy`` at ``<prefix>/<MODEL_MANIFEST>``: the files and their
#: sha256. A prefix without it is an incomplete copy that the jobs refuse to load. A dot file, so
#: model loaders skip it where KServe's storage initializer downloads it with the model.
MODEL_MANIFEST: Final = ".sarl-model.json"
#: Where trainer and evaluation pods mount a ``pvc://`` policy's claim: ``<root>/<claim>``.
PVC_MOUNT_ROOT: Final = "/mnt/sarl-models"
#: Where KServe puts a predictor's ``storageUri`` (storage initializer download, or the claim's
#: subPath mount): ``DefaultModelLocalMountPath`` in pkg/constants/constants.go (v0.17.0).
KSERVE_MODEL_DIR: Final = "/mnt/models"
SCHEMES: Final = ("hf", "s3", "pvc")

SourceKind = Literal["builtin", "hub", "s3", "pvc", "local"]

_SCHEME: Final = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
# huggingface_hub's validate_repo_id (utils/_validators.py, v0.34-1.x): [namespace/]name, each
# of letters, digits, '-', '_', '.', at most 96 characters, no '--' or '..', no '.git' suffix.
_HUB_ID: Final = re.compile(r"^([A-Za-z0-9][\w.\-]{0,95}/)?[\w.\-]{1,96}$")
# A DNS-1123 subdomain: a PersistentVolumeClaim name (apimachinery's IsDNS1123Subdomain).
_CLAIM: Final = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
# Path segments of an object key or a claim sub-path: printable, no shell/URL metacharacters.
_SEGMENT: Final = re.compile(r"^[A-Za-z0-9._+=,~-]+$")


class ModelUriError(ValueError):
    """A value that is not a model source: ``str()`` is ``"<field>: <reason>"``, ``reason``
    alone for a validator whose error already names the field."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


@dataclass(frozen=True)
class ModelUri:
    """A parsed model source. ``uri`` is the canonical form (``hf://`` for Hub ids, no trailing
    ``/``); ``bucket``/``path`` hold the bucket and key prefix (s3) or claim and sub-path (pvc);
    ``hub_id`` the Hub id, ``path`` the directory of a local source."""

    kind: SourceKind
    uri: str
    hub_id: str = ""
    bucket: str = ""
    path: str = ""

    @property
    def is_hub(self) -> bool:
        return self.kind == "hub"

    @property
    def in_store(self) -> bool:
        """True for an object-store or volume source: nothing of it needs the Hub."""
        return self.kind in ("s3", "pvc")

    @property
    def claim(self) -> str:
        return self.bucket if self.kind == "pvc" else ""

    def storage_uri(self) -> str:
        """The InferenceService ``storageUri`` of an s3 or pvc source (ValueError otherwise).

        s3 ends with ``/``: KServe's storage initializer downloads every object whose key starts
        with the URI's path (``Storage._download_s3``, python/storage/kserve_storage/
        kserve_storage.py, v0.17.0: ``bucket.objects.filter(Prefix=bucket_path)``), so without
        the slash ``s3://b/qwen`` would also fetch ``s3://b/qwen-2/...`` into the model dir.
        pvc: ``pvc://claim/path``, mounted with ``subPath: path`` (``utils.ParsePvcURI`` in
        pkg/webhook/admission/pod/storage_initializer_injector.go, v0.17.0)."""
        if self.kind == "s3":
            return f"s3://{self.bucket}/{self.path}/"
        if self.kind == "pvc":
            return f"pvc://{self.bucket}/{self.path}" if self.path else f"pvc://{self.bucket}"
        raise ValueError(f"{self.uri}: only s3:// and pvc:// sources have a storageUri")

    def local_dir(self, workdir: Path) -> Path:
        """Where a job finds this model: an s3 copy under ``<workdir>/models/<bucket>/<prefix>``,
        a pvc claim under :data:`PVC_MOUNT_ROOT` (the operator mounts it there), a local path
        as given. ValueError for a Hub id (loaded by id) or the built-in model."""
        if self.kind == "s3":
            return Path(workdir) / "models" / self.bucket / self.path
        if self.kind == "pvc":
            return Path(pvc_mount_path(self.bucket)) / self.path
        if self.kind == "local":
            return Path(self.path).expanduser()
        raise ValueError(f"{self.uri}: a {self.kind} model has no local directory")


def loader_path(source: ModelUri, workdir: Path) -> str:
    """What a model loader (``from_pretrained``, vLLM, verl's ``model.path``) is given for
    ``source`` in a job working under ``workdir``: the Hub id, else the local directory (where
    ``sarl.storage.models.materialize`` puts an s3 copy). No I/O: a job's dry-run plan shows it."""
    return source.hub_id if source.is_hub else str(source.local_dir(workdir))


def pvc_mount_path(claim: str) -> str:
    """Where a trainer or evaluation pod mounts the claim of a ``pvc://`` policy."""
    return f"{PVC_MOUNT_ROOT}/{claim}"


def valid_bucket_name(name: str) -> bool:
    """S3 bucket naming rules (3-63 chars of a-z 0-9 . -, alnum at both ends, not an IP)."""
    return (
        re.fullmatch(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]", name) is not None
        and ".." not in name
        and re.fullmatch(r"\d+\.\d+\.\d+\.\d+", name) is None
    )


def parse_model_uri(value: str, field: str) -> ModelUri:
    """``value`` as a :class:`ModelUri`; ValueError naming ``field`` (e.g. ``spec.model.name``)
    and the fix when it is not a model source."""
    text = value.strip()
    if not text:
        raise ModelUriError(field, "must name a model (hf://org/name, s3://bucket/prefix, ...)")
    if text.startswith("builtin:"):
        return ModelUri("builtin", text)
    match = _SCHEME.match(text)
    if match is None:
        if _is_hub_id(text) and not text.startswith((".", "~")):
            return ModelUri("hub", f"hf://{text}", hub_id=text)
        return ModelUri("local", text, path=text)
    scheme = match.group(1).lower()
    rest = text[match.end() :]
    authority = rest.split("/", 1)[0]
    if "@" in authority or ":" in authority:
        # The value is not echoed: it may hold an access key.
        raise ModelUriError(
            field,
            "a model URI carries no credentials or port (remove 'user:password@'); "
            "S3 credentials come from AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or, on a "
            "cluster, spec.storage.credentials_secret",
        )
    if scheme == "hf":
        return _hub(rest, field)
    if scheme == "s3":
        return _s3(rest, field)
    if scheme == "pvc":
        return _pvc(rest, field)
    raise ModelUriError(
        field,
        f"unsupported scheme {scheme!r}; use hf://org/name (the Hugging Face Hub), "
        "s3://bucket/prefix (a model directory in the object store, see `sarl models copy`) "
        "or pvc://claim/path (a PersistentVolumeClaim in the Experiment's namespace)",
    )


def _is_hub_id(text: str) -> bool:
    return (
        _HUB_ID.match(text) is not None
        and "--" not in text
        and ".." not in text
        and not text.endswith(".git")
    )


def _hub(rest: str, field: str) -> ModelUri:
    rest = rest.rstrip("/")
    if not _is_hub_id(rest):
        raise ModelUriError(
            field,
            f"{_shown(rest)} is not a Hugging Face Hub id; write hf://org/name (letters, "
            "digits, '-', '_' and '.', at most 96 characters each side of '/')",
        )
    return ModelUri("hub", f"hf://{rest}", hub_id=rest)


def _segments(path: str, field: str, what: str) -> str:
    """``path`` (no leading or trailing '/') checked segment by segment: no empty, '.' or '..'
    segment (no escape from the prefix or the claim), no URL or shell metacharacters."""
    if not path:
        return ""
    for part in path.split("/"):
        if part in ("", ".", ".."):
            raise ModelUriError(
                field,
                f"the {what} {_shown(path)} has an empty, '.' or '..' segment; name the "
                "model's directory itself, e.g. models/Qwen3-4B",
            )
        if not _SEGMENT.match(part):
            raise ModelUriError(
                field,
                f"the {what} segment {_shown(part)} has a character other than letters, "
                "digits and . _ - + = , ~",
            )
    return str(PurePosixPath(path))


def _s3(rest: str, field: str) -> ModelUri:
    bucket, _, prefix = rest.partition("/")
    if not valid_bucket_name(bucket):
        raise ModelUriError(
            field,
            f"{_shown(bucket)} is not an S3 bucket name (3-63 characters: lowercase "
            "letters, digits, '.', '-'); write s3://bucket/prefix",
        )
    prefix = prefix.rstrip("/")
    if not prefix:
        raise ModelUriError(
            field,
            f"s3://{bucket} names no directory; write s3://{bucket}/<prefix>, the "
            "prefix `sarl models copy` wrote the model to",
        )
    prefix = _segments(prefix, field, "prefix")
    return ModelUri("s3", f"s3://{bucket}/{prefix}", bucket=bucket, path=prefix)


def _pvc(rest: str, field: str) -> ModelUri:
    claim, _, path = rest.partition("/")
    if len(claim) > 253 or not _CLAIM.match(claim):
        raise ModelUriError(
            field,
            f"{_shown(claim)} is not a PersistentVolumeClaim name (a DNS-1123 "
            "subdomain: lowercase letters, digits, '-' and '.'); write pvc://claim/path",
        )
    path = _segments(path.rstrip("/"), field, "path")
    uri = f"pvc://{claim}/{path}" if path else f"pvc://{claim}"
    return ModelUri("pvc", uri, bucket=claim, path=path)


def _shown(text: str) -> str:
    """``text`` quoted for an error, cut short: long values are not worth repeating."""
    return repr(text if len(text) <= 80 else text[:77] + "...")


def check_http_url(value: str, example: str) -> str:
    """``value`` if it is an ``http(s)://host[:port][/path]`` URL without credentials, query or
    fragment (``spec.resources.hf_endpoint``, ``SARL_HF_ENDPOINT``); ValueError otherwise, with
    ``example`` as the fix. The value is not echoed (it may hold a token)."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(value.strip())
        parts.port  # noqa: B018 -- raises ValueError on a bad port
    except ValueError as e:
        raise ValueError(f"must be an http(s) URL, e.g. {example}") from e
    if parts.username is not None or parts.password is not None:
        raise ValueError("must not carry credentials (user:password@); give the bare URL")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"must be an http(s) URL, e.g. {example}")
    if parts.query or parts.fragment or any(c.isspace() for c in value.strip()):
        raise ValueError(f"must be a bare http(s) URL without query or fragment, e.g. {example}")
    return value.strip().rstrip("/")
