"""reference/services-api.md: the HTTP routes, error statuses and Prometheus metrics of the
embedding server and the reward service (``sarl serve embedding|reward``).

Read from the code: the routers each service builds (``build_router``; the route handlers'
docstrings say their bodies), the KServe routes they keep (``sarl_services.routes.KSERVE_ROUTES``
and the comment beside each), the error classes of ``sarl_services.errors`` (status and error
``type``), and the metrics each service registers (built into a fresh registry here). Nothing
is served or loaded: the models are constructed, never ``load()``-ed.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
from typing import Any

from tools.refdocs.markdown import code, page, table

_HELP_SUFFIX = {"counter": "_total", "histogram": "_bucket, _sum, _count", "gauge": ""}


def _doc(obj: Any) -> str:
    return " ".join(inspect.cleandoc(obj.__doc__ or "").split())


def _kserve_routes() -> list[tuple[str, str, str]]:
    """``(method, path, comment)`` of the KServe routes both services keep."""
    from sarl_services import routes

    source = inspect.getsource(routes)
    out = []
    for path in routes.KSERVE_ROUTES:
        match = re.search(rf'"{re.escape(path)}",\s*#\s*(.*)', source)
        out.append(("GET", path, match[1].strip() if match else ""))
    return out


def _own_routes(router: Any) -> list[tuple[str, str, str]]:
    from fastapi.routing import APIRoute

    return [
        (", ".join(sorted(r.methods or ())), r.path, _doc(r.endpoint))
        for r in router.routes
        if isinstance(r, APIRoute)
    ]


def _routers() -> dict[str, Any]:
    from sarl_services._kserve import import_kserve

    import_kserve()  # before sarl_services' modules, which import kserve (see there)
    from prometheus_client import CollectorRegistry

    from sarl_services import embedding, reward
    from sarl_services.metrics import EmbeddingMetrics, RewardMetrics

    reward_metrics = RewardMetrics.create(CollectorRegistry())
    reward_model = reward.RewardModel(reward.RewardServiceSettings(), reward_metrics)
    embedding_model = embedding.EmbeddingModel(
        embedding.EmbeddingSettings(), EmbeddingMetrics.create(CollectorRegistry())
    )
    return {
        "embedding": (embedding.build_router(embedding_model), embedding_model.metrics),
        "reward": (reward.build_router(reward_model, reward_metrics), reward_metrics),
    }


def _metric_rows(metrics: Any) -> list[tuple[str, str, str, str]]:
    rows = []
    for field in dataclasses.fields(metrics):
        metric = getattr(metrics, field.name)
        # prometheus_client keeps name, type, help and label names only as attributes of the
        # metric object (no public getter for the label names before a sample exists).
        kind = str(metric._type)
        suffix = _HELP_SUFFIX.get(kind, "")
        name = code(metric._name) + (f" ({suffix})" if suffix else "")
        labels = ", ".join(code(label) for label in metric._labelnames)
        rows.append((name, kind, labels, str(metric._documentation)))
    return rows


def _subclasses(cls: Any) -> list[Any]:
    """Every subclass of ``cls``, at any depth, in definition order."""
    found: list[Any] = []
    for sub in cls.__subclasses__():
        found += [sub, *_subclasses(sub)]
    return found


def _errors(missing: list[str]) -> list[tuple[str, str, str]]:
    """``(status, type, docstring)`` of each error class the services raise."""
    import importlib
    import pkgutil

    import sarl_services
    from sarl_services import errors

    # Error classes live beside what raises them (api_key.Unauthorized): import every module so
    # the page never depends on what the caller happened to import first (in the test suite an
    # earlier test imported api_key; alone, the generator did not, and the pages differed).
    for module in pkgutil.iter_modules(sarl_services.__path__, "sarl_services."):
        importlib.import_module(module.name)
    rows = []
    for cls in _subclasses(errors.ServiceError):
        if not _doc(cls):
            missing.append(f"services error {cls.__name__}")
        kind = "" if cls is errors.Unavailable else code(cls.kind)  # set per instance
        rows.append((str(cls.status), kind, _doc(cls)))
    return sorted(rows)


def services_page() -> tuple[str, list[str]]:
    """The page and the routes without a description."""
    missing: list[str] = []
    sections = []
    kserve = _kserve_routes()
    for service, (router, metrics) in _routers().items():
        own = _own_routes(router)
        missing += [f"service {service}: {m} {p}" for m, p, d in own + kserve if not d]
        sections += [
            f"## {service.capitalize()} service (`sarl serve {service}`)",
            "### Routes",
            table(
                ("Method", "Path", "What it does"), [(m, code(p), d) for m, p, d in own + kserve]
            ),
            "### Metrics (`GET /metrics`)",
            table(("Metric", "Type", "Labels", "Help"), _metric_rows(metrics)),
        ]
    sections += [
        "## Errors (both services)",
        "Every error is answered with the body "
        '`{"error": {"message", "type", "param", "code"}}` (OpenAI\'s shape); `param` names the '
        "request field at fault. A 503 carries `Retry-After`; its `type` is `not_ready`, "
        "`overloaded` or `shutting_down`. Anything else that escapes a handler is a 500 "
        "`internal_error`.",
        table(("Status", "`type`", "When"), _errors(missing)),
    ]
    intro = (
        "The HTTP API of the two model servers, run on KServe's ModelServer. Any route not "
        "listed answers 404 before its body is read (KServe's model-repository, inference and "
        "metadata routes are closed). Limits, batching and overload behaviour: "
        "`services/README.md`."
    )
    return page("Services HTTP API", intro, sections), missing
