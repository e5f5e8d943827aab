"""The operator's environment as ``kubectl set env deployment ... --list`` prints it.

Read by ``sarl render --operator-env FILE`` and ``sarl submit --dry-run --operator-env FILE``
(:mod:`sarl.cli.render`), which hand the mapping to the operator's renderer
(``sarl_operator.render.document_objects``), so the objects are built with the settings a real
install's operator reads from its Deployment (``Settings.from_env``) instead of its defaults.
:class:`OperatorEnvError` is raised here for a line that is not ``KEY=VALUE``, and by the
operator's renderer for a value the operator itself would refuse; the CLI prints it as one line.

The format is kubectl's (``pkg/cmd/set/set_env.go`` of kubernetes/kubectl v0.34.0, ``o.List``):
one ``NAME=VALUE`` line per plain variable, ``# NAME from secret S, key K`` (or ``configmap``,
``field path``, ``resource field``) for a ``valueFrom`` entry, and a ``# deployments/NAME,
container C`` header: every line starting with ``#`` and every blank line is skipped. The value
is everything after the first ``=`` (kubectl prints ``%s=%s`` with nothing quoted), so a value
may hold ``=`` and ``#``. kubectl prints a value with a newline as several lines; the lines after
the first are not ``KEY=VALUE`` and are refused by number, never echoed (it may be a key).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Final

#: A variable name as Kubernetes validates it without the RelaxedEnvironmentVariableValidation
#: gate (k8s.io/apimachinery pkg/util/validation ``IsEnvVarName``: ``[-._a-zA-Z][-._a-zA-Z0-9]*``);
#: every variable the platform chart sets has such a name.
_NAME: Final = re.compile(r"[-._a-zA-Z][-._a-zA-Z0-9]*")

#: How to make the file, said in errors and the docs. The Deployment is found by the platform
#: chart's labels: its name depends on the release (``<release>-sarl-platform-operator``).
KUBECTL_LIST: Final = (
    "kubectl -n <namespace> set env deployment "
    "-l app.kubernetes.io/part-of=sarl,app.kubernetes.io/component=operator --list"
)


class OperatorEnvError(ValueError):
    """A line of the file that is not ``KEY=VALUE``, or a value the operator would refuse; the
    message names the line or the variable and never holds a credential's value."""


def parse_operator_env(text: str, source: str) -> dict[str, str]:
    """The ``NAME=VALUE`` lines of ``text`` as a mapping (a later line wins, as in a container's
    environment); comments and blank lines skipped. OperatorEnvError ``source:N: ...`` for a
    malformed line, without its content."""
    env: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        name, equals, value = line.partition("=")
        if not equals or not _NAME.fullmatch(name):
            raise OperatorEnvError(
                f"{source}:{number}: not a NAME=VALUE line (write the file with "
                f"'{KUBECTL_LIST} > FILE'; a value spanning lines is not supported)"
            )
        env[name] = value
    return env


def read_operator_env(path: Path) -> dict[str, str]:
    """:func:`parse_operator_env` of the file at ``path``; OperatorEnvError when it cannot be
    read."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else type(e).__name__
        raise OperatorEnvError(f"{path}: cannot read the operator's environment: {reason}") from e
    return parse_operator_env(text, str(path))
