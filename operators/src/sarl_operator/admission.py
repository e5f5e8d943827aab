"""Admission checks of Experiments and Studies: which trainer images they may run, and (through
:mod:`sarl_operator.admission_plan`) whether their spec is valid on this platform (rewards by
registered or allow-listed name, never imported) and their resource plan fits.

``spec.resources.image`` lets whoever can create an Experiment run any image with the trainer's
service account and the platform's S3 credentials, so a platform can restrict images to a list
of registry/repository prefixes (charts/sarl-platform ``operator.allowedImageRegistries``, env
``SARL_ALLOWED_IMAGE_REGISTRIES``, comma separated; empty: any image).

Two layers use the same pure check, :func:`image_violations`:

* the **validating admission webhook** registered here (``@kopf.on.validate`` for experiments
  and studies, kopf handler id :data:`WEBHOOK_ID`, served over TLS by kopf's
  :class:`kopf.WebhookServer` that :func:`configure_webhook_server` sets up at startup). The
  chart owns the ``ValidatingWebhookConfiguration`` (path ``/<WEBHOOK_ID>``, CA bundle, Service),
  so kopf does not manage one (``settings.admission.managed`` stays unset) and the operator needs
  no RBAC on admissionregistration;
* the operator's create handler, as a defence when the webhook is switched off.

Images are compared as normalised references (Docker's rules: no registry means ``docker.io``,
a single Docker Hub name means ``library/<name>``, the registry host is case-insensitive) and a
prefix matches whole path components only: ``ghcr.io/sarl-dev`` allows
``ghcr.io/sarl-dev/sarl-verl:1`` but not ``ghcr.io/sarl-dev.evil.com/x`` nor
``ghcr.io/sarl-devil/x``. A reference that does not parse is refused (it could hide a registry).

Registered by importing this module (``sarl_operator.handlers`` imports it, so ``kopf run -m
sarl_operator.handlers`` serves the webhook too).
"""

from __future__ import annotations

import asyncio
import functools
import os
import re
from collections.abc import AsyncIterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Final

import kopf

from sarl.plan import store_capacity_from_env
from sarl.rewards.cluster_names import allowed_reward_modules
from sarl.spec.secrets import redact_text
from sarl_operator.admission_plan import spec_violation
from sarl_operator.platform_settings import Platform
from sarl_operator.tenant_specs import as_spec_error, for_cluster

GROUP: Final = "sarl.dev"
VERSION: Final = "v1alpha1"
#: kopf handler id of the image check; kopf serves it at path ``/<WEBHOOK_ID>`` and runs only the
#: handlers whose id is the request's path, so the chart's webhook path must be exactly this.
WEBHOOK_ID: Final = "sarl-images"
#: The API server's ``code`` of a refused request: the spec is invalid for this platform (422,
#: reported by ``sarl submit`` as the server's message, by kubectl as ``Invalid``).
DENIED_CODE: Final = 422

ENV_ALLOWED: Final = "SARL_ALLOWED_IMAGE_REGISTRIES"
ENV_PORT: Final = "SARL_WEBHOOK_PORT"
ENV_CERT: Final = "SARL_WEBHOOK_CERT_FILE"
ENV_KEY: Final = "SARL_WEBHOOK_KEY_FILE"

DOCKER_HUB: Final = "docker.io"
# Grammar of github.com/distribution/reference (regexp.go). ASCII only: \w would accept
# look-alike Unicode letters otherwise.
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = re.compile(
    rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[0-9a-fA-F:]+\])(?::[0-9]+)?", re.ASCII
)
_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[_.]|__|-+)[a-z0-9]+)*"
_PATH = re.compile(rf"{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*", re.ASCII)
_REMAINDER = re.compile(
    rf"(?P<path>{_PATH.pattern})(?::[\w][\w.-]{{0,127}})?"
    r"(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?",
    re.ASCII,
)
#: Docker's own limit on the name part of a reference.
_MAX_NAME = 255


@dataclass(frozen=True)
class ImageName:
    """A normalised image repository: registry host[:port] (lower case) and path components."""

    registry: str
    path: tuple[str, ...]

    def within(self, prefix: ImageName) -> bool:
        """Whether this repository is ``prefix`` or below it (whole path components)."""
        return self.registry == prefix.registry and self.path[: len(prefix.path)] == prefix.path


def _split_registry(name: str, *, bare_registry: bool) -> tuple[str, str]:
    """(registry, remainder) by Docker's rule: the first component is a registry when it has a
    ``.`` or ``:``, is ``localhost`` or has upper case; else the image is on Docker Hub.
    ``bare_registry``: a name without ``/`` may itself be a registry (allow-list entries)."""
    first, sep, rest = name.partition("/")
    looks_like_host = (
        any(c in first for c in ".:") or first == "localhost" or first != first.lower()
    )
    if looks_like_host and (sep or bare_registry):
        return first, rest
    return DOCKER_HUB, name


def _registry(host: str) -> str | None:
    if not _DOMAIN.fullmatch(host):
        return None
    host = host.lower()
    return DOCKER_HUB if host == "index.docker.io" else host  # Docker's legacy alias


def parse_image(ref: object) -> ImageName | None:
    """The repository of image reference ``ref`` (tag and digest dropped), or None when it is
    not a valid reference."""
    if not isinstance(ref, str) or not ref:
        return None
    host, remainder = _split_registry(ref, bare_registry=False)
    registry = _registry(host)
    match = _REMAINDER.fullmatch(remainder)
    if registry is None or match is None or len(host) + 1 + len(match["path"]) > _MAX_NAME:
        return None
    path = tuple(match["path"].split("/"))
    if registry == DOCKER_HUB and len(path) == 1:
        path = ("library", *path)
    return ImageName(registry, path)


def parse_prefix(entry: str) -> ImageName:
    """An allow-list entry (``registry[:port][/path...][/]``, no tag or digest) as the
    repository prefix it allows; ValueError naming the entry when it is not one.

    A trailing ``/`` means "everything below" as written (``sarl-dev/``: Docker Hub namespace
    ``sarl-dev``); without it, a one-component Docker Hub name is normalised as an image would
    be (``python`` and ``docker.io/python`` mean ``docker.io/library/python``)."""
    stripped = entry.strip()
    text = stripped.rstrip("/")
    host, remainder = _split_registry(text, bare_registry=True)
    registry = _registry(host)
    if not text or registry is None or (remainder and not _PATH.fullmatch(remainder)):
        raise ValueError(
            f"{ENV_ALLOWED}: {entry!r} is not a registry or repository prefix "
            "(e.g. ghcr.io/sarl-dev/)"
        )
    path = tuple(remainder.split("/")) if remainder else ()
    if registry == DOCKER_HUB and len(path) == 1 and not stripped.endswith("/"):
        path = ("library", *path)
    return ImageName(registry, path)


@functools.lru_cache(maxsize=16)
def _prefixes(allowed: tuple[str, ...]) -> tuple[ImageName, ...]:
    return tuple(parse_prefix(entry) for entry in allowed)


def allowed_registries(env: Mapping[str, str]) -> tuple[str, ...]:
    """The allow-list of ``SARL_ALLOWED_IMAGE_REGISTRIES`` (comma separated; empty: any image);
    ValueError naming an entry that is not a registry or repository prefix."""
    entries = tuple(e.strip() for e in env.get(ENV_ALLOWED, "").split(",") if e.strip())
    _prefixes(entries)  # validate now: a typo must stop the operator, not allow everything
    return entries


def image_allowed(image: str, allowed: Sequence[str]) -> bool:
    """Whether ``image`` is under one of the ``allowed`` prefixes (empty ``allowed``: any)."""
    if not allowed:
        return True
    name = parse_image(image)
    return name is not None and any(name.within(p) for p in _prefixes(tuple(allowed)))


def _image_at(tree: Any, *path: str) -> tuple[bool, Any]:
    """(present, value) of the key ``path`` in nested mappings."""
    node = tree
    for key in path:
        if not isinstance(node, Mapping) or key not in node:
            return False, None
        node = node[key]
    return True, node


def image_fields(body: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """(field path, value) of every trainer image an Experiment or Study sets.

    Experiment: ``spec.resources.image``. Study: ``spec.base.resources.image`` (the report Job's
    image, and every arm's unless overridden) and each ``spec.arms[i].override.resources.image``:
    an arm's image is its override's, else the base's (``Study.runs()`` deep-merges the override
    over the base), so these fields cover every run. Unset and empty values are left out (the
    platform's default image is used)."""
    spec = body.get("spec")
    if body.get("kind") != "Study":
        present, value = _image_at(spec, "resources", "image")
        return [("spec.resources.image", value)] if present and value else []
    found: list[tuple[str, Any]] = []
    present, value = _image_at(spec, "base", "resources", "image")
    if present and value:
        found.append(("spec.base.resources.image", value))
    arms = spec.get("arms") if isinstance(spec, Mapping) else None
    for i, arm in enumerate(arms if isinstance(arms, list) else []):
        present, value = _image_at(arm, "override", "resources", "image")
        if present and value:
            found.append((f"spec.arms[{i}].override.resources.image", value))
    return found


def image_violations(body: Mapping[str, Any], allowed: Sequence[str]) -> list[str]:
    """One message per image of the Experiment or Study ``body`` (a custom object, as stored
    or as in an AdmissionReview) outside the ``allowed`` prefixes, naming the field, e.g.
    ``spec.resources.image='evil.io/x:1': registry not allowed (allowed: ghcr.io/sarl-dev/)``.
    Empty ``allowed``: any image, no messages. Raises ValueError for an invalid entry of
    ``allowed`` (see :func:`allowed_registries`)."""
    if not allowed:
        return []
    prefixes = _prefixes(tuple(allowed))
    listed = ", ".join(allowed)
    out: list[str] = []
    for field, value in image_fields(body):
        name = parse_image(value)
        if name is None:
            # Redacted: an image written as user:password@registry/... does not parse.
            out.append(redact_text(f"{field}={value!r}: not a valid image reference"))
        elif not any(name.within(p) for p in prefixes):
            out.append(redact_text(f"{field}={value!r}: registry not allowed (allowed: {listed})"))
    return out


def new_image_violations(
    body: Mapping[str, Any], old: Mapping[str, Any] | None, allowed: Sequence[str]
) -> list[str]:
    """:func:`image_violations` of ``body`` that ``old`` (the object before an UPDATE) did not
    have already: metadata changes (kopf's finalizers, a deletion) and status writes of an object
    admitted under an older allow-list stay possible; a changed image is checked."""
    before = set(image_violations(old, allowed)) if old is not None else set()
    return [v for v in image_violations(body, allowed) if v not in before]


# ---- kopf wiring: the webhook handler and its server ----


@kopf.on.validate(GROUP, VERSION, "experiments", id=WEBHOOK_ID)
@kopf.on.validate(GROUP, VERSION, "studies", id=WEBHOOK_ID)
async def validate_images(body: kopf.Body, **kwargs: Any) -> None:
    """Refuse a CREATE or UPDATE that sets an image outside the allow-list, or whose spec is
    invalid or does not fit (:func:`refusal`; 422, the message naming each field); whatever
    checking it raises is a refusal, never the operator's end. ``operation`` and ``old`` (the
    object before an UPDATE) come in ``kwargs``: kopf's handler protocol lists neither.

    Async on purpose: kopf runs sync handlers in its thread pool, where the operator's own sync
    handlers may all be waiting on API calls that this webhook must answer (a Study creating its
    Experiments). The check itself runs in a pool of its own (:func:`_check_pool`), off the
    event loop: a large spec costs CPU time linear in its size (the secret rules included), and
    meanwhile the loop keeps serving other requests, probes and the operator's watches."""
    operation, old = kwargs.get("operation"), kwargs.get("old")
    if operation not in ("CREATE", "UPDATE"):
        return
    loop = asyncio.get_running_loop()
    refused = await loop.run_in_executor(
        _check_pool(), _refusal_message, body, operation, old, dict(os.environ)
    )
    if refused:
        raise kopf.AdmissionError(refused, code=DENIED_CODE)


@functools.cache
def _check_pool() -> ThreadPoolExecutor:
    """The webhook's own threads: not kopf's pool (see :func:`validate_images`), and bounded,
    so concurrent large requests queue instead of taking every CPU."""
    return ThreadPoolExecutor(max_workers=2, thread_name_prefix="sarl-webhook")


def _refusal_message(
    body: Mapping[str, Any], operation: str, old: Mapping[str, Any] | None, env: Mapping[str, str]
) -> str | None:
    """:func:`refusal`, with whatever checking raises turned into a refusal, never the
    operator's end (STOPS pass)."""
    try:
        return refusal(body, operation, old, env)
    except BaseException as e:  # any: the webhook answers for every team
        return str(as_spec_error(e))


def refusal(
    body: Mapping[str, Any], operation: str, old: Mapping[str, Any] | None, env: Mapping[str, str]
) -> str | None:
    """Why the webhook refuses this CREATE or UPDATE, or None. The spec is validated for the
    cluster (:func:`~sarl_operator.tenant_specs.for_cluster`: no module it names is imported)
    and checked against the tenant policy of the platform in ``env`` (``SARL_TENANTS``), only
    on CREATE or when an UPDATE changes it."""
    allowed = allowed_registries(env)
    found = new_image_violations(body, old if operation == "UPDATE" else None, allowed)
    if found:
        return "; ".join(found)
    if operation == "CREATE" or (old is not None and old.get("spec") != body.get("spec")):
        with for_cluster(env):
            return spec_violation(body, store_capacity_from_env(env), Platform.from_env(env))
    return None


class IdleWebhookServer:
    """A webhook "server" that serves nothing: kopf refuses to start with admission handlers
    and no server, and the webhook is optional (``operator.admissionWebhook.enabled``)."""

    async def __call__(self, fn: kopf.WebhookFn) -> AsyncIterator[kopf.WebhookClientConfig]:
        await asyncio.Event().wait()  # never set: idle until the operator stops
        yield kopf.WebhookClientConfig()  # pragma: no cover - never reached


def webhook_server(env: Mapping[str, str]) -> kopf.WebhookServer | IdleWebhookServer:
    """kopf's HTTPS server on ``0.0.0.0:$SARL_WEBHOOK_PORT`` with the certificate and key files
    ``$SARL_WEBHOOK_CERT_FILE``/``$SARL_WEBHOOK_KEY_FILE`` (the chart's TLS Secret; kopf re-reads
    them when they change), or :class:`IdleWebhookServer` when no port is set."""
    port = env.get(ENV_PORT, "").strip()
    if not port:
        return IdleWebhookServer()
    cert, key = env.get(ENV_CERT, ""), env.get(ENV_KEY, "")
    if not (port.isdigit() and 0 < int(port) < 65536) or not (cert and key):
        raise ValueError(
            f"{ENV_PORT}={port!r}: needs a port number and both {ENV_CERT} and {ENV_KEY}"
        )
    return kopf.WebhookServer(addr="0.0.0.0", port=int(port), certfile=cert, pkeyfile=key)


@kopf.on.startup()
def configure_webhook_server(settings: kopf.OperatorSettings, **_: Any) -> None:
    """Serve the webhook (or idle) and check the allow-lists (images, reward modules) once, so
    a typo in one stops the operator at startup instead of refusing every request."""
    allowed_registries(os.environ)
    allowed_reward_modules(os.environ)
    settings.admission.server = webhook_server(os.environ)
    # settings.admission.managed stays None: the chart renders the ValidatingWebhookConfiguration
