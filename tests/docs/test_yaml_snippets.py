"""Every fenced YAML block of README.md and the hand-written docs parses and, by its kind, validates
(issue 41): whole sarl documents and spec fragments with the loader ``sarl validate`` uses, Helm
values fragments against their chart's ``values.schema.json``, Kubernetes manifests parsed only
(``tests/docs/snippets.py`` says how a block's kind is told). A reader copies these blocks; one
that does not validate is a dead end. The checker itself is shown refusing broken copies of the
pages' own blocks, written to ``tmp_path``.
"""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.docs import snippets
from tests.docs.snippets import ROOT, Block


def yaml_blocks(root: Path = ROOT) -> list[Block]:
    return [
        b for page in snippets.pages(root) for b in snippets.blocks(page) if b.lang in snippets.YAML
    ]


@pytest.fixture
def reader_packages(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """What the pages tell the reader to install (``pip install ./examples/custom_reward``):
    on ``sys.path`` for the test only, and the modules it imported forgotten after it, so no
    later test in this process finds the package that is not installed here."""
    before = set(sys.modules)
    for package in snippets.READER_PACKAGES:
        monkeypatch.syspath_prepend(str(package))
    yield
    for name in set(sys.modules) - before:
        if any(name.split(".")[0] == p.name for r in snippets.READER_PACKAGES for p in r.iterdir()):
            del sys.modules[name]


@pytest.mark.usefixtures("reader_packages")
def test_yaml_blocks_parse_and_validate() -> None:
    blocks = yaml_blocks()
    assert blocks
    problems = [p for block in blocks for p in snippets.check_yaml(block)]
    assert not problems, "\n".join(problems)


def test_the_local_experiment_example_clusters_as_the_example_file() -> None:
    """The concept page's first Experiment (a local preset) clusters steps as
    examples/local-structure.yaml does: with KMeans every map of <= 6 steps scores 0.5."""
    page = ROOT / "docs" / "concepts" / "experiments-and-studies.md"
    first = next(b for b in snippets.blocks(page) if b.lang in snippets.YAML)
    example = yaml.safe_load((ROOT / "examples" / "local-structure.yaml").read_text("utf-8"))

    def structure(doc: dict[str, object]) -> dict[str, object]:
        spec = doc["spec"]
        assert isinstance(spec, dict)
        return next(r["settings"] for r in spec["reward"] if r["name"] == "structure")

    shown = structure(yaml.safe_load(first.text))
    assert shown["clustering"] == structure(example)["clustering"] == "hdbscan", first.where


# The checker on broken copies of the pages' own blocks: each must be refused, naming page:line.


def _first_yaml(page: str, contains: str) -> Block:
    return next(b for b in yaml_blocks() if b.where.startswith(page) and contains in b.text)


def _broken_copy(tmp_path: Path, block: Block, old: str, new: str) -> Block:
    """The block with ``old`` replaced, on a page in tmp_path behind the same marker line."""
    assert old in block.text, f"{block.where} no longer contains {old!r}"
    marker = {"": "", "not-checked": "<!-- not-checked: x -->\n"}.get(block.marker)
    if marker is None:
        marker = f"<!-- {block.marker.replace(':', ': ', 1)} -->\n"
    page = tmp_path / "page.md"
    text = block.text.replace(old, new)
    page.write_text(f"# A page\n\n{marker}```yaml\n{text}\n```\n", encoding="utf-8")
    (copy,) = snippets.blocks(page)
    assert copy.marker == block.marker
    return copy


BROKEN = [
    # (page, a text of the block, what to replace, with what, what the problem names)
    (
        "docs/concepts/experiments-and-studies.md",
        "kind: Experiment",
        "learning_rate: 5.0e-5",
        "learning_rate: -1",
        "spec.algorithm.learning_rate=-1",
    ),
    (
        "docs/concepts/experiments-and-studies.md",
        "kind: Study",
        "reference: ground-truth",
        "reference: sarl",
        "spec.reference",
    ),
    ("docs/examples.md", "hdbscan", "clustering: hdbscan", "clustering: hdbscn", "hdbscan"),
    (
        "docs/concepts/cluster.md",
        "serving:",
        "deployment_mode: Serverless",
        "deployment_mod: Serverless",
        "did you mean 'deployment_mode'",
    ),
    ("docs/cluster/air-gapped.md", "base:", "k: 8", "kk: 8", "spec.base.evaluation.kk"),
    ("docs/concepts/rewards.md", "AnswerLengthReward", "target: 40", "targte: 40", "targte"),
    ("docs/cluster/tenancy.md", "tenants:", "envNames:", "envName:", "envName"),
    (
        "docs/cluster/tenancy.md",
        "tenants:",
        "  - namespace: team-a",
        "  - namespace: team-a\n - x",
        "YAML does not parse",
    ),
]


@pytest.mark.usefixtures("reader_packages")
@pytest.mark.parametrize(
    ("page", "contains", "old", "new", "expected"), BROKEN, ids=[f"{b[0]}:{b[4]}" for b in BROKEN]
)
def test_a_broken_block_is_refused(
    tmp_path: Path, page: str, contains: str, old: str, new: str, expected: str
) -> None:
    original = _first_yaml(page, contains)
    assert snippets.check_yaml(original) == [], "the page's own block must pass"
    (problem,) = snippets.check_yaml(_broken_copy(tmp_path, original, old, new))
    assert problem.startswith(f"{tmp_path / 'page.md'}:"), problem
    assert expected in problem, problem


def test_a_parse_error_names_the_page_line(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# A page\n\n```yaml\nspec:\n  reward: [\n```\n", encoding="utf-8")
    (block,) = snippets.blocks(page)
    (problem,) = snippets.check_yaml(block)
    # The error is found past the block's last line (line 5 of the page); the fence is line 3.
    assert problem.startswith(f"{page}:"), problem
    assert int(problem.split(":")[1]) >= 5, problem


def _problems_in(tmp_path: Path, markdown: str) -> list[str]:
    page = tmp_path / "page.md"
    page.write_text(textwrap.dedent(markdown), encoding="utf-8")
    return [p for block in snippets.blocks(page) for p in snippets.check_yaml(block)]


def test_an_unknown_fragment_must_be_marked(tmp_path: Path) -> None:
    (problem,) = _problems_in(tmp_path, "```yaml\nsecurityContext: {runAsNonRoot: true}\n```\n")
    assert "<!-- not-checked: REASON -->" in problem
    marked = "<!-- not-checked: KServe's -->\n```yaml\nsecurityContext: {runAsNonRoot: true}\n```\n"
    assert _problems_in(tmp_path, marked) == []
    # The marker waives the validation, not the parse.
    assert _problems_in(tmp_path, "<!-- not-checked: x -->\n```yaml\na: [\n```\n")


def test_kinds_by_marker_and_keys(tmp_path: Path) -> None:
    markdown = """\
        ```yaml
        apiVersion: v1
        kind: ConfigMap
        metadata: {name: x}
        ---
        spec: {reward: [{name: ground_truth}]}
        ---
        serving: {deployment_mode: RawDeployment}
        ---
        seeds: [0, 1]
        ```

        <!-- values: sarl-inference -->
        ```yaml
        judge: {enabled: true}
        ```

        <!-- values: no-such-chart -->
        ```yaml
        a: 1
        ```
        """
    page = tmp_path / "page.md"
    page.write_text(textwrap.dedent(markdown), encoding="utf-8")
    first, values, wrong = snippets.blocks(page)
    docs, _ = snippets.yaml_documents(first)
    assert [snippets.yaml_kind(d) for d in docs] == ["manifest", "spec", "spec", "study"]
    assert snippets.check_yaml(first) == []
    assert snippets.check_yaml(values) == []
    (problem,) = snippets.check_yaml(wrong)
    assert "no chart charts/no-such-chart" in problem


def test_a_values_fragment_of_the_wrong_chart_is_refused(tmp_path: Path) -> None:
    (problem,) = _problems_in(
        tmp_path, "<!-- values: sarl-platform -->\n```yaml\njudge: {enabled: true}\n```\n"
    )
    assert "charts/sarl-platform values" in problem and "judge" in problem
