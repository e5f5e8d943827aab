"""Hostile spec documents shared by the loader's and the CLI's tests (anchor bombs, deep lists)."""

from __future__ import annotations

HEAD = "apiVersion: sarl.dev/v1alpha1\nkind: Experiment\n"


def list_bomb(levels: int = 9, width: int = 10) -> str:
    """The classic "billion laughs": ``width ** levels`` strings from about 1 KB of YAML."""
    rows = ["a0: &a0 [" + ", ".join(["lol"] * width) + "]"]
    for i in range(1, levels):
        rows.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]")
    return HEAD + "metadata:\n  name: bomb\n" + "\n".join(rows) + "\n"


def merge_bomb(levels: int = 9, width: int = 10) -> str:
    """The same with merge keys: each level's mapping merges ``width`` copies of the last."""
    rows = ["m0: &m0 {k: v}"]
    for i in range(1, levels):
        rows.append(f"m{i}: &m{i} {{<<: [" + ", ".join([f"*m{i - 1}"] * width) + "]}")
    return HEAD + "metadata:\n  name: bomb\n" + "\n".join(rows) + "\n"


def deep_list(depth: int) -> str:
    return HEAD + "metadata: " + "[" * depth + "]" * depth + "\n"
