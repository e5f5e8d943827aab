"""Measure sarl's services under the hostile clients of issue 38 and print a markdown table.

Run from the repository root (not collected by pytest; about 6 minutes on 2 CPUs)::

    .venv/bin/python tests/bench/hostile_report.py --out out/hostile.md
    .venv/bin/python tests/bench/hostile_report.py --scale issue --out out/hostile-issue.md

For each attack of issue 38 (items 1-7 and 9) it starts real service processes (``sarl serve
reward`` / ``sarl serve embedding``, through ``sarl_services.testing``), samples the service's
resident memory (VmRSS of the process and its children, every 50 ms) and runs a well-behaved
client beside the attack (one small request every 0.2 s), then reports the peak memory over
idle and that client's longest wait and statuses. By default attacks are scaled down to fit the
time; ``--scale issue`` runs them at the sizes and durations the issue reported (about 12
minutes). The table gives each row's scale. The attack helpers are the tests' own
(tests/services/*), imported, not copied. Numbers vary with the machine: this is a report,
nothing here asserts on time.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import orjson
import psutil

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the tests' helpers below

from sarl_services.testing import ServiceProcess, running_service, start_service  # noqa: E402
from tests.services.test_body_memory import MiB, concurrently  # noqa: E402
from tests.services.test_reward_lanes import HOSTILE, _send_and_keep, _ttrl_group  # noqa: E402
from tests.services.test_shutdown import SLOW, _scoring  # noqa: E402
from tests.services.test_slow_clients import _oversize_header_request  # noqa: E402
from tests.services.test_wide_strings import _body  # noqa: E402

REWARD_ARGS = ["--embedder", "openai", "--embedding-url", "http://127.0.0.1:9",
               "--embedding-model", "x"]  # fmt: skip
ONE_ITEM = {"requests": [{"response": "so \\boxed{4}", "ground_truth": "4"}]}


@dataclass
class Row:
    attack: str
    scale: str
    peak_mib: float = 0.0
    wait_s: float = 0.0
    statuses: dict[int, int] = field(default_factory=dict)
    outcome: str = ""


class Sampler(threading.Thread):
    """Peak VmRSS (MiB) of ``pid`` and its children while running."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.proc = psutil.Process(pid)
        self.idle = self.rss()
        self.peak = self.idle
        self.stop = threading.Event()

    def rss(self) -> float:
        procs = [self.proc, *self.proc.children(recursive=True)]
        total = 0
        for p in procs:
            with contextlib.suppress(psutil.Error):
                total += p.memory_info().rss
        return total / MiB

    def run(self) -> None:
        while not self.stop.wait(0.05):
            with contextlib.suppress(psutil.Error):
                self.peak = max(self.peak, self.rss())


class Probe(threading.Thread):
    """A well-behaved client: ``send()`` every 0.2 s; the longest wait and the statuses."""

    def __init__(self, send: Callable[[], int]) -> None:
        super().__init__(daemon=True)
        self.send, self.longest, self.statuses = send, 0.0, {}
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            t0 = time.monotonic()
            try:
                status = self.send()
            except httpx.HTTPError:
                status = 0  # no answer (connection refused, timeout)
            self.longest = max(self.longest, time.monotonic() - t0)
            self.statuses[status] = self.statuses.get(status, 0) + 1
            self.stop.wait(0.2)


def measured(
    row: Row, service: ServiceProcess, probe: Callable[[], int], attack: Callable[[], str]
) -> Row:
    sampler, client = Sampler(service.process.pid), Probe(probe)
    sampler.start()
    client.start()
    try:
        row.outcome = attack()
    finally:
        client.stop.set()
        client.join()
        sampler.stop.set()
        sampler.join()
    row.peak_mib, row.wait_s, row.statuses = (
        sampler.peak - sampler.idle,
        client.longest,
        client.statuses,
    )
    print(
        f"  {row.attack}: +{row.peak_mib:.0f} MiB, wait {row.wait_s:.2f} s, {row.outcome}",
        flush=True,
    )
    return row


def ground_truth(service: ServiceProcess) -> Callable[[], int]:
    url = service.url + "/v1/rewards/ground_truth"
    return lambda: httpx.post(url, json=ONE_ITEM, timeout=120).status_code


def embed_one(service: ServiceProcess) -> Callable[[], int]:
    url = service.url + "/v1/embeddings"
    return lambda: httpx.post(url, json={"input": ["a short text"]}, timeout=120).status_code


def _address(service: ServiceProcess) -> tuple[str, int]:
    host, port = service.url.removeprefix("http://").split(":")
    return host, int(port)


# -- the attacks ---------------------------------------------------------------------------------


def pipelining(service: ServiceProcess, seconds: float) -> str:
    """Item 1: one client streaming pipelined 4 KiB requests (404s), reconnecting when cut."""
    one = b"GET /nope HTTP/1.1\r\nHost: t\r\nX-Pad: " + b"p" * 4000 + b"\r\n\r\n"
    end, connections, answered = time.monotonic() + seconds, 0, 0
    while time.monotonic() < end:
        with socket.create_connection(_address(service), timeout=5) as sock:
            connections += 1
            with contextlib.suppress(OSError):
                sock.sendall(one * 256)  # 1 MiB of pipelined requests
                while data := sock.recv(65536):
                    answered += data.count(b"HTTP/1.1 404")
    return f"{connections} connections cut, {answered} answered"


def wide_strings(service: ServiceProcess) -> str:
    """Item 2: four 32 MiB ASCII bodies with one emoji (decode to 4 bytes a character)."""
    body = _body(32 * MiB - 64, "😀".encode(), 1000)
    responses = concurrently(service.url + "/v1/rewards/ground_truth", [body] * 4)
    return "statuses " + ",".join(str(r.status_code) for r in responses)


def given_embeddings(service: ServiceProcess, count: int) -> str:
    """Item 3: ``count`` concurrent 4 MiB structure requests carrying their own step_embeddings."""
    row = [0.125] * 384
    steps = 4 * MiB // len(orjson.dumps(row))
    body = orjson.dumps({"requests": [{"response": "a", "step_embeddings": [row] * steps}]})
    responses = concurrently(service.url + "/v1/rewards/structure", [body] * count)
    codes = [r.status_code for r in responses]
    return ", ".join(f"{codes.count(c)}x{c}" for c in sorted(set(codes)))


def math_flood(service: ServiceProcess, seconds: float, clients: int) -> str:
    """Item 4: ``clients`` loops of five hostile math-verify items each."""
    url, end, codes = (
        service.url + "/v1/rewards/ground_truth_math_verify",
        time.monotonic() + seconds,
        [],
    )
    body = {"requests": [HOSTILE] * 5, "settings": {"timeout_seconds": 10}}

    def flood() -> None:
        while time.monotonic() < end:
            with contextlib.suppress(httpx.HTTPError):
                codes.append(httpx.post(url, json=body, timeout=120).status_code)

    threads = [threading.Thread(target=flood) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return ", ".join(f"{codes.count(c)}x{c}" for c in sorted(set(codes)))


def groups(service: ServiceProcess, left: int) -> str:
    """Item 5: a 1,024-item TTRL group, then ``left`` 256-item groups whose clients leave."""
    big = httpx.post(
        service.url + "/v1/rewards/ttrl", json={"requests": _ttrl_group(1024)}, timeout=120
    )
    socks = [
        _send_and_keep(service, "/v1/rewards/ttrl", {"requests": _ttrl_group(256)})
        for _ in range(left)
    ]
    time.sleep(1.0)
    for s in socks:
        s.close()  # the clients leave mid-scoring
    cpu = psutil.Process(service.process.pid)
    before = cpu.cpu_times()
    time.sleep(15.0)
    after = cpu.cpu_times()
    burnt = (after.user + after.system) - (before.user + before.system)
    return f"1,024-item group {big.status_code}; {burnt:.1f} CPU-s in the 15 s after {left} left"


def idle_connections(
    service: ServiceProcess, count: int, hold_s: float, refresh_s: float | None = None
) -> str:
    """Item 6: ``count`` keep-alive connections idle after one request each (each sending one
    more request every ``refresh_s``, under the keep-alive timer, if given), plus one client
    that never reads a large embeddings answer."""
    head = b"GET /v2/health/live HTTP/1.1\r\nHost: t\r\n\r\n"
    socks = []
    for _ in range(count):
        with contextlib.suppress(OSError):
            s = socket.create_connection(_address(service), timeout=5)
            s.sendall(head)
            socks.append(s)
    big = orjson.dumps({"input": [f"text number {i} " * 20 for i in range(256)]})
    reader = socket.create_connection(_address(service), timeout=5)
    request = (f"POST /v1/embeddings HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
               f"Content-Length: {len(big)}\r\n\r\n").encode() + big  # fmt: skip
    reader.sendall(request * 4)  # never read
    end, closed = time.monotonic() + hold_s, 0
    while (left := end - time.monotonic()) > 0:
        time.sleep(min(left, refresh_s or left))
        if refresh_s is not None and time.monotonic() < end:
            still = []
            for s in socks:
                if _closed_by_server(s):
                    closed += 1
                    continue
                with contextlib.suppress(OSError):
                    s.sendall(head)  # keeps it under the keep-alive timer
                still.append(s)
            socks = still
    closed += sum(_closed_by_server(s) for s in socks)
    dropped = _closed_by_server(reader)
    for s in [*socks, reader]:
        s.close()
    refreshed = f", refreshed every {refresh_s:.0f} s" if refresh_s is not None else ""
    return (f"{count} idle{refreshed}: {closed} closed by the server in {hold_s:.0f} s; "
            f"the never-reading client {'dropped' if dropped else 'still connected'}")  # fmt: skip


def _closed_by_server(sock: socket.socket) -> bool:
    """Whether the server closed (or reset) ``sock``: what is buffered is read, then EOF."""
    sock.setblocking(False)
    try:
        while data := sock.recv(1 << 20):
            del data
        return True  # recv returned b"": closed
    except BlockingIOError:
        return False  # open, nothing more to read
    except OSError:
        return True  # reset


def header_70kb(service: ServiceProcess) -> str:
    with socket.create_connection(_address(service), timeout=10) as sock:
        sock.sendall(_oversize_header_request(70_000))
        return "status " + sock.recv(65536).split(b"\r\n", 1)[0].decode(errors="replace")


def sigterm_mid_request(tmp: Path) -> Row:
    """Item 9: SIGTERM while a request waits on a silent embedder (grace period, then 503)."""
    silent = socket.create_server(("127.0.0.1", 0))
    args = ["--embedder", "openai", "--embedding-model", "x", "--embedding-timeout", "120",
            "--embedding-url", f"http://127.0.0.1:{silent.getsockname()[1]}/v1",
            "--embedding-max-retries", "0"]  # fmt: skip
    service = start_service("reward", args, log_dir=tmp)
    answers: list[httpx.Response] = []
    try:
        service.wait_until_ready()
        client = threading.Thread(
            target=lambda: answers.append(
                httpx.post(service.url + "/v1/rewards/structure", json=SLOW, timeout=120.0)
            )
        )
        client.start()
        while not _scoring(service.url):
            time.sleep(0.1)
        t0 = time.monotonic()
        os.kill(service.process.pid, signal.SIGTERM)
        client.join(timeout=120.0)
        waited = time.monotonic() - t0
        code = service.process.wait(timeout=60.0)
    finally:
        service.stop()
        silent.close()
    log = service.log_path.read_text(errors="replace")
    status = answers[0].status_code if answers else 0
    outcome = f"answer {status}, exit {code}, traceback in log: {'Traceback' in log}"
    return Row("9 SIGTERM mid-request", "1 request in flight", 0.0, waited, {status: 1}, outcome)


# -- spec attacks (item 7 and 9): sarl validate and the webhook's checker -------------------------


def validate(doc_text: str, tmp: Path, name: str) -> Row:
    path = tmp / f"{name}.yaml"
    path.write_text(doc_text)
    t0 = time.monotonic()
    proc = subprocess.Popen([str(Path(sys.executable).with_name("sarl")), "validate", str(path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    sampler = Sampler(proc.pid)
    sampler.start()
    out, err = proc.communicate(timeout=300)
    sampler.stop.set()
    sampler.join()
    waited = time.monotonic() - t0
    said = (err.strip() or out.strip()).splitlines()
    last = said[-1].split(".yaml: ", 1)[-1][:70] if said and proc.returncode else "valid"
    outcome = f"exit {proc.returncode}, traceback: {'Traceback' in out + err}; {last}"
    # The column is the command's own peak (it starts from nothing), the wait its run time.
    return Row(f"{name} (sarl validate)", f"{len(doc_text) // 1024} KB spec; peak of the command",
               sampler.peak, waited, {}, outcome)  # fmt: skip


def webhook_row() -> Row:
    """Item 7: the admission webhook's check of a 32 KB ``"a:"*n`` image; the wait is the
    longest stall of its event loop meanwhile (a 10 ms ticker)."""
    from sarl_operator import admission

    image = "a:" * 16_384
    body = {"apiVersion": "sarl.dev/v1alpha1", "kind": "Experiment", "metadata": {"name": "x"},
            "spec": {"resources": {"image": image}}}  # fmt: skip

    async def main() -> tuple[float, float, str]:
        lag, stop = 0.0, asyncio.Event()

        async def ticker() -> None:
            nonlocal lag
            while not stop.is_set():
                t = time.monotonic()
                await asyncio.sleep(0.01)
                lag = max(lag, time.monotonic() - t - 0.01)

        tick = asyncio.create_task(ticker())
        t0 = time.monotonic()
        try:
            await admission.validate_images(body=body, operation="CREATE", old=None)
            outcome = "admitted"
        except Exception as e:  # kopf.AdmissionError: the refusal
            outcome = f"refused: {str(e)[:60]}"
        took = time.monotonic() - t0
        stop.set()
        await tick
        return took, lag, outcome

    took, lag, outcome = asyncio.run(main())
    scale = "32 KB image; wait = event-loop stall"
    return Row(
        '7 "a:"*n image (webhook)', scale, 0.0, lag, {}, f"{outcome}; checked in {took:.2f} s"
    )


def spec_rows(tmp: Path) -> list[Row]:
    head = "apiVersion: sarl.dev/v1alpha1\nkind: Experiment\nmetadata:\n  name: x\n"
    pairs = "a:" * 33_000
    return [
        validate(head + f"spec:\n  tracking:\n    tags:\n      note: '{pairs}'\n", tmp, '7 "a:"*n'),
        validate(
            head + "spec:\n  algorithm:\n    seed: " + "9" * 4301 + "\n", tmp, "9 4,301-digit int"
        ),
        validate(head + "spec:\n  algorithm:\n    learning_rate: .inf\n", tmp, "9 .inf rate"),
        validate(
            head + "spec:\n  reward: [{name: ground_truth}]\nspec: {}\n", tmp, "9 duplicate spec:"
        ),
    ]


# -- the report ----------------------------------------------------------------------------------


def table(rows: list[Row]) -> str:
    lines = [
        "| attack | scale | peak RSS over idle | well-behaved client: longest wait "
        "| its statuses | outcome |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        statuses = ", ".join(f"{n}x{c}" for c, n in sorted(r.statuses.items())) or "-"
        cells = [r.attack, r.scale, f"{r.peak_mib:+.0f} MiB", f"{r.wait_s:.2f} s", statuses]
        lines.append("| " + " | ".join([*cells, r.outcome]) + " |")
    return "\n".join(lines) + "\n"


@contextlib.contextmanager
def services(tmp: Path) -> Iterator[tuple[ServiceProcess, ServiceProcess, ServiceProcess]]:
    lanes = [*REWARD_ARGS, "--max-concurrency", "1", "--max-queue", "0", "--max-group-size", "256"]
    with (running_service("reward", REWARD_ARGS, log_dir=tmp) as reward,
          running_service("reward", lanes, log_dir=tmp) as limited,
          running_service("embedding", [], log_dir=tmp, timeout_s=300) as embedding):  # fmt: skip
        yield reward, limited, embedding


@dataclass(frozen=True)
class Scale:
    """How big and how long each attack is (the issue's sizes, or cut to fit a short run)."""

    pipeline_reward_s: float
    pipeline_embedding_s: float
    uploads: int
    groups_left: int
    idle_hold_s: float
    idle_refresh_s: float | None


SCALES = {
    "short": Scale(10, 10, 20, 4, 25, None),
    # Issue 38: 30 s and 15 s of pipelining, 60 uploads, eight abandoned groups, 1,024
    # connections refreshed every 55 s for 130 s.
    "issue": Scale(30, 15, 60, 8, 130, 55),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("out/hostile.md"))
    parser.add_argument(
        "--scale", choices=sorted(SCALES), default="short",
        help="short: each attack cut to fit ~6 minutes; issue: the sizes and durations issue 38 "
        "reported (~12 minutes)",
    )  # fmt: skip
    args = parser.parse_args()
    out, sc = args.out, SCALES[args.scale]
    import resource

    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
    rows: list[Row] = []
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        with services(tmp) as (reward, limited, embedding):
            rows.append(
                measured(
                    Row(
                        "1 pipelined 4 KiB requests (reward)",
                        f"1 client, {sc.pipeline_reward_s:.0f} s",
                    ),
                    reward,
                    ground_truth(reward),
                    lambda: pipelining(reward, sc.pipeline_reward_s),
                )
            )
            rows.append(
                measured(
                    Row(
                        "1 pipelined 4 KiB requests (embedding)",
                        f"1 client, {sc.pipeline_embedding_s:.0f} s",
                    ),
                    embedding,
                    embed_one(embedding),
                    lambda: pipelining(embedding, sc.pipeline_embedding_s),
                )
            )
            rows.append(
                measured(
                    Row("2 32 MiB ASCII + one emoji", "4 bodies at once"),
                    reward,
                    ground_truth(reward),
                    lambda: wide_strings(reward),
                )
            )
            rows.append(
                measured(
                    Row("3 4 MiB step_embeddings uploads", f"{sc.uploads} at once (issue: 60)"),
                    reward,
                    ground_truth(reward),
                    lambda: given_embeddings(reward, sc.uploads),
                )
            )
            rows.append(
                measured(
                    Row("4 math-verify flood vs ground_truth", "4 clients, 20 s"),
                    limited,
                    ground_truth(limited),
                    lambda: math_flood(limited, 20, 4),
                )
            )
            rows.append(
                measured(
                    Row(
                        "5 1,024-item group + 256-item groups left", f"1 + {sc.groups_left} groups"
                    ),
                    limited,
                    ground_truth(limited),
                    lambda: groups(limited, sc.groups_left),
                )
            )
            rows.append(
                measured(
                    Row(
                        "6 idle keep-alive + never-reading client",
                        f"1,024 connections, {sc.idle_hold_s:.0f} s",
                    ),
                    embedding,
                    embed_one(embedding),
                    lambda: idle_connections(embedding, 1024, sc.idle_hold_s, sc.idle_refresh_s),
                )
            )
            rows.append(
                measured(
                    Row("9 70 KB header in one packet", "1 request"),
                    reward,
                    ground_truth(reward),
                    lambda: header_70kb(reward),
                )
            )
        rows.extend(spec_rows(tmp))
        rows.append(webhook_row())
        rows.append(sigterm_mid_request(tmp))
    text = table(rows)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(text)
    print(json.dumps({"out": str(out)}))


if __name__ == "__main__":
    main()
