"""Every fenced shell and Python block of README.md and the hand-written docs is executed or
checked (issue 41): Python compiled, and run when marked ``<!-- run -->``; shell lines checked
against the real CLI, the Makefile, the charts' values schemas and the repository's files
(``tests/docs/snippets.py`` says how); blocks marked ``<!-- not-checked: REASON -->`` counted.
YAML blocks: tests/docs/test_yaml_snippets.py. ``pytest -s`` prints the counts, YAML included.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest

from tests.docs import snippets
from tests.docs.snippets import ROOT, Block, Unchecked

#: Generous: a run block may load the bundled embedding model on a busy machine.
RUN_TIMEOUT_S = 600


def _all_blocks() -> list[Block]:
    return [b for page in snippets.pages() for b in snippets.blocks(page)]


def _of(langs: frozenset[str], marker: str | None = None) -> list[Block]:
    return [b for b in _all_blocks() if b.lang in langs and (marker is None or b.marker == marker)]


def _shell_problems(block: Block) -> list[str]:
    problems = []
    for words in snippets.commands(block.text):
        try:
            problem = snippets.check_shell(words)
        except Unchecked as e:
            problem = (
                f"cannot check `{e}`: mark the block with <!-- not-checked: REASON --> on the "
                "line before it"
            )
        if problem:
            problems.append(f"{block.where}: {problem}")
    return problems


def test_shell_blocks_name_only_what_exists() -> None:
    checked = _of(snippets.SHELL, "") + _of(snippets.SHELL, "run")
    assert checked
    problems = [p for block in checked for p in _shell_problems(block)]
    assert not problems, "\n".join(problems)


def test_python_blocks_compile() -> None:
    blocks = [b for b in _of(snippets.PYTHON) if b.marker != "not-checked"]
    assert blocks
    for block in blocks:
        compile(block.text, block.where, "exec")


@pytest.mark.parametrize("block", _of(snippets.PYTHON, "run"), ids=lambda b: b.where)
def test_run_blocks_execute(block: Block) -> None:
    done = subprocess.run(
        [sys.executable, "-c", block.text],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )
    assert done.returncode == 0, f"{block.where}:\n{done.stderr[-3000:]}"


def test_counts(capsys: pytest.CaptureFixture[str]) -> None:
    """The counts the issue asks for; at least one block is executed."""
    every = _of(snippets.SHELL | snippets.PYTHON | snippets.YAML)
    executed = [b for b in every if b.marker == "run"]
    marked = [b for b in every if b.marker == "not-checked"]
    checked = [b for b in every if b.marker not in ("run", "not-checked")]  # "", values:CHART
    kinds = Counter(
        snippets.yaml_kind(doc, b.marker) or "unknown"
        for b in _of(snippets.YAML)
        if b.marker != "not-checked"
        for doc in snippets.yaml_documents(b)[0]
    )
    with capsys.disabled():
        print(
            f"\ndocs snippets: {len(executed)} executed, {len(checked)} checked, "
            f"{len(marked)} marked not-checked ({len(every)} shell, Python and YAML blocks in "
            f"{len(snippets.pages())} pages; YAML documents checked: "
            f"{', '.join(f'{n} {kind}' for kind, n in sorted(kinds.items()))})"
        )
    assert executed and checked


# The checker itself, on made-up pages: it must refuse what does not exist.


def _problems_in(tmp_path: Path, markdown: str) -> list[str]:
    page = tmp_path / "page.md"
    page.write_text(textwrap.dedent(markdown), encoding="utf-8")
    found = []
    for block in snippets.blocks(page):
        for words in snippets.commands(block.text):
            try:
                found.append(snippets.check_shell(words))
            except Unchecked as e:
                found.append(f"unchecked {e}")
    return [p for p in found if p]


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("sarl run my-run.yaml --local --no-such-option", "no-such-option"),
        ("sarl study rnu study.yaml", "no command 'rnu'"),
        ("sarl reward score structure --input f.jsonl --outt DIR", "--outt"),
        ("sarl validate a.yaml b.yaml", "unexpected extra argument"),
        ("make demo-that-is-not-there", "no target demo-that-is-not-there"),
        ("helm install sarl charts/sarl-platform --set operator.nope=1", "operator.nope"),
        ("kubectl apply -f examples/missing.yaml", "examples/missing.yaml"),
        ("pip install -e 'sdk[cluster,nosuchextra]'", "nosuchextra"),
        ("pip install ./examples/no_such_package", "no package there"),
        ("python -m sarl_jobs.no_such_module", "no such module"),
        ("crane copy a b", "unchecked crane copy a b"),
    ],
)
def test_the_checker_refuses_what_does_not_exist(tmp_path: Path, line: str, expected: str) -> None:
    (problem,) = _problems_in(tmp_path, f"```bash\n{line}\n```\n")
    assert expected in problem


def test_the_checker_accepts_what_exists(tmp_path: Path) -> None:
    markdown = """\
        ```bash
        sarl run my-run.yaml --local --set spec.algorithm.max_steps=5   # a comment --bogus
        sarl submit examples/sarl-grpo-math.yaml [-n NS] [--replace] [--wait]
        sarl presets; sarl --version && sarl run -h
        echo '{"step_labels": [0, 1, 2]}' | sarl reward score structure
        make demo && make push-images REGISTRY=r TAG=1
        helm install sarl charts/sarl-platform -n sarl \\
          --set operator.image.repository=r,operator.image.tag=1
        kubectl apply -f examples/sarl-grpo-math.yaml
        pip install -e 'sdk[cluster,data]'
        pip install ./sdk
        ```

        <!-- not-checked: needs a cluster -->
        ```bash
        kubectl -n sarl create secret generic x
        ```
        """
    page = tmp_path / "page.md"
    page.write_text(textwrap.dedent(markdown), encoding="utf-8")
    first, second = snippets.blocks(page)
    assert second.marker == "not-checked"
    assert _shell_problems(first) == []
