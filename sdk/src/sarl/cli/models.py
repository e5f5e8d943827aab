"""``sarl models copy``: put a model into the object store for clusters without the Hub.

Registered in :mod:`sarl.cli.main` as the ``models`` group. Run where the network reaches the
Hugging Face Hub (or with the model on disk); the copy is then named in a spec as
``s3://bucket/prefix`` (``spec.model.name``, an embedder's or judge's ``model``). The work is
:meth:`sarl.storage.models.S3ModelStore.upload`; this module resolves the source (a local
model directory, or a Hub id fetched with ``huggingface_hub.snapshot_download``), prints a line
per file and maps bad input to exit code 2 with one ``error:`` line on stderr, never a
traceback.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(help="Copy models into the object store.", no_args_is_help=True)


class CopyError(ValueError):
    """A source or destination ``sarl models copy`` cannot use; the message names which."""


def _human(size: float) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if size < 1000:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{size:.1f} TB"


def _hub_snapshot(hub_id: str, revision: str | None, into: Path) -> Path:
    """Download ``hub_id`` into ``into`` with huggingface_hub (HF_ENDPOINT, HF_TOKEN and
    HF_HUB_OFFLINE as huggingface_hub reads them)."""
    try:
        from huggingface_hub import snapshot_download
        from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError
    except ImportError as e:
        raise CopyError(
            "copying from the Hub needs huggingface_hub: pip install huggingface_hub"
        ) from e
    print(f"downloading {hub_id} from the Hugging Face Hub ...", flush=True)
    try:
        path = snapshot_download(hub_id, revision=revision, local_dir=into)
    except LocalEntryNotFoundError as e:
        raise CopyError(
            f"SOURCE: {hub_id} cannot be downloaded (no network, or HF_HUB_OFFLINE=1) and is "
            "not in the local cache; run this where the Hub (or HF_ENDPOINT's mirror) is "
            "reachable, or pass the model's local directory"
        ) from e
    except (HfHubHTTPError, OSError, ValueError) as e:
        raise CopyError(f"SOURCE: downloading {hub_id} failed: {e}") from e
    return Path(path)


def copy(source: str, dest: str, *, endpoint_url: str | None, revision: str | None) -> None:
    """Copy ``source`` (local directory or Hub id) to the ``s3://`` model directory ``dest``."""
    from sarl.spec.model_source import MODEL_MANIFEST, parse_model_uri
    from sarl.storage.models import S3ModelStore

    target = parse_model_uri(dest, "DEST")
    if target.kind != "s3":
        raise CopyError(f"DEST: expected s3://bucket/prefix, got a {target.kind} model")
    store = S3ModelStore(target, endpoint_url=endpoint_url)
    local = Path(source).expanduser()
    with tempfile.TemporaryDirectory(prefix="sarl-models-") as tmp:
        if local.is_dir():
            origin = str(local.resolve())
        else:
            hub = parse_model_uri(source, "SOURCE")
            if not hub.is_hub:
                raise CopyError(
                    f"SOURCE: {source!r} is neither a local directory nor a Hub id (org/name)"
                )
            origin = hub.uri
            local = _hub_snapshot(hub.hub_id, revision, Path(tmp) / "snapshot")
        print(f"copying {origin} -> {target.uri}/", flush=True)
        count = 0

        def done(rel: str, size: int) -> None:
            nonlocal count
            count += 1
            print(f"  uploaded {rel} ({_human(size)})", flush=True)

        manifest = store.upload(local, origin, on_file=done)
    print(
        f"done: {count} files, {_human(manifest.total_bytes)}; {MODEL_MANIFEST} written last, "
        f"so jobs and KServe use the copy only now. Name it in a spec as {target.uri}"
    )


@app.command("copy")
def copy_command(
    source: Annotated[
        str,
        typer.Argument(
            help="Hub id (org/name, hf://org/name) or a local model directory.",
            metavar="SOURCE",
            show_default=False,
        ),
    ],
    dest: Annotated[
        str,
        typer.Argument(help="s3://bucket/prefix to copy to.", metavar="DEST", show_default=False),
    ],
    endpoint_url: Annotated[
        str | None,
        typer.Option(
            "--endpoint-url",
            help="S3/MinIO endpoint (default: AWS_ENDPOINT_URL).",
            metavar="URL",
            show_default=False,
        ),
    ] = None,
    revision: Annotated[
        str | None,
        typer.Option(
            "--revision", help="Hub branch, tag or commit.", metavar="REV", show_default=False
        ),
    ] = None,
) -> None:
    """Copy a Hub model (or a local model directory) to s3://bucket/prefix, manifest last."""
    from sarl.storage.base import StorageError

    try:
        copy(source, dest, endpoint_url=endpoint_url, revision=revision)
    except (ValueError, StorageError) as e:
        print(f"error: {e}", file=sys.stderr)
        raise typer.Exit(code=2) from None
