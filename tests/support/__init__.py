"""Real local servers that stand in for the services sarl talks to, for tests and benchmarks.

They run on loopback and speak the wire protocol of what they stand in for, so the code under
test does real HTTP: ``embedding_server`` an OpenAI-compatible ``/v1/embeddings`` server with
fault injection, ``chat_server`` an OpenAI-compatible chat server with scripted replies
(judge-based rewards), ``http_server`` their shared loopback lifecycle, ``mlflow_server`` a real
MLflow tracking server subprocess, and ``kube_server`` an in-memory Kubernetes API server (kmock)
for the operator, cluster-client, chart-RBAC and notebook-03 tests. Each ``test_*.py`` here tests
the server of the same name.

Test support, not part of the installed ``sarl`` package (nothing a user calls needs them): run
from the repository root, e.g. ``python -m tests.support.embedding_server --port 8080``; pytest
puts the root on ``sys.path`` (``tests`` is a package), and a subprocess that runs one of them
needs the root on ``PYTHONPATH`` (see ``tests/support/test_embedding_server.py``).
"""

from pathlib import Path
from typing import Final

#: The repository root, for subprocesses that run ``python -m tests.support.<server>``.
REPO_ROOT: Final = Path(__file__).resolve().parents[2]
