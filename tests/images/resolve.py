"""Check that every container image's Python packages can coexist (``make check-images``, in CI).

For each Dockerfile of the repository (``jobs/docker/*.Dockerfile``, ``services/*/Dockerfile``,
``operators/Dockerfile``) this builds the image's complete requirement set without Docker:

* the base image's pinned packages, from ``<Dockerfile>.base.txt`` next to it (each pin says where
  it was read: the base image's own Dockerfile at a tag), whose ``# image:`` must name the
  Dockerfile's ``FROM``;
* what the Dockerfile's ``RUN pip install`` lines install, local packages (``./sdk[verl]``) read
  from their ``pyproject.toml`` dependencies and extras instead of being built. A package named
  on a pip line replaces the base's pin of it (pip upgrades it in the image).

pip's resolver then runs in report mode, metadata only, for the image's Python and platform
(``pip install --dry-run --ignore-installed --report``, ``--only-binary=:all:``). A set pip cannot
resolve fails. A resolved set is checked once more from the packages' own metadata in the report
(every ``Requires-Dist`` satisfied, e.g. KServe's protobuf < 7, TRL's transformers range), plus
what the metadata does not say: the runtime checks in ``RUNTIME_REQUIREMENTS`` and the stack a
framework declares it is tested with (``TESTED_STACK_EXTRAS``: verl's ``vllm`` extra).

Run: ``python tests/images/resolve.py`` (all images) or ``--dockerfile PATH``; ``--save-report``
writes the trimmed report that ``tests/images/test_resolve.py`` uses as an offline fixture.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from packaging.markers import Marker, default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE_GLOBS = ("jobs/docker/*.Dockerfile", "services/*/Dockerfile", "operators/Dockerfile")

# Constraints a package enforces at import time but does not declare in its metadata.
RUNTIME_REQUIREMENTS: dict[str, tuple[tuple[str, str], ...]] = {
    "verl": (
        (
            "vllm>=0.18.0",
            "verl/third_party/vllm/__init__.py (verl 0.9.1 wheel) raises ValueError for vLLM < "
            "0.18.0 when the rollout is imported",
        ),
    ),
}
# A framework's extra that names the stack it is tested with: every package of that extra which
# the image contains must satisfy it (packages of the extra that the image lacks are not added).
TESTED_STACK_EXTRAS: dict[str, str] = {"verl": "vllm"}


class ImageCheckError(ValueError):
    """A Dockerfile or base file this checker cannot read; the message names the file and fix."""


@dataclass(frozen=True)
class Base:
    """The base image's pins (``<Dockerfile>.base.txt``)."""

    image: str
    python: str
    glibc: str
    pins: tuple[str, ...]


@dataclass(frozen=True)
class ImageSpec:
    """One image: its base and the requirements its Dockerfile installs."""

    dockerfile: str
    from_image: str
    base: Base
    installs: tuple[str, ...]  # as written on the pip lines, local packages expanded
    named: frozenset[str] = field(default_factory=frozenset)  # names written on the pip lines

    def requirements(self) -> list[str]:
        """The complete set: base pins the Dockerfile does not replace, then its installs."""
        kept = [p for p in self.base.pins if _name(p) not in self.named]
        return kept + list(self.installs)


def _name(requirement: str) -> str:
    return canonicalize_name(Requirement(requirement).name)


def parse_base(path: Path) -> Base:
    """Read ``# image:``, ``# python:``, ``# glibc:`` and the pins of a base file."""
    if not path.is_file():
        raise ImageCheckError(f"{path}: missing; record the base image's pinned packages there")
    keys: dict[str, str] = {}
    pins: list[str] = []
    for raw in path.read_text(encoding="utf-8").splitlines():
        header = re.match(r"#\s*(image|python|glibc):\s*(\S+)\s*$", raw)
        if header:
            keys[header.group(1)] = header.group(2)
        line = raw.split("#", 1)[0].strip()
        if line:
            pins.append(line)
    missing = [k for k in ("image", "python", "glibc") if k not in keys]
    if missing:
        raise ImageCheckError(f"{path}: no '# {missing[0]}: ...' line; add it (see verl's)")
    return Base(keys["image"], keys["python"], keys["glibc"], tuple(pins))


def _logical_lines(text: str) -> list[str]:
    joined = re.sub(r"\\\n", " ", text)
    return [
        ln.strip() for ln in joined.splitlines() if ln.strip() and not ln.strip().startswith("#")
    ]


def _substitute(value: str, args: Mapping[str, str]) -> str:
    return re.sub(r"\$\{?(\w+)\}?", lambda m: args.get(m.group(1), m.group(0)), value)


def local_projects(root: Path = ROOT) -> dict[str, Path]:
    """Project name → directory of the repository's packages (sdk, jobs, services, operators)."""
    found: dict[str, Path] = {}
    for pyproject in root.glob("*/pyproject.toml"):
        name = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]["name"]
        found[canonicalize_name(name)] = pyproject.parent
    return found


def expand_local(directory: Path, extras: Iterable[str], projects: Mapping[str, Path]) -> list[str]:
    """External requirements of a local package with extras, following local references."""
    out: list[str] = []
    seen: set[tuple[str, str]] = set()

    def visit(path: Path, wanted: Iterable[str]) -> None:
        project = tomllib.loads((path / "pyproject.toml").read_text(encoding="utf-8"))["project"]
        groups = [("", project.get("dependencies", []))]
        optional = project.get("optional-dependencies", {})
        for extra in wanted:
            if extra not in optional:
                raise ImageCheckError(f"{path}/pyproject.toml: no extra '{extra}'")
            groups.append((extra, optional[extra]))
        for key, deps in groups:
            if (str(path), key) in seen:
                continue
            seen.add((str(path), key))
            for dep in deps:
                req = Requirement(dep)
                local = projects.get(canonicalize_name(req.name))
                if local is not None:
                    visit(local, sorted(req.extras))
                elif dep not in out:
                    out.append(dep)

    visit(directory, extras)
    return out


def parse_dockerfile(path: Path, root: Path = ROOT) -> ImageSpec:
    """The base image and pip installs of a single-stage Dockerfile; its base file is read too."""
    args: dict[str, str] = {}
    from_image = ""
    installs: list[str] = []
    named: set[str] = set()
    projects = local_projects(root)
    for line in _logical_lines(path.read_text(encoding="utf-8")):
        word, _, rest = line.partition(" ")
        if word == "ARG" and "=" in rest:
            key, _, value = rest.strip().partition("=")
            args[key] = value.strip().strip('"')
        elif word == "FROM":
            if from_image:
                raise ImageCheckError(f"{path}: multi-stage builds are not supported here")
            from_image = _substitute(rest.split()[0], args)
        elif word == "RUN":
            for command in re.split(r"&&|;", _substitute(rest, args)):
                for req in _pip_install_args(command, path):
                    if req.startswith("./"):  # COPY keeps the repository layout
                        where, _, extras = req.removeprefix("./").partition("[")
                        wanted = [e.strip() for e in extras.rstrip("]").split(",") if e.strip()]
                        for dep in expand_local(root / where, wanted, projects):
                            if dep not in installs:
                                installs.append(dep)
                    else:
                        installs.append(req)
                        named.add(_name(req))
    if not from_image:
        raise ImageCheckError(f"{path}: no FROM line")
    relative = path.relative_to(root) if path.is_relative_to(root) else path
    base = parse_base(path.with_name(path.name + ".base.txt"))
    if base.image != from_image.split("@", 1)[0]:
        raise ImageCheckError(
            f"{relative}: FROM {from_image} but {path.name}.base.txt records {base.image}; "
            "record the new base image's pins there"
        )
    return ImageSpec(str(relative), from_image, base, tuple(installs), frozenset(named))


def _pip_install_args(command: str, path: Path) -> list[str]:
    """Requirement arguments of one ``pip install`` command (options and their values dropped)."""
    tokens = shlex.split(command)
    while tokens and "=" in tokens[0]:  # leading VAR=value environment assignments
        tokens.pop(0)
    for prefix in (["pip", "install"], ["pip3", "install"], ["python", "-m", "pip", "install"]):
        if tokens[: len(prefix)] == prefix:
            tokens = tokens[len(prefix) :]
            break
    else:
        return []
    out: list[str] = []
    with_value = {"-i", "--index-url", "--extra-index-url", "-c", "-f", "--find-links"}
    skip = False
    for token in tokens:
        if skip:
            skip = False
        elif token in with_value:
            skip = True
        elif token in {"-r", "--requirement", "-e", "--editable"}:
            raise ImageCheckError(f"{path}: `pip install {token}` is not supported by this check")
        elif not token.startswith("-"):
            out.append(token)
    return out


def pip_command(spec: ImageSpec, report: Path) -> list[str]:
    """The metadata-only resolver run for the image's Python and manylinux platforms."""
    minor = int(spec.base.glibc.split(".")[1])
    platforms = [f"manylinux_2_{m}_x86_64" for m in range(minor, 16, -1)]
    platforms.append("manylinux2014_x86_64")
    command = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed"]
    command += ["--report", str(report), "--only-binary=:all:", "--implementation", "cp"]
    command += ["--python-version", spec.base.python]
    for platform in platforms:
        command += ["--platform", platform]
    return command + spec.requirements()


def target_only_requirements(report: Mapping[str, object], python: str) -> list[str]:
    """Requirements whose marker holds for the image's Python but not for the one running pip.

    pip evaluates markers against the interpreter it runs on, not ``--python-version``; e.g. vLLM
    0.24.0's ``setuptools<81; python_version > "3.11"`` is skipped when CI's Python 3.11 resolves
    for the verl image's 3.12. They are fed back to the resolver without their marker.
    """
    env = _environment(python)
    host = {**{k: str(v) for k, v in default_environment().items()}, "extra": ""}
    out = []
    for package in report["install"]:  # type: ignore[attr-defined]
        for dep in package["requires_dist"]:
            req = Requirement(dep)
            marker = req.marker
            if marker is not None and marker.evaluate(env) and not marker.evaluate(host):
                req.marker = None
                if str(req) not in out:
                    out.append(str(req))
    return out


def resolve(spec: ImageSpec) -> dict[str, object]:
    """Run pip's resolver (again with the target-only requirements it skipped, if any)."""
    report = _resolve_once(spec, [])
    extra = target_only_requirements(report, spec.base.python)
    return _resolve_once(spec, extra) if extra else report


def _resolve_once(spec: ImageSpec, extra: list[str]) -> dict[str, object]:
    """One resolver run; a set that cannot coexist raises with pip's explanation."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        done = subprocess.run(
            pip_command(spec, report) + extra,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        if done.returncode != 0:
            raise ImageCheckError(
                f"{spec.dockerfile}: pip cannot resolve the image's packages:\n"
                + conflict_summary(done.stdout)
            )
        return trim_report(json.loads(report.read_text(encoding="utf-8")))


def conflict_summary(output: str) -> str:
    """pip's error from its first ``ERROR:`` line on, without its generic advice."""
    lines = output.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.startswith("ERROR:")), 0)
    keep = [
        "  " + ln.rstrip()
        for ln in lines[start:]
        if ln.strip() and not ln.lstrip().startswith(("To fix this", "1. ", "2. "))
    ]
    return "\n".join(keep)


def trim_report(report: Mapping[str, object]) -> dict[str, object]:
    """Name, version and requirements of each resolved package: what the checks read."""
    packages = []
    for item in report["install"]:  # type: ignore[attr-defined]
        meta = item["metadata"]
        packages.append(
            {
                "name": meta["name"],
                "version": meta["version"],
                "requires_dist": meta.get("requires_dist", []),
            }
        )
    return {"install": sorted(packages, key=lambda p: canonicalize_name(p["name"]))}


def _environment(python: str) -> dict[str, str]:
    return {
        "python_version": python,
        "python_full_version": python + ".0",
        "implementation_name": "cpython",
        "platform_python_implementation": "CPython",
        "sys_platform": "linux",
        "platform_system": "Linux",
        "os_name": "posix",
        "platform_machine": "x86_64",
        "extra": "",
    }


def check_report(report: Mapping[str, object], python: str) -> list[str]:
    """Problems of a resolved set, each one line naming the package, its requirement and source."""
    installed = {canonicalize_name(p["name"]): p for p in report["install"]}  # type: ignore[attr-defined]
    env = _environment(python)
    problems: list[str] = []

    def unmet(owner: Mapping[str, str], req: Requirement, why: str) -> None:
        have = installed.get(canonicalize_name(req.name))
        if have is None:
            problems.append(f"{owner['name']} {owner['version']} requires {req} ({why}); missing")
        elif not req.specifier.contains(Version(have["version"]), prereleases=True):
            problems.append(
                f"{owner['name']} {owner['version']} requires {req} ({why}); "
                f"the image has {have['name']} {have['version']}"
            )

    for package in installed.values():
        for dep in package["requires_dist"]:
            req = Requirement(dep)
            if req.marker is None or req.marker.evaluate(env):
                unmet(package, req, "its metadata")
        key = canonicalize_name(package["name"])
        for dep, source in RUNTIME_REQUIREMENTS.get(key, ()):
            unmet(package, Requirement(dep), source)
        extra = TESTED_STACK_EXTRAS.get(key)
        if extra:
            for dep in package["requires_dist"]:
                req = Requirement(dep)
                in_extra = (
                    req.marker is not None
                    and Marker(str(req.marker)).evaluate({**env, "extra": extra})
                    and not req.marker.evaluate(env)
                )
                if (
                    in_extra
                    and canonicalize_name(req.name) in installed
                    and (canonicalize_name(req.name) != key)
                ):
                    unmet(package, req, f"its tested stack, extra '{extra}'")
    return problems


def dockerfiles(root: Path = ROOT) -> list[Path]:
    """Every Dockerfile this check covers."""
    return sorted(p for pattern in DOCKERFILE_GLOBS for p in root.glob(pattern))


def check_image(path: Path, save_report: Path | None = None) -> list[str]:
    """Resolve and check one image; returns its problems (empty when the set coexists)."""
    try:
        spec = parse_dockerfile(path)
        report = resolve(spec)
    except ImageCheckError as e:
        return [str(e)]
    if save_report is not None:
        save_report.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    problems = check_report(report, spec.base.python)
    versions: dict[str, str] = {
        canonicalize_name(p["name"]): p["version"]
        for p in report["install"]  # type: ignore[attr-defined]
    }
    shown = ", ".join(
        f"{n} {versions[n]}"
        for n in ("verl", "vllm", "torch", "transformers", "trl", "kserve", "protobuf", "kopf")
        if n in versions
    )
    status = "OK" if not problems else "FAILED"
    print(
        f"{spec.dockerfile} (FROM {spec.from_image}): {status}: {len(versions)} packages; {shown}",
        flush=True,
    )
    return [f"{spec.dockerfile}: {p}" for p in problems]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dockerfile", type=Path, action="append", help="only this Dockerfile")
    parser.add_argument("--save-report", type=Path, help="write the trimmed report (one image)")
    parser.add_argument("-j", "--jobs", type=int, default=3, help="images resolved at once")
    args = parser.parse_args(argv)
    paths = [p.resolve() for p in args.dockerfile] if args.dockerfile else dockerfiles()
    if args.save_report and len(paths) != 1:
        parser.error("--save-report needs exactly one --dockerfile")
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        results = list(pool.map(lambda p: check_image(p, args.save_report), paths))
    problems = [p for result in results for p in result]
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
