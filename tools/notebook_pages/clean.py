"""Clean one recorded notebook output for a docs page, for ``tools.notebook_pages.render``.

Pure text functions: ANSI codes and progress bars out, this machine's paths replaced by what a
reader has (the checkout's ``.sarl`` → ``.sarl``, the checkout → ``.``), MLflow run ids (which
differ on every machine) replaced, long outputs cut with a line saying how much.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# A tqdm bar as it prints in a terminal or a log: "label:  40%|####      | 4/10 [..]".
PROGRESS = re.compile(r"^.*\d+%\|.*\|.*$|^.*\b\d+%\s+\d+/\d+\s+\[[^\]]*\]\s*$")
# An MLflow run id: 32 lowercase hex digits, a token of its own.
RUN_ID = re.compile(r"(?<![0-9a-f])[0-9a-f]{32}(?![0-9a-f])")
RUN_ID_TEXT = "<run id>"
RUN_ID_HTML = "&lt;run id&gt;"
#: Where an absolute path of the recording machine would show (what the pages' test refuses).
MACHINE_PATHS = ("/root", "/home/", "/tmp/", "/work/")


def strip_ansi(text: str) -> str:
    """``text`` without terminal colour and cursor codes."""
    return ANSI.sub("", text)


def drop_progress(text: str) -> str:
    """``text`` with carriage-return redraws collapsed to their last state and progress-bar
    lines removed (the page shows results, not the bars that led to them)."""
    lines = [line.rsplit("\r", 1)[-1] for line in text.split("\n")]
    return "\n".join(line for line in lines if not PROGRESS.match(line))


def replace_paths(text: str, roots: Sequence[tuple[str, str]]) -> str:
    """``text`` with each absolute ``root`` replaced by its stand-in, in the order given (the
    most specific first: the workdir lies inside the checkout)."""
    for root, stand_in in roots:
        text = text.replace(root.rstrip(os.sep), stand_in)
    return text


def replace_run_ids(text: str, placeholder: str = RUN_ID_TEXT) -> str:
    """``text`` with MLflow run ids replaced: they name runs in the recording machine's store."""
    return RUN_ID.sub(placeholder, text)


def truncate(text: str, max_lines: int) -> str:
    """The first ``max_lines`` lines of ``text``, and a line saying how many were cut."""
    lines = text.rstrip("\n").split("\n")
    if len(lines) <= max_lines:
        return "\n".join(lines)
    cut = len(lines) - max_lines
    return "\n".join([*lines[:max_lines], f"... ({cut} more lines cut)"])


def machine_paths(text: str) -> list[str]:
    """The absolute paths of a machine still in ``text`` (none on a clean page)."""
    return sorted(
        {m.group(0) for p in MACHINE_PATHS for m in re.finditer(re.escape(p) + r"\S*", text)}
    )
