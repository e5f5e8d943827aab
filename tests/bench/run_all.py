"""``make bench``: run every benchmark once, print the figures and write them as JSON.

Writes ``<out>/structure.json`` with at least ``naive_ms_per_response``,
``fast_ms_per_response``, ``speedup``, ``scores_identical``, the same path before issue 26 item 2
timed in the same rounds (``before_ms_per_response``, ``speedup_vs_before``,
``identical_to_before``; ``n_init_10_*`` for ``kmeans_n_init`` 10; ``target_met``: 0.15 ms per
response; ``gram_ms_per_response``: the Gram matrices alone, the floor with identical scores) and
``embedding_speedup``,
``<out>/kmeans_restarts.json`` with SR's spread under KMeans reseeding and the cost of
``kmeans_n_init`` 1, 3 and 10 at paper scale (the measurement behind the ``paper-*-math`` presets'
restarts; ``--kmeans-full`` for the larger run), ``<out>/rewards.json`` with each text-only
reward's time per sample from 1 kB to 1 MB (issue 12's
linear-time bound), and ``<out>/reward_service.json`` with throughput, p50/p99 latency of
accepted requests and shed requests of the reward service at client concurrency 1, 8 and 32
(embedding service behind it), whether the throughput and deadline targets hold, and the
embedding service's texts/s against the same model in-process (``embedding_service``).
Benchmarks are measurements, never tests: nothing here fails on a slow machine.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_embedding
import bench_kmeans_restarts
import bench_reward_service
import bench_rewards
import bench_structure


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("out/bench"))
    parser.add_argument("--responses", type=int, default=2048)
    parser.add_argument("--skip-service", action="store_true", help="skip the service benchmark")
    parser.add_argument(
        "--kmeans-full", action="store_true", help="KMeans restarts: 200 responses, 50 seeds"
    )
    args = parser.parse_args()

    from rich.console import Console
    from rich.table import Table

    console = Console()
    with console.status("structure reward: production path vs naive reference..."):
        structure = bench_structure.run(n=args.responses)
    with console.status("embedding client: batched vs one request per response..."):
        embedding = bench_embedding.run()
    figures = {
        **structure,
        **{
            f"embedding_{k}" if not k.startswith("embedding") else k: v
            for k, v in embedding.items()
        },
    }

    table = Table(title="sarl benchmarks (one run, same machine)")
    for col in ("benchmark", "naive", "sarl", "ratio", "note"):
        table.add_column(col)
    table.add_row(
        f"structure reward, {structure['responses']} responses x ~{structure['mean_steps']} "
        f"steps, {structure['dim']}-d, one core",
        f"{structure['naive_ms_per_response']:.2f} ms/resp "
        f"({structure['naive_responses_per_s']:.0f}/s)",
        f"{structure['fast_ms_per_response']:.3f} ms/resp "
        f"({structure['fast_responses_per_s']:.0f}/s)",
        f"{structure['speedup']:.1f}x",
        f"scores identical: {structure['scores_identical']}",
    )
    for n_init, key in ((1, ""), (10, "n_init_10_")):
        target = (
            f"; target <= {structure['target_ms_per_response']:.2f} ms: "
            + ("met" if structure["target_met"] else "missed")
            + f" (Gram matrices alone: {structure['gram_ms_per_response']:.3f} ms)"
            if n_init == 1
            else ""
        )
        table.add_row(
            f"structure reward, kmeans_n_init {n_init}: before issue 26 (in the naive column) "
            "vs now, same rounds [CPU time]",
            f"{structure[f'{key}before_ms_per_response']:.3f} ms/resp "
            f"[{structure[f'{key}before_cpu_ms_per_response']:.3f}]",
            f"{structure[f'{key}fast_ms_per_response']:.3f} ms/resp "
            f"[{structure[f'{key}fast_cpu_ms_per_response']:.3f}]",
            f"{structure[f'{key}speedup_vs_before']:.2f}x "
            f"[{structure[f'{key}cpu_speedup_vs_before']:.2f}x]",
            f"identical to before: {structure[f'{key}identical_to_before']}{target}",
        )
    table.add_row(
        "embedding client vs local OpenAI-compatible server "
        "(naive: a request per response, float JSON [base64])",
        f"{embedding['naive_s']:.2f} s ({embedding['requests_naive']:.0f} requests) "
        f"[{embedding['naive_base64_s']:.2f} s]",
        f"{embedding['batched_s']:.2f} s ({embedding['requests_batched']:.0f} requests)",
        f"{embedding['embedding_speedup']:.1f}x [{embedding['speedup_vs_naive_base64']:.1f}x]",
        "same vectors" if embedding.get("same_vectors", True) else "VECTORS DIFFER",
    )
    console.print(table)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "structure.json"
    path.write_text(json.dumps(figures, indent=2) + "\n")
    console.print(f"wrote {path}")
    with console.status("KMeans restarts: SR spread under reseeding, n_init 1/3/10..."):
        restarts = bench_kmeans_restarts.run(full=args.kmeans_full)
    bench_kmeans_restarts.print_table(restarts, console)
    restarts_path = args.out / "kmeans_restarts.json"
    restarts_path.write_text(json.dumps(restarts, indent=2) + "\n")
    console.print(f"wrote {restarts_path}")
    with console.status("text-only rewards: time per sample from 1 kB to 1 MB..."):
        scaling = bench_rewards.run()
    bench_rewards.print_table(scaling)
    rewards_path = args.out / "rewards.json"
    rewards_path.write_text(json.dumps(scaling, indent=2) + "\n")
    console.print(f"wrote {rewards_path}")
    if args.skip_service:
        return
    import bench_embedding_service  # the service benchmarks (sys.path set above)

    with console.status("reward service on loopback at concurrency 1, 8, 32..."):
        service = bench_reward_service.run()
    svc = Table(
        title=f"reward service: batches of {service['batch']} responses x "
        f"{service['steps_per_response']} steps, deadline {service['deadline_s']:g} s"
    )
    for col in ("concurrency", "requests/s", "p50 ms", "p99 ms", "p99 incl. retries ms", "shed"):
        svc.add_column(col, justify="right")
    for key in ("c1", "c8", "c32"):
        row = service[key]
        svc.add_row(
            key[1:],
            f"{row['rps']:.2f}",
            f"{row['p50_ms']:.0f}",
            f"{row['p99_ms']:.0f}",
            f"{row['p99_with_retries_ms']:.0f}",
            f"{row['shed']:.0f}",
        )
    console.print(svc)
    for target, held in service["targets"].items():
        console.print(f"target {target}: {'holds' if held else 'MISSED'} (measured, not asserted)")
    with console.status("embedding service vs Infinity (the peer), same cores and texts..."):
        service["embedding_service"] = bench_embedding_service.run(out=args.out)
    print_embedding_service(service["embedding_service"], console)
    service_path = args.out / "reward_service.json"
    service_path.write_text(json.dumps(service, indent=2) + "\n")
    console.print(f"wrote {service_path}")


def print_embedding_service(emb: dict[str, Any], console: Any) -> None:
    """The embedding service against the peer: texts/s (p99 latency) per workload, and ratios."""
    from rich.table import Table

    servers = [k for k in ("sarl", "sarl_torch", "infinity_torch", "infinity_onnx") if k in emb]
    table = Table(
        title=f"embedding service vs Infinity: {emb['texts']} distinct step texts per run, best "
        f"of {emb['rounds']} rounds, texts/s (p99 s)"
    )
    for col in ("workload", *servers, "sarl / torch backend", "sarl / best peer"):
        table.add_column(col, justify="right")
    for workload, label in (("c1", "1 x 128"), ("c16", "16 x 16"), ("c64", "64 x 1")):
        ours = emb["sarl"][workload]
        cells = [
            f"{emb[k][workload]['texts_per_s']:.0f} ({emb[k][workload]['p99_s']:.2f})"
            for k in servers
        ]
        peer = (
            f"{ours['vs_best_peer']:.2f}x ({ours['best_peer']})"
            if "vs_best_peer" in ours
            else "peer not installed (make setup-peer)"
        )
        table.add_row(label, *cells, f"{ours['vs_torch_backend']:.2f}x", peer)
    console.print(table)
    cosines = ", ".join(f"{k} {emb[k]['min_cosine_to_sarl']:.7f}" for k in servers)
    ceiling = emb["in_process"]
    console.print(
        f"smallest cosine to sarl's vectors: {cosines}; in-process ceiling, one call: onnx "
        f"{ceiling['onnx']:.0f} texts/s, torch {ceiling['torch']:.0f} "
        f"({ceiling['threads']} threads)"
    )


if __name__ == "__main__":
    main()
