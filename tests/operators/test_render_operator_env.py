"""``sarl render`` and ``sarl submit --dry-run`` with ``--operator-env FILE``: the objects a real
install's operator would create, built with the settings it reads from its Deployment's
environment (issue 40 item 3, "exactly what the operator's builders produce").

The file is what ``kubectl -n sarl set env deployment -l app.kubernetes.io/component=operator,...
--list`` prints (kubernetes/kubectl v0.34.0 ``pkg/cmd/set/set_env.go``: a ``# deployments/NAME,
container C`` header, ``NAME=VALUE`` lines, ``# NAME from secret S, key K`` for a ``valueFrom``
entry). The oracle composes the objects from the builder functions the handlers call, with
``Settings.from_env`` of the same variables. The command is the real CLI (typer's runner, in
process: nothing here needs a cluster or the network).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

import pytest
import yaml
from typer.testing import CliRunner

from sarl.cli.main import app
from sarl.cluster.documents import experiment_body, load_for_cluster
from sarl.plan import store_capacity_from_env
from sarl.rewards.cluster_names import validating_for_cluster
from sarl.spec.experiment import Experiment
from sarl.spec.overrides import load_with_sets
from sarl_operator import scheduling
from sarl_operator.experiment_handlers import experiment_from_body
from sarl_operator.reconcile import Settings
from tests.operators.cases import ROOT
from tests.operators.test_render import _children

SPEC: Final = ROOT / "examples" / "sarl-grpo-math.yaml"
NS: Final = "default"
#: Two nodes: a gang scheduler applies to multi-node PyTorchJobs only.
SETS: Final = ["spec.resources.nodes=2"]
ENV: Final = {
    "SARL_MLFLOW_TRACKING_URI": "http://sarl-mlflow.sarl-system.svc:5000",
    "SARL_S3_ENDPOINT_URL": "http://sarl-minio.sarl-system.svc:9000",
    "SARL_S3_BUCKET": "team-bucket",
    "SARL_S3_CREDENTIALS_SECRET": "sarl-s3",
    "SARL_DEFAULT_QUEUE": "team-a",
    "SARL_GANG_SCHEDULER": "volcano",
    "SARL_TRAINER_IMAGE": "registry.example.com/sarl/sarl-verl:9.9.9",
    "SARL_STATUS_INTERVAL_S": "30",
}
#: As kubectl prints the Deployment's env: its header and valueFrom entries are comments.
LISTED: Final = "\n".join(
    [
        "# deployments/sarl-sarl-platform-operator, container operator",
        "# SARL_OPERATOR_NAMESPACE from field path metadata.namespace",
        *(f"{k}={v}" for k, v in ENV.items()),
        "# MLFLOW_TRACKING_PASSWORD from secret sarl-mlflow-auth, key password",
        "",
    ]
)


def _invoke(*args: str) -> Any:
    return CliRunner().invoke(app, list(args))


def _env_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "operator.env"
    path.write_text(text)
    return path


def _documents(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d is not None]


def _oracle(settings: Settings) -> list[dict[str, Any]]:
    """The stored Experiment and its children as reconcile builds them with ``settings``."""
    data, _ = load_with_sets(SPEC, SETS)
    exp, spec = load_for_cluster(data)
    body = experiment_body(exp, NS, spec)
    platform = settings.platform
    with validating_for_cluster(()):  # no SARL_ALLOWED_REWARD_MODULES: the allow-list is empty
        seen: Experiment = experiment_from_body(body, platform)
    return [body, *_children(seen, "PyTorchJob", settings)]


def _env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


def test_render_builds_with_the_operators_environment(tmp_path: Path) -> None:
    env_file = _env_file(tmp_path, LISTED)
    sets = [a for s in SETS for a in ("--set", s)]
    args = ["render", str(SPEC), *sets, "--job-kind", "PyTorchJob", "--operator-env"]
    result = _invoke(*args, str(env_file))
    assert result.exit_code == 0, result.stderr
    docs = _documents(result.stdout)
    settings = Settings.from_env(ENV)
    assert docs == _oracle(settings)
    (job,) = [d for d in docs if d["kind"] == "PyTorchJob"]
    assert job["metadata"]["labels"][scheduling.QUEUE_LABEL] == "team-a"
    assert job["spec"]["runPolicy"]["schedulingPolicy"] == {"minAvailable": 2}
    for replica in job["spec"]["pytorchReplicaSpecs"].values():
        pod = replica["template"]["spec"]
        assert pod["schedulerName"] == "volcano"
        (trainer,) = [c for c in pod["containers"] if c["name"] == "pytorch"]
        env = _env_of(trainer)
        assert env["AWS_ENDPOINT_URL"] == ENV["SARL_S3_ENDPOINT_URL"]
        assert env["AWS_ACCESS_KEY_ID"]["secretKeyRef"]["name"] == "sarl-s3"
        assert trainer["image"] == ENV["SARL_TRAINER_IMAGE"]
    # The same command without the file builds something else: the option is what changed it.
    plain = _invoke(*args[:-1])
    assert plain.exit_code == 0, plain.stderr
    assert _documents(plain.stdout) == _oracle(Settings()) != docs


def test_submit_dry_run_names_the_file_in_its_notes(tmp_path: Path) -> None:
    env_file = _env_file(tmp_path, LISTED)
    result = _invoke("submit", "--dry-run", str(SPEC), "--operator-env", str(env_file))
    assert result.exit_code == 0, result.stderr
    assert f"# operator settings: from {env_file} " in result.stdout
    assert "its defaults" not in result.stdout
    (job,) = [d for d in _documents(result.stdout) if d["kind"] == "TrainJob"]
    assert job["metadata"]["labels"][scheduling.QUEUE_LABEL] == "team-a"


def test_without_the_file_the_notes_say_how_to_get_it(tmp_path: Path) -> None:
    result = _invoke("submit", "--dry-run", str(SPEC))
    assert result.exit_code == 0, result.stderr
    assert "--operator-env FILE reads them from 'kubectl -n <namespace> set env" in result.stdout


@pytest.mark.parametrize(
    ("line", "named"),
    [
        ("SARL_GANG_SCHEDULER=gang", "SARL_GANG_SCHEDULER='gang': must be one of none, "),
        ("SARL_STORE_CAPACITY=lots", "SARL_STORE_CAPACITY: 'lots' is not a Kubernetes quantity"),
        ("SARL_STATUS_INTERVAL_S=0", "SARL_STATUS_INTERVAL_S='0': must be > 0"),
        ("SARL_TENANTS={bad", "SARL_TENANTS: not a valid tenants policy"),
        ("SARL_ALLOWED_REWARD_MODULES=9bad", "SARL_ALLOWED_REWARD_MODULES: '9bad' is not a "),
    ],
)
@pytest.mark.parametrize("command", [["render"], ["submit", "--dry-run"]])
def test_a_value_the_operator_refuses_is_one_line_naming_it(
    tmp_path: Path, command: list[str], line: str, named: str
) -> None:
    env_file = _env_file(tmp_path, f"{LISTED}{line}\n")
    result = _invoke(*command, str(SPEC), "--operator-env", str(env_file))
    assert result.exit_code == 2
    assert result.stderr.startswith(f"error: {env_file}: {named}")
    assert "fix the chart value that sets it" in result.stderr
    assert len(result.stderr.splitlines()) == 1 and result.stdout == ""


def test_no_credential_is_echoed(tmp_path: Path) -> None:
    """A URL's userinfo, and the value of a credential-named variable, even where it was pasted
    into another variable the operator refuses."""
    password = "plainword42"
    text = (
        f"MLFLOW_TRACKING_PASSWORD={password}\nSARL_GANG_SCHEDULER={password}\n"
        "SARL_HF_ENDPOINT=https://bob:hunter2Secret@mirror.example\n"
    )
    for lines, named in [(text, "SARL_GANG_SCHEDULER="), (text.split("\n", 2)[2], "SARL_HF_")]:
        result = _invoke("render", str(SPEC), "--operator-env", str(_env_file(tmp_path, lines)))
        assert result.exit_code == 2 and named in result.stderr
        assert password not in result.stderr and "hunter2Secret" not in result.stderr


def test_a_malformed_line_is_named_by_its_number_not_its_content(tmp_path: Path) -> None:
    """kubectl prints a value with a newline as several lines: the second is not NAME=VALUE
    and may be a key, so it is named by number only."""
    key = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC"
    env_file = _env_file(tmp_path, f"{LISTED}SARL_TENANTS=-----BEGIN\n{key}\n")
    result = _invoke("render", str(SPEC), "--operator-env", str(env_file))
    assert result.exit_code == 2
    number = len(LISTED.splitlines()) + 2
    assert result.stderr.startswith(f"error: {env_file}:{number}: not a NAME=VALUE line ")
    assert key not in result.stderr and len(result.stderr.splitlines()) == 1


def test_the_operator_refuses_a_custom_reward_its_allow_list_lacks(tmp_path: Path) -> None:
    """With the install's environment the operator's reward allow-list applies (empty here,
    as the chart's default): the example's dotted reward is refused, as the operator would."""
    custom = ROOT / "examples" / "custom_reward" / "cluster.yaml"
    refused = _invoke("render", str(custom), "--operator-env", str(_env_file(tmp_path, LISTED)))
    assert refused.exit_code == 2 and "SARL_ALLOWED_REWARD_MODULES" in refused.stderr
    allowed = _env_file(tmp_path, f"{LISTED}SARL_ALLOWED_REWARD_MODULES=answer_length_reward\n")
    assert _invoke("render", str(custom), "--operator-env", str(allowed)).exit_code == 0


@pytest.mark.parametrize(
    ("line", "sets", "refused"),
    [
        (
            "SARL_ALLOWED_IMAGE_REGISTRIES=registry.internal/ml",
            ["spec.resources.image=docker.io/evil/x:1"],
            "spec.resources.image='docker.io/evil/x:1': registry not allowed",
        ),
        ("SARL_STORE_CAPACITY=1Gi", [], "spec.storage.checkpoint_uri: the object store "),
    ],
)
@pytest.mark.parametrize("command", [["render"], ["submit", "--dry-run"]])
def test_what_the_admission_webhook_refuses_is_refused_with_its_message(
    tmp_path: Path, command: list[str], line: str, sets: list[str], refused: str
) -> None:
    """The install's image allow-list and store room are checked as the webhook checks a CREATE
    (``sarl_operator.admission.refusal``): a dry run that printed objects the cluster refuses
    would send the user to a submit that fails. Without the file both render (the defaults
    allow any image and know no store size)."""
    env_file = _env_file(tmp_path, f"{LISTED}{line}\n")
    args = [str(SPEC), *(a for s in sets for a in ("--set", s))]
    result = _invoke(*command, *args, "--operator-env", str(env_file))
    assert result.exit_code == 2, result.stdout
    assert "the platform's admission check refuses it: " in result.stderr
    assert refused in result.stderr and len(result.stderr.splitlines()) == 1
    assert result.stdout == ""
    assert _invoke(*command, *args).exit_code == 0


def test_operator_env_without_dry_run_is_refused(tmp_path: Path) -> None:
    env_file = _env_file(tmp_path, LISTED)
    result = _invoke("submit", str(SPEC), "--operator-env", str(env_file))
    assert result.exit_code == 2
    assert result.stderr == (
        "error: --operator-env is for --dry-run (on a cluster the operator uses its own)\n"
    )


def _listed(deployment: dict[str, Any]) -> str:
    """``kubectl set env --list`` of ``deployment``'s operator container (set_env.go v0.34.0:
    ``NAME=VALUE``, or ``# NAME from ...`` for a ``valueFrom`` entry)."""
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    lines = [f"# deployments/{deployment['metadata']['name']}, container {container['name']}"]
    for e in container["env"]:
        has_value = "valueFrom" not in e
        lines.append(f"{e['name']}={e.get('value', '')}" if has_value else f"# {e['name']} from x")
    return "\n".join([*lines, ""])


GOLDEN_CHARTS: Final = sorted((ROOT / "tests" / "charts" / "golden").glob("sarl-platform-*.yaml"))


@pytest.mark.parametrize("golden", GOLDEN_CHARTS, ids=lambda p: p.stem)
def test_the_charts_operator_environment_renders(tmp_path: Path, golden: Path) -> None:
    """The operator Deployment of each golden chart render (tests/charts/golden, made by
    ``make generate`` from the chart's values files; no helm binary needed here), listed as
    kubectl lists it: rendering with it succeeds and uses its trainer image. Under tenancy
    the namespace matters as it does to the operator (``default`` is refused: not a tenant)."""
    (deployment,) = [
        d
        for d in yaml.safe_load_all(golden.read_text())
        if d and d["kind"] == "Deployment" and d["metadata"]["name"].endswith("-operator")
    ]
    text = _listed(deployment)
    env = {k: v for k, _, v in (line.partition("=") for line in text.splitlines()[1:]) if _}
    env_file = str(_env_file(tmp_path, text))
    # The example's checkpoints (209.8 GiB) do not fit the bundled trial store (20 GiB): the
    # webhook refuses it there, so render does; on an external store (5 TiB, or a store the
    # spec names) it renders.
    capacity = store_capacity_from_env(env)
    if capacity is not None and capacity < 209 * 2**30:
        bundled = _invoke("render", str(SPEC), "-n", "team-a", "--operator-env", env_file)
        assert bundled.exit_code == 2 and "the object store " in bundled.stderr
    external = ["--set", "spec.storage.endpoint_url=https://s3.team-a.example"]
    # team-a: a tenant namespace of the tenants values (elsewhere any namespace will do).
    result = _invoke("render", str(SPEC), *external, "-n", "team-a", "--operator-env", env_file)
    assert result.exit_code == 0, result.stderr
    (job,) = [d for d in _documents(result.stdout) if d["kind"] == "TrainJob"]
    assert Settings.from_env(env).verl_image in str(job)
    if "team-a" in env.get("SARL_TENANTS", ""):  # the operator refuses a namespace not a tenant
        refused = _invoke("render", str(SPEC), *external, "--operator-env", env_file)
        assert refused.exit_code == 2 and "'default' is not a tenant" in refused.stderr
