"""``sarl render FILE`` and ``sarl submit --dry-run``: the objects the operator would create for
an Experiment or a Study, printed without a cluster, a kubeconfig or a network connection.

Wired by :mod:`sarl.cli.main` (``render``) and :func:`sarl.cli.cluster.submit_command`
(``--dry-run``). The objects come from the operator's own builders, which live in the
``sarl-operator`` package: dependencies point into the sdk, never out of it, so the sdk finds
them through the ``sarl.render`` entry point group (``sarl_operator.render:document_objects``)
and never imports the operator by name. Without that package both commands exit 2 naming the
``pip install`` to run. ``render`` prints the objects only (``--output yaml``: documents
separated by ``---``; ``--output json``: a ``List``, as ``kubectl ... -o json`` prints several
objects), so its output can be piped to ``kubectl apply --dry-run=server -f -``; ``submit
--dry-run`` adds the resource plan and what the rendering assumed as YAML comments after the
objects. Both build the objects with the operator's default settings unless ``--operator-env
FILE`` gives the operator Deployment's environment as ``kubectl set env --list`` prints it
(:mod:`sarl.cluster.operator_env`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from enum import StrEnum
from importlib.metadata import entry_points
from pathlib import Path
from typing import Annotated, Any, Final, Protocol

import typer

from sarl.cli.options import SetOpt, fail
from sarl.cluster.operator_env import KUBECTL_LIST, OperatorEnvError, read_operator_env

ENTRY_POINT_GROUP: Final = "sarl.render"
NAMESPACE: Final = "default"


class Output(StrEnum):
    yaml = "yaml"
    json = "json"


class JobKind(StrEnum):
    TrainJob = "TrainJob"
    PyTorchJob = "PyTorchJob"


class Rendered(Protocol):
    """What the ``sarl.render`` entry point returns."""

    objects: list[dict[str, Any]]
    notes: list[str]


Renderer = Callable[..., Rendered]

# Long only: -o is --out FILE in every sarl command (tests/sarl/cli/test_conventions.py).
OutputOpt = Annotated[Output, typer.Option("--output", help="Print the objects as YAML or JSON.")]
JobKindOpt = Annotated[
    JobKind | None,
    typer.Option(
        "--job-kind",
        help="Training job kind; default spec.resources.job_kind (auto: TrainJob where it can "
        "carry the spec, as on a cluster serving both).",
        show_default=False,
    ),
]
OperatorEnvOpt = Annotated[
    Path | None,
    typer.Option(
        "--operator-env",
        help="Render with the settings of a real install's operator: its Deployment's "
        f"environment as '{KUBECTL_LIST} > FILE' writes it (default: the operator's defaults).",
        metavar="FILE",
        show_default=False,
    ),
]
RenderNamespaceOpt = Annotated[
    str,
    typer.Option(
        "--namespace", "-n", help="Namespace the objects are rendered in.", metavar="NAME"
    ),
]


def renderer() -> Renderer:
    """The operator's ``document_objects`` (the ``sarl.render`` entry point); typer.Exit(2)
    naming the package to install when none is."""
    found = list(entry_points(group=ENTRY_POINT_GROUP))
    if not found:
        raise fail(
            "rendering needs the operator's builders: pip install sarl-operator (from this "
            "repository: pip install -e operators)"
        )
    loaded: Renderer = found[0].load()
    return loaded


def _env_arguments(env_file: Path | None) -> dict[str, Any]:
    """The renderer's keyword arguments for ``--operator-env`` (none without it); exit 2 with
    the file's one-line error."""
    if env_file is None:
        return {}
    try:
        env = read_operator_env(env_file)
    except OperatorEnvError as e:
        raise fail(str(e)) from e
    return {"operator_env": env, "operator_env_source": str(env_file)}


def render_objects(
    file: Path,
    sets: list[str] | None,
    namespace: str,
    job_kind: JobKind | None,
    env_file: Path | None = None,
) -> tuple[Rendered, dict[str, Any]]:
    """The rendered objects of ``file`` (edited by ``sets``; with the operator's environment of
    ``env_file``) and the document; exit 2 with the spec's or the environment's one-line
    error when it is invalid."""
    from sarl.spec.overrides import load_with_sets

    render = renderer()
    with_env = _env_arguments(env_file)
    try:
        data, _ = load_with_sets(file, sets)
        source: Path | dict[str, Any] = data if sets else file
        kind = None if job_kind is None else job_kind.value
        return render(source, namespace, job_kind=kind, **with_env), data
    except OperatorEnvError as e:  # a value the operator refuses; its message names the file
        raise fail(
            f"{e} (the operator fails on this value too: fix the chart value that sets it)"
        ) from e
    except ValueError as e:  # SpecError included; a builder refusing a field for the kind
        message = str(e)
        # A document edited with --set is validated as a mapping, which has no name.
        named = message if message.startswith((f"{file}:", "--set")) else f"{file}: {message}"
        raise fail(named) from e


def dump(objects: list[dict[str, Any]], output: Output) -> str:
    """``objects`` as ``kubectl`` prints several: YAML documents, or a JSON ``List``."""
    if output is Output.json:
        return json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}, indent=2)
    import yaml

    class _Plain(yaml.SafeDumper):
        """No ``&id001`` anchors for objects the builders share between containers."""

        def ignore_aliases(self, data: Any) -> bool:
            return True

    return yaml.dump_all(objects, Dumper=_Plain, sort_keys=False).rstrip("\n")


def render_command(
    file: Annotated[
        Path,
        typer.Argument(help="Experiment or Study YAML.", metavar="FILE", show_default=False),
    ],
    output: OutputOpt = Output.yaml,
    namespace: RenderNamespaceOpt = NAMESPACE,
    job_kind: JobKindOpt = None,
    sets: SetOpt = None,
    operator_env: OperatorEnvOpt = None,
) -> None:
    """Print the objects the operator would create for FILE, without a cluster.

    Exactly as the operator's builders produce them:
    the stored Experiment (or the Study and its arm x seed Experiments);
    ConfigMaps, NetworkPolicies and InferenceServices;
    the training job (TrainJob or PyTorchJob), the evaluation Job and a Study's report Job."""
    rendered, _ = render_objects(file, sets, namespace, job_kind, operator_env)
    typer.echo(dump(rendered.objects, output))


def dry_run(
    file: Path,
    sets: list[str] | None,
    namespace: str | None,
    job_kind: JobKind | None = None,
    env_file: Path | None = None,
) -> None:
    """``sarl submit --dry-run``: the objects as YAML, then the resource plan and the notes as
    comments; creates nothing and reads no kubeconfig."""
    from sarl.plan import plan_experiment, plan_study
    from sarl.plan.render import experiment_text, study_text
    from sarl.rewards.cluster_names import validating_for_cluster
    from sarl.spec.loader import validate_document, validate_study
    from sarl.spec.study import is_study_document

    rendered, data = render_objects(file, sets, namespace or NAMESPACE, job_kind, env_file)
    with validating_for_cluster(None):  # as submit validates: a dotted reward is not imported
        if is_study_document(data):
            text = study_text(plan_study(validate_study(data, str(file))))
        else:
            text = experiment_text(plan_experiment(validate_document(data, str(file))))
    comments = [f"# {line}".rstrip() for line in ["dry run: nothing was created", *rendered.notes]]
    comments += ["#", *(f"# {line}".rstrip() for line in text.splitlines())]
    typer.echo(dump(rendered.objects, Output.yaml))
    typer.echo("\n".join(["---", *comments]))
