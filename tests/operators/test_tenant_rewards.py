"""A reward a tenant names by import path is never imported by the operator or its webhook, and
nothing a spec makes validation raise stops them (issue 36, item 1).

Reward modules planted on ``sys.path`` write a marker file when imported and then raise
``SystemExit``, a ``BaseException`` that is neither ``Exception`` nor ``KeyboardInterrupt``, or
``ImportError`` with a secret in its message. The validation the operator and webhook run
(:func:`sarl_operator.tenant_specs.for_cluster`), the webhook's check
(:func:`sarl_operator.admission.refusal`) and the whole operator process (``kopf run``, against
the in-memory API server of :mod:`tests.support.kube_server`: no real API server can run here,
so it has no controllers and no admission; the Training Operator's part is not needed) must
refuse them naming ``spec.reward[0].name`` without importing them, and keep serving other
tenants. An allow-listed module is accepted without being imported.
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import pytest

from sarl.spec.loader import SpecError, load_experiment, load_study
from sarl_operator.admission import refusal
from sarl_operator.tenant_specs import as_spec_error, for_cluster
from tests.operators.study_cases import small_doc

SECRET: Final = "hunter2-s3cr3t-t0ken"
#: Module name -> what its import raises after writing its marker file.
POISON: Final = {
    "poison_exit": "raise SystemExit(3)",
    "poison_base": "class Boom(BaseException):\n    pass\nraise Boom('boom')",
    "poison_import": f"raise ImportError('no credentials: {SECRET}')",
}
ALLOWED: Final = "platform_rewards"


def _plant(root: Path) -> Path:
    """The poison modules and an allow-listed package under ``root``; each writes
    ``<root>/imported-<module>`` when imported."""
    for name, body in POISON.items():
        marker = root / f"imported-{name}"
        (root / f"{name}.py").write_text(f"open({str(marker)!r}, 'w').close()\n{body}\n")
    package = root / ALLOWED
    package.mkdir()
    marker = root / f"imported-{ALLOWED}"
    (package / "__init__.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    (package / "math.py").write_text("raise SystemExit(4)\n")
    return root


def _imported(root: Path) -> list[str]:
    return sorted(p.name for p in root.glob("imported-*"))


@pytest.fixture
def planted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    root = _plant(tmp_path)
    monkeypatch.syspath_prepend(str(root))
    yield root
    assert not (set(POISON) | {ALLOWED}) & set(sys.modules)


def experiment(reward: str, name: str = "exp") -> dict[str, Any]:
    return {
        "apiVersion": "sarl.dev/v1alpha1",
        "kind": "Experiment",
        "metadata": {"name": name, "namespace": "team-a"},
        "spec": {"reward": [{"name": reward, "settings": {"weight_of": 2}}]},
    }


def study(reward: str, name: str = "st") -> dict[str, Any]:
    doc = small_doc(name)
    doc["spec"]["base"]["reward"] = [{"name": reward}]
    doc["metadata"]["namespace"] = "team-a"
    return doc


ENV: Final = {"SARL_ALLOWED_REWARD_MODULES": ALLOWED}


@pytest.mark.parametrize("module", sorted(POISON))
def test_a_dotted_reward_is_refused_without_import(planted: Path, module: str) -> None:
    with for_cluster(ENV), pytest.raises(SpecError) as refused:
        load_experiment(experiment(f"{module}:Reward"))
    message = str(refused.value)
    assert message.startswith("spec.reward[0].name=")
    assert "sarl rewards" in message and "operator.allowedRewardModules" in message
    assert SECRET not in message
    with for_cluster(ENV), pytest.raises(SpecError, match=r"spec\.base\.reward\[0\]\.name"):
        load_study(study(f"{module}:Reward"))
    assert _imported(planted) == []


@pytest.mark.parametrize(
    "name", [f"{ALLOWED}.math:Score", f"{ALLOWED}:Score", f"{ALLOWED}.deep.er:X"]
)
def test_an_allow_listed_reward_is_accepted_without_import(planted: Path, name: str) -> None:
    with for_cluster(ENV):
        exp = load_experiment(experiment(name))
        study_runs = load_study(study(name)).runs()
    assert exp.spec.reward[0].name == name and exp.spec.reward[0].settings == {"weight_of": 2}
    assert {run.experiment.spec.reward[0].name for run in study_runs} == {name}
    assert _imported(planted) == []


@pytest.mark.parametrize("name", ["platform_rewards_x:Score", "platform:Score", "a b:C", "x:"])
def test_a_prefix_matches_whole_module_components(planted: Path, name: str) -> None:
    with for_cluster(ENV), pytest.raises(SpecError, match=r"^spec\.reward\[0\]\.name="):
        load_experiment(experiment(name))


def test_local_validation_still_imports_dotted_paths(planted: Path) -> None:
    """The user's own process (``sarl run``, notebooks) imports as before."""
    with pytest.raises(SpecError, match="cannot import"):
        load_experiment(experiment("poison_import:Reward"))
    assert _imported(planted) == ["imported-poison_import"]


@pytest.mark.parametrize("module", sorted(POISON))
@pytest.mark.parametrize("kind", ["Experiment", "Study"])
def test_the_webhook_refuses_naming_the_field(planted: Path, module: str, kind: str) -> None:
    body = (experiment if kind == "Experiment" else study)(f"{module}:Reward")
    refused = refusal(body, "CREATE", None, ENV)
    assert refused is not None and "reward[0].name=" in refused and SECRET not in refused
    assert _imported(planted) == []


def test_the_webhook_refuses_an_invalid_spec_and_admits_an_allow_listed_reward(
    planted: Path,
) -> None:
    broken = experiment("structure")
    broken["spec"]["algorithm"] = {"name": "no-such-algorithm"}
    assert (refusal(broken, "CREATE", None, ENV) or "").startswith("spec.algorithm.name=")
    good = experiment(f"{ALLOWED}.math:Score")
    good["spec"]["reward"][0]["settings"] = {}
    assert refusal(good, "CREATE", None, ENV) is None
    assert refusal(copy.deepcopy(good), "UPDATE", good, ENV) is None


class _Stop(BaseException):
    pass


@pytest.mark.parametrize(
    ("error", "message"),
    [
        (SystemExit(3), "spec could not be validated: SystemExit"),
        (_Stop(SECRET), "spec could not be validated: _Stop"),
        (RecursionError(SECRET), "spec could not be validated: RecursionError"),
        (ValueError("spec.x=1: bad"), "spec.x=1: bad"),
    ],
)
def test_any_exception_becomes_a_spec_error(error: BaseException, message: str) -> None:
    assert str(as_spec_error(error)) == message


@pytest.mark.parametrize("error", [KeyboardInterrupt(), __import__("asyncio").CancelledError()])
def test_what_stops_the_operator_passes(error: BaseException) -> None:
    with pytest.raises(type(error)):
        as_spec_error(error)
