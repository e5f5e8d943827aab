"""Write the digests of released images into the charts' default image values.

Called by .github/workflows/release.yml after it pushed the five images: reads one line per image,
``<name> <repository> <sha256:digest>`` (``name`` as in the Makefile's IMAGES), and sets
``repository``, ``tag`` (the release version) and ``digest`` of that image's block in
charts/*/values.yaml, editing only those values in place so every comment and the layout stay
as they are. The charts render an image with a digest as ``<repository>@<digest>``.

    python3 .github/scripts/set_image_digests.py --version 0.2.0 digests.txt

Standard library only (it runs on a bare runner). Tested by tests/images/test_set_image_digests.py.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Final

ROOT: Final = Path(__file__).resolve().parents[2]
DIGEST: Final = re.compile(r"^sha256:[0-9a-f]{64}$")
REPOSITORY: Final = re.compile(r"^[a-z0-9.-]+(:[0-9]+)?(/[a-z0-9._-]+)+$")
VERSION: Final = re.compile(r"^[0-9A-Za-z][0-9A-Za-z._-]*$")
KEY: Final = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z0-9_.-]+):(?P<rest>.*)$")


@dataclass(frozen=True)
class Target:
    """Where one image's values live: a chart's values.yaml and the dotted path of its block."""

    values: str
    path: str


#: Image name (the Makefile's IMAGES) -> its block in the charts' values.
TARGETS: Final[dict[str, Target]] = {
    "operator": Target("charts/sarl-platform/values.yaml", "operator.image"),
    "verl": Target("charts/sarl-platform/values.yaml", "trainer.image"),
    "trl": Target("charts/sarl-platform/values.yaml", "trainer.trlImage"),
    "embedding": Target("charts/sarl-inference/values.yaml", "embedding.sarlCpu.image"),
    "reward": Target("charts/sarl-inference/values.yaml", "reward.image"),
}


class DigestError(ValueError):
    """Bad input or a values file without the expected keys; the message says which."""


def parse_digests(text: str) -> dict[str, tuple[str, str]]:
    """``name -> (repository, digest)`` from the workflow's lines; every image exactly once."""
    found: dict[str, tuple[str, str]] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split()
        if len(parts) != 3:
            raise DigestError(f"line {number}: expected '<name> <repository> <digest>': {line!r}")
        name, repository, digest = parts
        if name not in TARGETS:
            raise DigestError(f"line {number}: unknown image {name!r} (known: {sorted(TARGETS)})")
        if name in found:
            raise DigestError(f"line {number}: image {name!r} listed twice")
        if not REPOSITORY.match(repository):
            raise DigestError(f"line {number}: {repository!r} is not a lowercase image repository")
        if not DIGEST.match(digest):
            raise DigestError(f"line {number}: digest {digest!r} is not sha256:<64 hex digits>")
        found[name] = (repository, digest)
    missing = sorted(set(TARGETS) - set(found))
    if missing:
        raise DigestError(f"no digest for image(s) {missing}")
    return found


def set_values(text: str, path: str, values: dict[str, str]) -> str:
    """``text`` (a values.yaml) with the scalar keys ``values`` of the mapping at ``path`` set,
    each double-quoted; a trailing comment on such a line is kept. Every key must already
    exist in that mapping (the chart documents each one)."""
    lines = text.splitlines(keepends=True)
    stack: list[tuple[int, str]] = []
    done: set[str] = set()
    for index, line in enumerate(lines):
        match = KEY.match(line)
        if not match or line.lstrip().startswith("#"):
            continue
        indent = len(match["indent"])
        while stack and stack[-1][0] >= indent:
            stack.pop()
        parent = ".".join(key for _, key in stack)
        key = match["key"]
        stack.append((indent, key))
        if parent != path or key not in values:
            continue
        comment = re.search(r"\s+#.*$", match["rest"])
        tail = comment.group(0) if comment else ""
        newline = "\n" if line.endswith("\n") else ""
        lines[index] = f'{match["indent"]}{key}: "{values[key]}"{tail}{newline}'
        done.add(key)
    missing = sorted(set(values) - done)
    if missing:
        raise DigestError(f"{path}: no key(s) {missing} to set")
    return "".join(lines)


def apply(digests: dict[str, tuple[str, str]], version: str, root: Path = ROOT) -> list[Path]:
    """Write every image's repository, tag and digest into its values file; the files changed."""
    if not VERSION.match(version):
        raise DigestError(f"--version {version!r}: expected a release version such as 0.2.0")
    texts: dict[Path, str] = {}
    for name, (repository, digest) in sorted(digests.items()):
        target = TARGETS[name]
        file = root / target.values
        text = texts.get(file) or file.read_text(encoding="utf-8")
        new = {"repository": repository, "tag": version, "digest": digest}
        try:
            texts[file] = set_values(text, target.path, new)
        except DigestError as e:
            raise DigestError(f"{target.values}: {e}") from e
    for file, text in texts.items():
        file.write_text(text, encoding="utf-8")
    return sorted(texts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("digests", type=Path, help="file of '<name> <repository> <digest>' lines")
    parser.add_argument("--version", required=True, help="release version, the images' tag")
    parser.add_argument("--root", type=Path, default=ROOT, help="repository root")
    args = parser.parse_args(argv)
    try:
        digests = parse_digests(args.digests.read_text(encoding="utf-8"))
        for path in apply(digests, args.version, args.root):
            print(f"wrote {path}")
    except (DigestError, OSError) as e:
        print(f"set_image_digests: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
