"""The loopback test servers' lifecycle: stop() and stop signals end the accept loop at once.

The foreground cases run ``serve_until_signalled`` in pytest's main thread (where Python handles
signals) and send the signal from a helper thread to that helper thread itself: the case where
the main thread, blocked in ``select``, is not the thread the kernel interrupts. A helper stops
the server itself if the signal did not, so a regression fails the test instead of hanging it.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from types import FrameType

import httpx
import pytest

from tests.support.http_server import LoopbackHandler, LoopbackServer

# Hang guards only: with prompt shutdown every wait below ends at once.
GUARD_S = 60.0

Helper = Callable[[Callable[[], None]], None]


def make_server() -> LoopbackServer:
    return LoopbackServer(host="127.0.0.1", port=0, handler=LoopbackHandler, name="test-server")


def is_healthy(server: LoopbackServer) -> bool:
    return httpx.get(f"{server.url}/health", timeout=GUARD_S).status_code == 200


def refuses_connections(server: LoopbackServer) -> bool:
    try:
        httpx.get(f"{server.url}/health", timeout=GUARD_S)
    except httpx.ConnectError:
        return True
    return False


def serving_threads(server: LoopbackServer) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.endswith(server.url)]


@pytest.fixture
def helper() -> Iterator[Helper]:
    """Run functions on helper threads; their assertion errors fail the test after it ran."""
    threads: list[threading.Thread] = []
    errors: list[BaseException] = []

    def run(fn: Callable[[], None]) -> None:
        def guarded() -> None:
            try:
                fn()
            except BaseException as e:  # surfaced below, on the test's thread
                errors.append(e)

        thread = threading.Thread(target=guarded, name="signal-helper", daemon=True)
        threads.append(thread)
        thread.start()

    yield run
    for thread in threads:
        thread.join(timeout=GUARD_S)
    if errors:
        raise errors[0]


def signal_this_thread(
    server: LoopbackServer, signum: int, ready: threading.Event, returned: threading.Event
) -> None:
    """Once ``ready``: check the server answers, send ``signum`` to this (non-main) thread, and
    stop the server if ``serve_until_signalled`` has not ``returned`` within the guard."""
    assert ready.wait(GUARD_S)
    assert is_healthy(server)
    signal.pthread_kill(threading.get_ident(), signum)
    if not returned.wait(GUARD_S):
        server.stop()
        raise AssertionError(f"{signal.Signals(signum).name} did not stop the server")


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_stop_signal_delivered_to_another_thread_stops_the_foreground_server(
    signum: signal.Signals, helper: Helper
) -> None:
    server = make_server()
    ready, returned = threading.Event(), threading.Event()
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    helper(lambda: signal_this_thread(server, signum, ready, returned))
    try:
        server.serve_until_signalled(on_ready=ready.set)
    finally:
        returned.set()
    assert {s: signal.getsignal(s) for s in before} == before  # handlers restored
    assert refuses_connections(server)


def test_wakeup_descriptor_is_restored_after_serving(helper: Helper) -> None:
    server = make_server()
    ready, returned = threading.Event(), threading.Event()
    helper(lambda: signal_this_thread(server, signal.SIGINT, ready, returned))
    try:
        server.serve_until_signalled(on_ready=ready.set)
    finally:
        returned.set()
    previous = signal.set_wakeup_fd(-1)  # what serve_until_signalled left in place
    signal.set_wakeup_fd(previous)
    assert previous == -1


def test_stop_signal_sent_before_the_loop_starts_is_not_lost() -> None:
    server = make_server()
    # on_ready runs once the signals are caught, just before the accept loop starts.
    server.serve_until_signalled(on_ready=lambda: signal.raise_signal(signal.SIGTERM))
    assert refuses_connections(server)


def test_other_signals_do_not_stop_the_foreground_server(helper: Helper) -> None:
    server = make_server()
    ready, returned = threading.Event(), threading.Event()
    seen: list[int] = []

    def note(signum: int, frame: FrameType | None) -> None:
        seen.append(signum)

    def usr1_then_int() -> None:
        assert ready.wait(GUARD_S)
        signal.pthread_kill(threading.get_ident(), signal.SIGUSR1)  # wakes the loop too
        signal_this_thread(server, signal.SIGINT, ready, returned)  # checks it still serves

    previous = signal.signal(signal.SIGUSR1, note)
    try:
        helper(usr1_then_int)
        server.serve_until_signalled(on_ready=ready.set)
    finally:
        returned.set()
        signal.signal(signal.SIGUSR1, previous)
    assert seen == [signal.SIGUSR1]
    assert refuses_connections(server)


def test_stop_ends_the_background_thread_and_hangs_up_idle_connections() -> None:
    server = make_server().start()
    client = httpx.Client(timeout=GUARD_S)  # keeps its connection open between requests
    try:
        assert client.get(f"{server.url}/health").status_code == 200
        assert serving_threads(server)
        server.stop()
        assert not serving_threads(server)
        with pytest.raises(httpx.TransportError):  # the idle connection was hung up
            client.get(f"{server.url}/health")
    finally:
        client.close()
        server.stop()


def test_stop_is_idempotent_and_a_stopped_server_does_not_serve_again() -> None:
    server = make_server()
    server.stop()  # never started
    server.stop()
    server.serve_forever()  # returns at once: stopped
    assert refuses_connections(server)


def test_serve_until_signalled_refuses_to_run_off_the_main_thread() -> None:
    server = make_server()
    errors: list[BaseException] = []

    def run() -> None:
        try:
            server.serve_until_signalled()
        except RuntimeError as e:
            errors.append(e)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(timeout=GUARD_S)
    server.stop()
    assert len(errors) == 1 and "main thread" in str(errors[0])
