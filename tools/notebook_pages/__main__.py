"""``python -m tools.notebook_pages [--executed DIR]`` (``make notebook-pages``): execute the
notebooks that run on one machine, keep the executed copies in ``out/notebook-runs/``, and write
``docs/tutorials/notebooks/<name>.md`` and ``docs/assets/notebooks/<name>-*.png``.

``--executed DIR`` renders the executed copies a previous run kept there, without executing
(to change the rendering, not the recording). Run from the repository root with ``.venv``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

from nbclient.exceptions import CellExecutionError

from tools.notebook_pages import clean, render
from tools.notebook_pages.execute import execute, read, write_notebook

REPO = Path(__file__).resolve().parents[2]
RUNS = REPO / "out" / "notebook-runs"
#: The notebooks the page shows executed (True) or as code and prose (False: needs a cluster).
NOTEBOOKS = {"01-quickstart": True, "02-compare": True, "03-cluster": False}
CLUSTER_NOTE = (
    '!!! info "Code and prose only"\n'
    "    Its outputs need a Kubernetes cluster running the sarl platform, so none are "
    "recorded here. CI runs it top to bottom against an emulated API server with the "
    "real operator (`tests/examples/test_notebook_cluster.py`). Source: "
    "`examples/notebooks/{stem}.ipynb`; this page is rewritten by `make notebook-pages`."
)


def duration(seconds: float) -> str:
    """``seconds`` as a reader says it: ``2 min 5 s``."""
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest} s" if minutes else f"{rest} s"


def recorded_note(stem: str, meta: dict[str, object]) -> str:
    """The admonition at the top of an executed notebook's page."""
    warm = (
        "the tiny policy already warm-started in `.sarl/cache`"
        if meta.get("warm")
        else "the tiny policy warm-started on first use, included"
    )
    return (
        '!!! info "Recorded output"\n'
        f"    The outputs below are one top-to-bottom run of `examples/notebooks/{stem}.ipynb` "
        f"with its own parameters, recorded at commit `{meta['commit']}` on {meta['date']} "
        f"(UTC) in {duration(float(str(meta['seconds'])))} on a {meta['cpus']}-core CPU "
        f"machine shared with other jobs ({warm}). "
        "Paths are shown relative to the checkout (`.sarl` is the workdir) and MLflow run ids "
        "as `<run id>`. Re-record with `make notebook-pages` after changing the notebook."
    )


def fresh_workdir() -> Path:
    """An empty workdir for the recording, its policy cache the checkout's (``.sarl/cache``):
    a page shows a first run as a user sees it (a Study re-run would skip its finished runs),
    without the minutes of a warm start already done, and the user's store stays as it was."""
    workdir = RUNS / "workdir"
    shutil.rmtree(workdir, ignore_errors=True)
    cache = REPO / ".sarl" / "cache"
    cache.mkdir(parents=True, exist_ok=True)
    workdir.mkdir(parents=True)
    # Recorded in the page's note: whether its time includes building the policy.
    (workdir / "warm").write_text(str(any(cache.iterdir())), encoding="utf-8")
    (workdir / "cache").symlink_to(cache, target_is_directory=True)
    return workdir


def record(stem: str, workdir: Path) -> dict[str, object]:
    """Execute one notebook with ``workdir`` as its WORKDIR; keep it and its metadata in
    ``RUNS``."""
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
    ).stdout.strip()
    path = REPO / render.NOTEBOOK_DIR / f"{stem}.ipynb"
    # The Study's parent run spools under the kernel's cwd (`.sarl/spool`), not the workdir; a
    # `.sarl` left in examples/notebooks/ would become the next run's WORKDIR=None.
    stray = path.parent / ".sarl"
    had_stray = stray.exists()
    recording = execute(path, env={"SARL_WORKDIR": str(workdir)})
    if not had_stray and stray.exists():
        shutil.rmtree(stray)
    meta: dict[str, object] = {
        "seconds": recording.seconds,
        "commit": commit or "unknown",
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
        "cpus": os.cpu_count() or 1,
        "workdir": str(workdir),
        "warm": (workdir / "warm").read_text(encoding="utf-8") == "True",
        "repo": str(REPO),
    }
    write_notebook(recording.notebook, RUNS / f"{stem}.ipynb")
    (RUNS / f"{stem}.json").write_text(json.dumps(meta, indent=1), encoding="utf-8")
    return meta


def write(stem: str, page: render.Page) -> list[str]:
    """Write the page and its images (old images of this notebook removed); the machine
    paths still on it (none expected)."""
    assets = REPO / render.ASSETS_DIR
    assets.mkdir(parents=True, exist_ok=True)
    for old in assets.glob(f"{stem}-*.png"):
        old.unlink()
    for name, png in page.images.items():
        (assets / name).write_bytes(png)
    text = render.markdown(page)
    path = REPO / render.PAGE_DIR / f"{stem}.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return clean.machine_paths(text)


def page_of(stem: str, executed: bool, from_dir: Path | None) -> render.Page:
    """The page of one notebook: recorded now, rendered from ``from_dir``, or code only."""
    if not executed:
        nb = read(REPO / render.NOTEBOOK_DIR / f"{stem}.ipynb")
        return render.render(
            nb, render.Context(stem), CLUSTER_NOTE.format(stem=stem), outputs=False
        )
    if from_dir is None:
        meta = record(stem, RUNS / "workdir")
        from_dir = RUNS
    else:
        meta = json.loads((from_dir / f"{stem}.json").read_text(encoding="utf-8"))
    nb = read(from_dir / f"{stem}.ipynb")
    roots = render.roots_of(str(meta["workdir"]), str(meta["repo"]))
    return render.render(nb, render.Context(stem, roots), recorded_note(stem, meta))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.notebook_pages", description=__doc__)
    parser.add_argument("--executed", type=Path, help="render the executed notebooks in DIR")
    parser.add_argument("names", nargs="*", help="only these notebooks (default: all)")
    args = parser.parse_args(argv)
    if args.executed is None:
        fresh_workdir()  # one store for the notebooks of this recording
    failed = 0
    for stem, executed in NOTEBOOKS.items():
        if args.names and stem not in args.names:
            continue
        try:
            page = page_of(stem, executed, args.executed)
        except CellExecutionError as e:  # one line; the old page stays
            print(
                f"{stem}: a cell raised {e.ename}: {e.evalue}; page not rewritten", file=sys.stderr
            )
            failed = 1
            continue
        leftover = write(stem, page)
        print(f"{render.PAGE_DIR}/{stem}.md written")
        if leftover:
            failed = 1
            print(f"{stem}: machine paths left on the page: {', '.join(leftover)}", file=sys.stderr)
    return failed


if __name__ == "__main__":
    sys.exit(main())
