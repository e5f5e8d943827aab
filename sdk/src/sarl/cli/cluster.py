"""``sarl submit|status|logs|delete|wait``: Experiments and Studies on a Kubernetes cluster.

Registered by ``sarl.cli.main``; each command is a thin wrapper over
:class:`sarl.cluster.ClusterClient` (``kubernetes`` is imported only when a command runs).
What ``status`` prints is drawn by :mod:`sarl.cli.cluster_views`.
Every command takes ``--kubeconfig``/``--context`` and ``-n/--namespace`` (default: the
context's namespace). Exit codes: 0 ok; 1 cluster or API error, or the Experiment (Study) ended
``Failed`` (``wait``, ``submit --wait``), one ``error:`` line on stderr; 2 invalid spec or usage.

``submit --set KEY=VALUE`` edits the document before it is validated (as ``sarl run``).
Studies: ``submit`` dispatches on the document's ``kind``. ``status``, ``wait`` and ``delete``
take a NAME that is looked up as an Experiment first and, when no Experiment has that name, as
a Study; ``--kind study`` (or ``experiment``) skips the guess. ``status --kind study`` without a
NAME lists Studies.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from sarl.cli.cluster_views import (
    details,
    phase_announcer,
    study_details,
    study_table,
    table,
    wait_progress,
)
from sarl.cli.options import SetOpt, fail
from sarl.cli.render import OperatorEnvOpt

if TYPE_CHECKING:
    from sarl.cluster.client import ClusterClient
    from sarl.cluster.models import ExperimentInfo, StudyInfo


Info = TypeVar("Info")


class Replica(StrEnum):
    master = "master"
    worker = "worker"


class Kind(StrEnum):
    experiment = "experiment"
    study = "study"


KubeconfigOpt = Annotated[
    Path | None,
    typer.Option(
        "--kubeconfig",
        help="Kubeconfig file (default: $KUBECONFIG, ~/.kube/config).",
        metavar="FILE",
        show_default=False,
    ),
]
ContextOpt = Annotated[
    str | None,
    typer.Option("--context", help="Kubeconfig context.", metavar="NAME", show_default=False),
]
NamespaceOpt = Annotated[
    str | None,
    typer.Option(
        "--namespace",
        "-n",
        help="Namespace (default: the context's, else default).",
        metavar="NAME",
        show_default=False,
    ),
]
NameArg = Annotated[
    str, typer.Argument(help="Experiment (or Study) name.", metavar="NAME", show_default=False)
]
KindOpt = Annotated[
    Kind | None,
    typer.Option(
        "--kind",
        help="What NAME is (default: an Experiment of that name, else a Study).",
        show_default=False,
    ),
]
TimeoutOpt = Annotated[
    float, typer.Option("--timeout", help="Seconds to wait at most.", min=0, metavar="SECONDS")
]
IntervalOpt = Annotated[
    float,
    typer.Option("--interval", help="Seconds between status polls.", min=0.01, metavar="SECONDS"),
]


@contextmanager
def _named(path: Path | None) -> Iterator[None]:
    """Put the file's name in front of a SpecError that lacks it (a document edited with
    ``--set`` is validated as a mapping, which has no name)."""
    from sarl.spec.loader import SpecError

    try:
        yield
    except SpecError as e:
        if path is None or str(e).startswith((f"{path}:", "--set")):
            raise
        raise SpecError(f"{path}: {e}") from e


@contextmanager
def _errors() -> Iterator[None]:
    """SpecError/ValueError → exit 2, ClusterError → exit 1; one line on stderr, no traceback."""
    from sarl.cluster.errors import ClusterError
    from sarl.spec.loader import SpecError

    try:
        yield
    except (SpecError, ValueError) as e:
        raise fail(str(e)) from e
    except ClusterError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(code=1) from e


def _client(kubeconfig: Path | None, context: str | None, namespace: str | None) -> ClusterClient:
    from sarl.cluster.client import ClusterClient

    return ClusterClient(kubeconfig=kubeconfig, context=context, namespace=namespace)


def _find(
    client: ClusterClient, name: str, namespace: str | None, kind: Kind | None
) -> ExperimentInfo | StudyInfo:
    """The Experiment or Study ``name`` (see the module docstring for the lookup order)."""
    from sarl.cluster.errors import CrdNotInstalled, ExperimentNotFound, StudyNotFound

    if kind is Kind.study:
        return client.get_study(name, namespace=namespace)
    try:
        return client.get(name, namespace=namespace)
    except ExperimentNotFound as missing:
        if kind is Kind.experiment:
            raise
        try:
            return client.get_study(name, namespace=namespace)
        except CrdNotInstalled:
            # No Studies on this cluster: NAME was meant as an Experiment.
            raise missing from missing.__cause__
        except StudyNotFound as e:
            ns = namespace or client.namespace
            raise ExperimentNotFound(
                f"experiment or study {name} not found in namespace {ns}"
            ) from e


def _kind_of(info: ExperimentInfo | StudyInfo) -> Kind:
    from sarl.cluster.models import StudyInfo

    return Kind.study if isinstance(info, StudyInfo) else Kind.experiment


def _wait_and_report(
    client: ClusterClient,
    name: str,
    namespace: str,
    until: str | None,
    timeout: float,
    interval: float,
    kind: Kind = Kind.experiment,
) -> None:
    """Wait, print the final phase; exit 1 if it ended Failed."""
    info: ExperimentInfo | StudyInfo
    with wait_progress(name) as on_poll:
        wait: Any = client.wait_study if kind is Kind.study else client.wait
        info = wait(
            name,
            namespace=namespace,
            until=until,
            timeout=timeout,
            poll_interval=interval,
            on_poll=on_poll,
        )
    if info.phase == "Failed":
        why = info.status.failure_message()
        typer.echo(f"error: {kind.value} {name} Failed" + (f": {why}" if why else ""), err=True)
        raise typer.Exit(code=1)
    typer.echo(f"{kind.value} {name} {info.status.summary()}")


def _create_or_replace(
    create: Callable[[], Info], replace_it: Callable[[], Info], replace: bool
) -> tuple[Info, str]:
    """``create()``; a name taken → ``AlreadyExists``, or with ``replace`` ``replace_it()``.
    Returns the Info and what was done (``created``/``replaced``)."""
    from sarl.cluster.errors import AlreadyExists

    try:
        return create(), "created"
    except AlreadyExists:
        if not replace:
            raise
        return replace_it(), "replaced"


def _submit_study(
    path: Path | dict[str, Any],
    namespace: str | None,
    replace: bool,
    wait: bool,
    timeout: float,
    interval: float,
    kubeconfig: Path | None,
    context: str | None,
) -> None:
    from sarl.cluster.documents import load_study_for_cluster

    study, _ = load_study_for_cluster(path)  # invalid → exit 2 before any connection
    client = _client(kubeconfig, context, namespace)
    info, action = _create_or_replace(
        lambda: client.submit_study(study, namespace=namespace),
        lambda: client.replace_study(study, namespace=namespace),
        replace,
    )
    spec = study.spec
    at_once = f"at most {spec.parallelism} at once" if spec.parallelism else "all at once"
    typer.echo(
        f"study {info.name} {action} in namespace {info.namespace}: "
        f"{len(spec.arms) * len(spec.seeds)} runs ({len(spec.arms)} arms x "
        f"{len(spec.seeds)} seeds), {at_once}"
    )
    if wait:
        _wait_and_report(
            client, info.name, info.namespace, None, timeout, interval, kind=Kind.study
        )


def submit_command(
    experiment: Annotated[
        Path,
        typer.Argument(
            help="Experiment or Study YAML (apiVersion sarl.dev/v1alpha1).",
            metavar="FILE",
            show_default=False,
        ),
    ],
    sets: SetOpt = None,
    namespace: NamespaceOpt = None,
    replace: Annotated[
        bool,
        typer.Option("--replace", help="Replace the spec of an existing Experiment (Study)."),
    ] = False,
    wait: Annotated[
        bool, typer.Option("--wait", help="Wait until it Succeeded (exit 0) or Failed (exit 1).")
    ] = False,
    timeout: TimeoutOpt = 86400.0,
    interval: IntervalOpt = 10.0,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="Print the objects the operator would create and the resource plan; create "
            "nothing, need no cluster (see also sarl render).",
        ),
    ] = False,
    operator_env: OperatorEnvOpt = None,
) -> None:
    """Validate an Experiment (or a Study: every arm x seed) and create it on the cluster."""
    from sarl.cluster.documents import load_for_cluster
    from sarl.spec.overrides import load_with_sets
    from sarl.spec.study import is_study_document

    if dry_run:
        from sarl.cli.render import dry_run as print_dry_run

        print_dry_run(experiment, sets, namespace, env_file=operator_env)
        return
    if operator_env is not None:
        raise fail("--operator-env is for --dry-run (on a cluster the operator uses its own)")
    with _errors(), _named(experiment if sets else None):
        source: Path | dict[str, Any] = experiment
        data, _ = load_with_sets(experiment, sets)
        if sets:
            source = data  # validated as edited; errors get the file's name from _named
        if is_study_document(data):
            _submit_study(source, namespace, replace, wait, timeout, interval, kubeconfig, context)
            return
        exp, _ = load_for_cluster(source)  # invalid → exit 2 before any connection
        client = _client(kubeconfig, context, namespace)
        info, action = _create_or_replace(
            lambda: client.submit(exp, namespace=namespace),
            lambda: client.replace(exp, namespace=namespace),
            replace,
        )
        typer.echo(f"experiment {info.name} {action} in namespace {info.namespace}")
        if wait:
            _wait_and_report(client, info.name, info.namespace, None, timeout, interval)


def status_command(
    name: Annotated[
        str | None,
        typer.Argument(
            help="Experiment or Study name (omit to list).", metavar="NAME", show_default=False
        ),
    ] = None,
    namespace: NamespaceOpt = None,
    all_namespaces: Annotated[
        bool, typer.Option("--all-namespaces", "-A", help="List in every namespace.")
    ] = False,
    kind: KindOpt = None,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
) -> None:
    """Show one Experiment or Study in detail, or list them like `kubectl get experiments`.

    With `--kind study`: Studies, with their runs by phase.
    """
    if name and all_namespaces:
        raise fail("give a NAME or --all-namespaces, not both")
    from sarl.cluster.models import StudyInfo

    with _errors():
        client = _client(kubeconfig, context, namespace)
        if name:
            info = _find(client, name, namespace, kind)
            if isinstance(info, StudyInfo):
                runs = client.study_runs(name, namespace=info.namespace)
                typer.echo(study_details(info, runs))
            else:
                typer.echo(details(info))
            return
        if kind is Kind.study:
            studies = client.list_studies(namespace=namespace, all_namespaces=all_namespaces)
        else:
            infos = client.list(namespace=namespace, all_namespaces=all_namespaces)
    found = studies if kind is Kind.study else infos
    if not found:
        where = "any namespace" if all_namespaces else f"namespace {namespace or client.namespace}"
        noun = "studies" if kind is Kind.study else "experiments"
        typer.echo(f"No {noun} found in {where}.", err=True)
        return
    if kind is Kind.study:
        typer.echo(study_table(studies, with_namespace=all_namespaces))
    else:
        typer.echo(table(infos, with_namespace=all_namespaces))


def logs_command(
    name: NameArg,
    namespace: NamespaceOpt = None,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Stream new lines.")] = False,
    tail: Annotated[
        int | None, typer.Option("--tail", help="Only the last N lines.", min=0, metavar="N")
    ] = None,
    replica: Annotated[Replica, typer.Option("--replica", help="PyTorchJob replica.")] = (
        Replica.master
    ),
    index: Annotated[int, typer.Option("--index", help="Replica index.", min=0, metavar="N")] = 0,
    pod_timeout: Annotated[
        float | None,
        typer.Option(
            "--pod-timeout",
            help="Seconds to wait for the pod to start (default: 600 with -f, else 0).",
            min=0,
            metavar="SECONDS",
            show_default=False,
        ),
    ] = None,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
) -> None:
    """Print the training pod's log (the PyTorchJob's master by default)."""
    with _errors():
        client = _client(kubeconfig, context, namespace)
        wait = pod_timeout if pod_timeout is not None else (600.0 if follow else 0.0)
        lines = client.logs(
            name,
            namespace=namespace,
            follow=follow,
            tail=tail,
            replica=replica.value,
            index=index,
            wait=wait,
            on_wait=phase_announcer(f"waiting for the {replica.value} pod of {name}"),
        )
        try:
            for line in lines:
                typer.echo(line)
        except KeyboardInterrupt:
            raise typer.Exit(code=130) from None


def delete_command(
    name: NameArg,
    namespace: NamespaceOpt = None,
    wait: Annotated[
        bool, typer.Option("--wait", help="Return once it and its children are gone.")
    ] = False,
    timeout: TimeoutOpt = 300.0,
    kind: KindOpt = None,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
) -> None:
    """Delete an Experiment or a Study, and what it owns.

    An Experiment's ConfigMap, PyTorchJob and InferenceServices go with it.
    A Study's Experiments, ConfigMap and report Job go with it.
    """
    with _errors():
        client = _client(kubeconfig, context, namespace)
        if kind is None:
            kind = _kind_of(_find(client, name, namespace, kind))
        if kind is Kind.study:
            client.delete_study(name, namespace=namespace, wait=wait, timeout=timeout)
        else:
            client.delete(name, namespace=namespace, wait=wait, timeout=timeout)
    ns = namespace or client.namespace
    typer.echo(f"{kind.value} {name} deleted from namespace {ns}")


def wait_command(
    name: NameArg,
    namespace: NamespaceOpt = None,
    until: Annotated[
        str | None,
        typer.Option(
            "--for",
            help="Phase to wait for (default: Succeeded or Failed).",
            metavar="PHASE",
            show_default=False,
        ),
    ] = None,
    timeout: TimeoutOpt = 3600.0,
    interval: IntervalOpt = 5.0,
    kind: KindOpt = None,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
) -> None:
    """Wait for an Experiment's (or Study's) phase.

    Exits 1 if it ends Failed or the timeout passes.
    """
    from sarl.cluster.waiting import wanted_phases

    with _errors():
        wanted_phases(until)  # a typo in --for is a usage error (2), before connecting
        client = _client(kubeconfig, context, namespace)
        if kind is None:
            kind = _kind_of(_find(client, name, namespace, kind))
        ns = namespace or client.namespace
        _wait_and_report(client, name, ns, until, timeout, interval, kind=kind)
