"""The generated reference (docs/reference/*.md, issue 41) is what the code says, and the code
documents everything the reference lists: every CLI command, option and argument has help text,
every Experiment/Study field, reward setting and CRD status field a description, every Helm
value a comment (or a schema description), every service route a docstring.

The checkers themselves are shown to catch an undocumented item on small inputs built here, so a
checker that silently finds nothing cannot pass."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import pytest
import typer
from pydantic import BaseModel, Field

from tools.refdocs.cli_ref import app_reference
from tools.refdocs.griffe_roles import plain_roles
from tools.refdocs.helm_ref import chart_section
from tools.refdocs.markdown import GENERATED, cell
from tools.refdocs.pages import PAGES, REFERENCE
from tools.refdocs.schema_rows import missing, rows
from tools.refdocs.spec_ref import shipped_rewards


@pytest.fixture(scope="module")
def built() -> dict[str, tuple[str, list[str]]]:
    """Every page built once (the services' page constructs both models: a few seconds)."""
    return {name: build() for name, build in PAGES.items()}


@pytest.mark.parametrize("name", sorted(PAGES))
def test_the_page_is_what_the_code_gives(
    name: str, built: dict[str, tuple[str, list[str]]]
) -> None:
    path = REFERENCE / name
    assert path.exists(), f"{path} missing: run `make generate`"
    text = path.read_text(encoding="utf-8")
    assert text.startswith(GENERATED)
    assert text == built[name][0], f"docs/reference/{name} is stale: run `make generate`"


@pytest.mark.parametrize("name", sorted(PAGES))
def test_everything_on_the_page_is_described(
    name: str, built: dict[str, tuple[str, list[str]]]
) -> None:
    lacking = built[name][1]
    assert lacking == [], (
        "no description (add one in the code, then `make generate`):\n" + "\n".join(lacking)
    )


def test_the_cli_reference_covers_every_command(built: dict[str, tuple[str, list[str]]]) -> None:
    from sarl.cli.main import app

    root = typer.main.get_command(app)
    text = built["cli.md"][0]
    for name, command in root.commands.items():  # type: ignore[attr-defined]
        if command.hidden:  # an old name kept as an alias (`sarl demo`): not documented
            assert f"## `sarl {name}`" not in text
            continue
        assert f"## `sarl {name}`" in text
        for sub, subcommand in getattr(command, "commands", {}).items():
            heading = f"## `sarl {name} {sub}`"  # `sarl reward structure`: hidden old name
            assert (heading in text) != subcommand.hidden, heading


def test_an_option_without_help_is_missing() -> None:
    app = typer.Typer()

    @app.command()
    def go(
        fast: Annotated[bool, typer.Option(help="Go fast.")] = False,
        slow: Annotated[bool, typer.Option()] = False,
    ) -> None:
        """Go somewhere."""

    sections, lacking = app_reference(app, "demo")
    assert lacking == ["cli: demo --slow"]
    assert "`--fast`" in sections[0] and "Go fast." in sections[0]


def test_a_field_without_description_is_missing() -> None:
    class Inner(BaseModel):
        """An inner block."""

        size: int = Field(default=1, description="How big.")
        depth: int = 2

    class Outer(BaseModel):
        inner: Inner = Field(default_factory=Inner)
        name: str = Field(description="What it is called.")
        tags: dict[str, str] = Field(default_factory=dict)

    found = rows(Outer.model_json_schema())
    assert [r.path for r in found] == ["inner", "inner.size", "inner.depth", "name", "tags"]
    assert missing(found, "Outer") == ["Outer: inner.depth", "Outer: tags"]


def test_a_helm_value_without_comment_is_missing(tmp_path: Path) -> None:
    (tmp_path / "values.yaml").write_text(
        "# -- Documented.\na: 1\nb:\n  # -- Documented too.\n  c: x\n  d: 2\n# -- A group.\ne:\n"
        "  f: 3\n",
        encoding="utf-8",
    )
    schema = {
        "type": "object",
        "properties": {
            "a": {"type": "integer"},
            "b": {"type": "object", "properties": {"c": {"type": "string"}, "d": {}, "g": {}}},
            "e": {"type": "object", "properties": {"f": {"type": "integer"}}},
        },
    }
    (tmp_path / "values.schema.json").write_text(json.dumps(schema), encoding="utf-8")
    _, lacking = chart_section(tmp_path)
    # d: no comment, no documented parent; g: only in the schema, without a description; f:
    # documented by its parent's comment.
    assert lacking == [f"helm {tmp_path.name}: b.d", f"helm {tmp_path.name}: b.g"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a | b", "a \\| b"),
        ("`a | b` or <name>", "`a | b` or &lt;name&gt;"),
        ("host[:port][/path]", "host\\[:port\\]\\[/path]".replace("\\]", "]")),
        ("two\nlines", "two lines"),
        ("never AWS_*, MLFLOW_*", "never AWS_\\*, MLFLOW_\\*"),
        ("{key: [v]}", "\\{key: \\[v]}"),
    ],
)
def test_a_cell_cannot_break_its_table_or_hide_a_placeholder(text: str, expected: str) -> None:
    assert cell(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("see :class:`~sarl.cluster.ClusterClient`", "see `ClusterClient`"),
        (":func:`sarl.compare` and :meth:`submit`", "`sarl.compare` and `submit`"),
        ("``literal`` stays", "``literal`` stays"),
    ],
)
def test_sphinx_roles_become_code(text: str, expected: str) -> None:
    assert plain_roles(text) == expected


def test_a_reward_registered_at_run_time_is_not_on_the_page(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Tests (and notebooks) register rewards in the process; the page lists what sarl ships,
    so it does not depend on which tests ran before it."""
    from sarl.rewards import registry
    from sarl.rewards.base import Reward

    class Settings(BaseModel):
        pass

    cls = type("Cell", (Reward,), {"name": "cell_reward", "Settings": Settings})
    monkeypatch.setitem(registry._REGISTRY, "cell_reward", cls)
    assert "cell_reward" in registry.reward_names()
    assert "cell_reward" not in shipped_rewards()
    assert "structure" in shipped_rewards()
