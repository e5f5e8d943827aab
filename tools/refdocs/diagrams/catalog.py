"""The site's diagrams, each one declarative description, and the file each is drawn into
(read by tools.refdocs.diagrams.__main__ and tests/docs/test_diagrams.py).

The cluster flowchart and the submit sequence say what docs/concepts/cluster.md and
docs/architecture.md explain in their step-by-step lists; the imports graph is computed from
the source by tools.refdocs.imports_ref, the same edges docs/reference/imports.md tabulates.
"""

from __future__ import annotations

from pathlib import Path

from tools.refdocs.diagrams.model import Diagram, Edge, Graph, Message, Node, Participant, Sequence
from tools.refdocs.imports_ref import PRODUCTS_SVG, product_edges, products_alt

ROOT = Path(__file__).resolve().parents[3]
#: where the pictures live, relative to the repository root
ASSETS = Path("docs/assets/diagrams")


def imports_graph(root: Path) -> Graph:
    """The product packages and the imports between them, read from ``root``'s source."""
    edges = product_edges(root)
    sources = sorted(a for a in edges if edges[a])
    nodes = [Node(name, name) for name in sources]
    nodes += [Node(name, name) for name in sorted(edges) if name not in sources]
    return Graph(
        PRODUCTS_SVG.removesuffix(".svg"),
        products_alt(edges),
        tuple(nodes),
        tuple(Edge(a, b) for a in sources for b in sorted(edges[a])),
    )


CLUSTER = Graph(
    "cluster",
    "What runs where: sarl submit or kubectl apply passes the admission webhook and creates an "
    "Experiment or Study; the operator creates the ConfigMap, the InferenceServices, the "
    "PyTorchJob or TrainJob and the evaluation Job; the training job calls the "
    "InferenceServices and writes to the MLflow run and the S3 checkpoints, as does the "
    "evaluation Job.",
    (
        Node("user", "sarl submit / kubectl apply", 0),
        Node("webhook", "admission webhook", 0),
        Node("exp", "Experiment / Study", 0),
        Node("op", "operator (kopf)", 0),
        Node("cm", "ConfigMap <name>-config", 1),
        Node("isvc", "InferenceServices: embedding, judge (KServe)", 1),
        Node("job", "PyTorchJob or TrainJob (verl or TRL)", 1),
        Node("ev", "evaluation Job <name>-eval", 1),
        Node("mlflow", "MLflow run", 2),
        Node("s3", "S3 checkpoints", 2),
    ),
    (
        Edge("user", "webhook"),
        Edge("webhook", "exp"),
        Edge("exp", "op"),
        Edge("op", "cm"),
        Edge("op", "isvc"),
        Edge("op", "job"),
        Edge("op", "ev"),
        Edge("job", "isvc"),
        Edge("job", "mlflow"),
        Edge("job", "s3"),
        Edge("ev", "s3"),
        Edge("ev", "mlflow"),
    ),
)

_P = Participant
_M = Message
SUBMIT = Sequence(
    "submit",
    "How a submitted Experiment travels, in 16 numbered messages: the user submits it to the "
    "Kubernetes API, the admission webhook validates it, the operator gets the MLflow run, "
    "creates the ConfigMap, the InferenceServices and the training job; the job embeds steps, "
    "logs to MLflow and checkpoints to S3; the operator reports status and starts the "
    "evaluation Job, which reads the last checkpoint and logs eval metrics into the same run.",
    (
        _P("user", "User"),
        _P("api", "Kubernetes API"),
        _P("webhook", "Admission webhook"),
        _P("op", "sarl operator"),
        _P("mlflow", "MLflow"),
        _P("kserve", "Inference services (KServe)"),
        _P("job", "Training job (verl / TRL)"),
        _P("s3", "Object store (S3 / MinIO)"),
        _P("eval", "Evaluation Job"),
    ),
    (
        _M("user", "api", "sarl submit experiment.yaml (Experiment CR)"),
        _M("api", "webhook", "validate: spec, images, resource plan"),
        _M("webhook", "api", "allowed, or refused with the field named", reply=True),
        _M("api", "op", "Experiment created"),
        _M("op", "mlflow", "get or create the run (status.mlflowRunId)"),
        _M("op", "api", "ConfigMap NAME-config (resolved spec)"),
        _M("op", "kserve", "NAME-embedding / NAME-judge, if a reward needs a served model"),
        _M("kserve", "op", "Ready", reply=True),
        _M("op", "api", "PyTorchJob or TrainJob NAME"),
        _M("job", "kserve", "embed steps / ask the judge"),
        _M("job", "mlflow", "metrics, params, reasoning maps"),
        _M("job", "s3", "checkpoints every storage.every_n_steps"),
        _M("op", "api", "status: phase, step, reward (kubectl get sexp)"),
        _M("op", "eval", "Job NAME-eval once training succeeded"),
        _M("eval", "s3", "read the last checkpoint"),
        _M("eval", "mlflow", "eval/... metrics into the same run"),
    ),
)


def diagrams(root: Path = ROOT) -> list[Diagram]:
    """Every diagram of the site; its SVG is ``ASSETS / f"{name}.svg"``."""
    return [imports_graph(root), CLUSTER, SUBMIT]
