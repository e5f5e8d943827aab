"""Property: no output of ``sarl validate`` or of a local run's spec logging holds a planted
secret. Random secret-shaped values under random secret-named keys (camelCase, snake_case,
kebab-case, upper case) and credential-shaped strings (tokens, ``Bearer``/``Basic``, URLs with
user info with and without a scheme, ``--api-key=`` flags, ``password=`` assignments) are put at
random places of the example Experiments and Studies; every output is grepped for them.

``SARL_SECRETS_EXAMPLES`` raises the number of specs tried (default modest, so the suite stays
quick). The logging half smuggles the planted values past validation with ``model_copy`` (which
does not validate), standing in for a rule the refusal misses, and reads back what a real
MLflow store holds: the params, tags and ``spec/experiment.yaml``."""

from __future__ import annotations

import base64
import copy
import datetime
import os
import string
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from sarl.cli.main import app
from sarl.runner.local import LocalOptions
from sarl.runner.session import LocalSession
from sarl.spec import Experiment, load_experiment
from sarl.tracking.tracker import SPEC_ARTIFACT, default_tracking_uri

EXAMPLES = Path(__file__).parents[3] / "examples"
BASES = [
    yaml.safe_load(p.read_text(encoding="utf-8"))
    for p in sorted([*EXAMPLES.glob("*.yaml"), *(EXAMPLES / "studies").glob("*.yaml")])
]
N = int(os.environ.get("SARL_SECRETS_EXAMPLES", "60"))

_WORDS = [
    ["password"], ["pass", "word"], ["pass", "phrase"], ["pwd"], ["secret"], ["secret", "value"],
    ["token"], ["credentials"], ["api", "key"], ["api", "keys"], ["auth"], ["authorization"],
    ["private", "key"], ["pass"], ["client", "secret"], ["access", "token"], ["creds"],
]  # fmt: skip
_AFFIXES = ["db", "my", "mlflow", "s3", "for", "hf", "admin", "user", "prod"]
_RANDOM = string.ascii_letters + string.digits


def _render(words: list[str], form: str) -> str:
    if form == "camel":
        return words[0] + "".join(w.title() for w in words[1:])
    if form == "pascal":
        return "".join(w.title() for w in words)
    if form == "upper":
        return "_".join(words).upper()
    return ("-" if form == "kebab" else "_").join(words)


@st.composite
def secret_keys(draw: st.DrawFn) -> str:
    words = list(draw(st.sampled_from(_WORDS)))
    prefix = draw(st.lists(st.sampled_from(_AFFIXES), max_size=2))
    last_only = words in (["pass"], ["token"], ["auth"])  # secret-named only as the last word
    suffix = [] if last_only else draw(st.lists(st.sampled_from(_AFFIXES), max_size=1))
    form = draw(st.sampled_from(["snake", "kebab", "camel", "pascal", "upper"]))
    return _render([*prefix, *words, *suffix], form)


def _body(draw: st.DrawFn, size: int) -> str:
    """A random part that mixes upper case, lower case and digits (what a secret looks like)."""
    return "Qz7" + draw(st.text(_RANDOM, min_size=size - 3, max_size=size - 3))


@st.composite
def credentials(draw: st.DrawFn) -> tuple[Any, str]:
    """A credential-shaped string and the part of it that must never be printed."""
    b = _body(draw, draw(st.integers(20, 40)))
    upper = "".join(c for c in b.upper() if c.isalnum())[:16].ljust(16, "X")
    basic = base64.b64encode(f"alice:{b}".encode()).decode()
    shapes = [
        (f"AKIA{upper}", upper),
        (f"ghp_{b[:36].ljust(36, '9')}", b[:36]),
        (f"hf_{b[:34].ljust(34, 'a')}", b[:34]),
        (f"sk-proj-{b}", b),
        (f"Bearer {b}", b),
        (f"Basic {basic}", basic),
        (f"https://alice:{b}@minio:9000", b),
        (f"https://{b}@github.com/org/repo.git", b),
        (f"alice:{b}@mlflow:5000", b),
        (f"//user:{b}@host", b),
        (f"--api-key={b}", b),
        (f"--password {b}", b),
        (f"host=db user=rl password={b}", b),
        (f"https://host/cb?access_token={b}&x=1", b),
        (f"-----BEGIN PRIVATE KEY-----\n{b}\n-----END PRIVATE KEY-----", b),
    ]
    return draw(st.sampled_from(shapes))


@st.composite
def secret_values(draw: st.DrawFn) -> tuple[Any, str]:
    """A value to put under a secret-named key and what of it must never be printed."""
    b = _body(draw, draw(st.integers(10, 30)))
    number = draw(st.integers(10**8, 10**12))
    kind = draw(st.sampled_from(["str", "int", "date", "list", "mapping", "credential"]))
    if kind == "int":
        return number, str(number)
    if kind == "date":  # YAML reads 2024-01-01 as a date
        day = draw(st.dates(datetime.date(1990, 1, 1), datetime.date(2089, 12, 31)))
        return day, day.isoformat()
    if kind == "list":
        return [b], b
    if kind == "mapping":
        return {draw(st.sampled_from(["value", "v", "data"])): b}, b
    if kind == "credential":
        return draw(credentials())
    return b, b


def _mappings(node: Any) -> Iterator[dict[str, Any]]:
    if isinstance(node, dict):
        yield node
        for v in node.values():
            yield from _mappings(v)
    elif isinstance(node, list):
        for item in node:
            yield from _mappings(item)


def _leaves(node: Any) -> Iterator[tuple[Any, Any]]:
    """(container, key or index) of every scalar."""
    items = node.items() if isinstance(node, dict) else enumerate(node)
    for k, v in list(items):
        if isinstance(v, dict | list):
            yield from _leaves(v)
        else:
            yield node, k


@st.composite
def planted_specs(draw: st.DrawFn) -> tuple[dict[str, Any], list[str]]:
    """A random example spec with 1-3 secrets planted at random places."""
    doc = copy.deepcopy(draw(st.sampled_from(BASES)))
    doc["metadata"].setdefault("labels", {})
    planted: list[str] = []
    for _ in range(draw(st.integers(1, 3))):
        how = draw(st.sampled_from(["key", "key", "replace", "insert"]))
        if how == "replace":
            leaves = list(_leaves(doc))
            container, k = draw(st.sampled_from(leaves))
            value, secret = draw(credentials())
            container[k] = value
        else:
            target = draw(st.sampled_from(list(_mappings(doc))))
            if how == "key":
                key = draw(secret_keys())
                value, secret = draw(secret_values())
            else:
                key = draw(st.sampled_from(["note", "extra_args", "url", "value", "x"]))
                value, secret = draw(credentials())
            target[key] = value
        planted.append(secret)
    return doc, planted


def _found(outputs: list[str], planted: list[str]) -> list[str]:
    return [s for s in planted for text in outputs if s in text]


TRIED = {"validate": 0, "logging": 0}


@settings(
    max_examples=N,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(planted_specs())
def test_sarl_validate_prints_no_planted_secret(case: tuple[dict[str, Any], list[str]]) -> None:
    doc, planted = case
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "spec.yaml"
        path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
        result = CliRunner().invoke(app, ["validate", str(path)])
    TRIED["validate"] += 1
    outputs = [result.stdout, result.stderr, repr(result.exception or "")]
    assert _found(outputs, planted) == []
    assert result.exit_code == 2, "a planted secret was accepted"  # refused, not only redacted


@pytest.fixture(scope="module")
def store() -> Iterator[Path]:
    with tempfile.TemporaryDirectory() as tmp:
        yield Path(tmp)


def _smuggled(base: Experiment, pairs: list[tuple[str, Any]], creds: list[str]) -> Experiment:
    """``base`` with the planted values put in without validation (``model_copy``)."""
    spec = base.spec
    tags = {**spec.tracking.tags, **{k: str(v) for k, v in pairs}}
    tags.update({f"note{i}": c for i, c in enumerate(creds)})
    labels = {**base.metadata.labels, **{k: str(v) for k, v in pairs}}
    storage = spec.storage.model_copy(update={"endpoint_url": creds[0]})
    spec = spec.model_copy(
        update={"tracking": spec.tracking.model_copy(update={"tags": tags}), "storage": storage}
    )
    metadata = base.metadata.model_copy(update={"labels": labels})
    return base.model_copy(update={"spec": spec, "metadata": metadata})


@settings(
    max_examples=max(5, N // 6),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    pairs=st.lists(st.tuples(secret_keys(), secret_values()), min_size=1, max_size=3),
    creds=st.lists(credentials(), min_size=1, max_size=3),
)
def test_local_run_logs_no_planted_secret(
    store: Path, pairs: list[tuple[str, tuple[Any, str]]], creds: list[tuple[str, str]]
) -> None:
    from mlflow import MlflowClient

    base = load_experiment(EXAMPLES / "local-ground-truth.yaml")
    exp = _smuggled(base, [(k, v) for k, (v, _) in pairs], [c for c, _ in creds])
    planted = [s for _, (_, s) in pairs] + [s for _, s in creds]
    uri = default_tracking_uri(store)
    options = LocalOptions(workdir=store)
    session = LocalSession(exp, options, uri, str(store / "ckpt"), rewards=[])
    tracker = session._tracker(None)  # what train() calls to start the run and log the spec
    tracker.finish()
    client = MlflowClient(uri)
    run = client.get_run(tracker.run_id)
    artifact = Path(client.download_artifacts(tracker.run_id, SPEC_ARTIFACT, str(store)))
    TRIED["logging"] += 1
    logged = [
        *run.data.params.keys(),
        *run.data.params.values(),
        *run.data.tags.keys(),
        *run.data.tags.values(),
        artifact.read_text(encoding="utf-8"),
    ]
    assert _found(logged, planted) == []
