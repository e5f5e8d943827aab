"""One default workdir for the CLI and ``sarl.Client.local()`` (:mod:`sarl.workdir`): a notebook
under ``examples/notebooks/`` and ``sarl run`` / ``make demo`` at the top of the checkout share one
MLflow store and one warm-start cache (issue 40 item 5). Real directories, no fakes."""

from __future__ import annotations

from pathlib import Path

import pytest

import sarl
from sarl.workdir import WORKDIR_ENV, default_workdir

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(WORKDIR_ENV, raising=False)


def test_the_notebooks_folder_resolves_to_the_checkouts_store() -> None:
    assert default_workdir(REPO / "examples" / "notebooks") == REPO / ".sarl"
    assert default_workdir(REPO) == REPO / ".sarl"


def test_the_nearest_existing_store_above_wins(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    (tmp_path / "project" / ".sarl").mkdir(parents=True)
    deep = tmp_path / "project" / "a" / "b"
    deep.mkdir(parents=True)
    assert default_workdir(deep) == tmp_path / "project" / ".sarl"


def test_a_fresh_checkout_starts_its_store_at_the_top(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    (tmp_path / "examples" / "notebooks").mkdir(parents=True)
    assert default_workdir(tmp_path / "examples" / "notebooks") == tmp_path / ".sarl"
    assert not (tmp_path / ".sarl").exists()  # nothing is created


def test_outside_any_checkout_it_is_the_working_directorys(tmp_path: Path) -> None:
    assert default_workdir(tmp_path) == tmp_path.resolve() / ".sarl"


def test_the_environment_variable_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(WORKDIR_ENV, str(tmp_path / "elsewhere"))
    assert default_workdir(REPO) == tmp_path / "elsewhere"


def test_the_local_client_takes_the_same_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / ".git").mkdir()
    notebooks = tmp_path / "examples" / "notebooks"
    notebooks.mkdir(parents=True)
    monkeypatch.chdir(notebooks)
    assert sarl.Client.local().workdir == tmp_path / ".sarl"
    assert sarl.Client.local(workdir="here").workdir == Path("here")
