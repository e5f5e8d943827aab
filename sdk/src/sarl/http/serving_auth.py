"""The served-model API key sarl's clients send: ``SARL_SERVING_API_KEY`` as a Bearer token.

Called by the clients of models a platform serves: the OpenAI embedding client
(``sarl.embedding.openai_client``), the Structured Q&A judge (``sarl.rewards.structured_qa.judge``)
and the RLKD chat client (``sarl.rewards.rlkd.chat``), when no key of their own is configured.
On a platform with tenants the operator gives every pod of a tenant's jobs this key from its
Secret ``sarl-tenant``, and the tenant's served models require it (``sarl_services.api_key``).

The key is sent only to cluster-local services (``*.svc`` and ``*.svc.<cluster domain>`` hosts,
how Kubernetes names a Service) and to loopback (a service run locally with ``sarl serve``):
a URL that a spec points elsewhere (an external API) never receives the tenant's key. Pure.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from typing import Final
from urllib.parse import urlsplit

#: The environment variable holding the key (``sarl.cluster.tenancy.TenantKeys.SERVING_API_KEY``).
SERVING_API_KEY_ENV: Final = "SARL_SERVING_API_KEY"


def _local(host: str) -> bool:
    """Whether ``host`` is a Kubernetes Service name or a loopback address."""
    host = host.lower().rstrip(".")
    if host == "localhost" or host.endswith(".svc") or ".svc." in host:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def serving_api_key(url: str, environ: Mapping[str, str]) -> str | None:
    """The key to send to ``url``: ``SARL_SERVING_API_KEY`` when set and ``url`` is a
    cluster-local Service or loopback, else None."""
    key = environ.get(SERVING_API_KEY_ENV, "").strip()
    if not key:
        return None
    host = urlsplit(url).hostname or ""
    return key if _local(host) else None
