"""A minimal Chrome DevTools Protocol client: headless Chromium driven over its websocket.

Used by :mod:`tests.browser.mlflow_screenshots` to open MLflow's UI, click where a person
clicks, read the page's text and take screenshots. Needs a ``chromium`` binary (Debian:
``apt-get install chromium``) and ``websocket-client`` (installed with the Kubernetes client of
``sarl[dev]``). Only the few CDP methods the screenshots need: ``Page.navigate``,
``Runtime.evaluate``, ``Page.captureScreenshot``.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "chrome")


def find_chromium() -> str | None:
    """The path of a Chromium (or Chrome) binary on PATH, else None."""
    return next((p for p in map(shutil.which, CHROMIUM_NAMES) if p), None)


class Page:
    """One browser tab; every call waits for Chromium's answer."""

    def __init__(self, ws_url: str) -> None:
        import websocket  # websocket-client

        self._ws = websocket.create_connection(ws_url, timeout=60, suppress_origin=True)
        self._ids = itertools.count(1)

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        """Send one CDP command and return its result (events in between are skipped)."""
        msg_id = next(self._ids)
        self._ws.send(json.dumps({"id": msg_id, "method": method, "params": params}))
        while True:
            reply = json.loads(self._ws.recv())
            if reply.get("id") != msg_id:
                continue
            if "error" in reply:
                raise RuntimeError(f"CDP {method}: {reply['error']}")
            return dict(reply.get("result") or {})

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (promises awaited)."""
        result = self.call(
            "Runtime.evaluate", expression=expression, awaitPromise=True, returnByValue=True
        )
        if "exceptionDetails" in result:
            raise RuntimeError(f"JavaScript failed: {result['exceptionDetails']}")
        return result.get("result", {}).get("value")

    def click(self, element_js: str, what: str = "") -> None:
        """Click, as a mouse does, the middle of the element ``element_js`` evaluates to (menus
        of MLflow's UI open on pointer events, which ``element.click()`` does not send)."""
        box = self.evaluate(
            f"(() => {{ const e = {element_js}; if (!e) return null; e.scrollIntoView("
            "{block: 'center'}); const r = e.getBoundingClientRect(); "
            "return [r.x + r.width / 2, r.y + r.height / 2]; })()"
        )
        if not box:
            raise LookupError(f"nothing to click: {what or element_js}")
        x, y = box
        self.call("Input.dispatchMouseEvent", type="mouseMoved", x=x, y=y)
        for kind in ("mousePressed", "mouseReleased"):
            self.call("Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left", clickCount=1)

    def click_text(
        self, text: str, selector: str = "button, [role=menuitem], [role=option]"
    ) -> None:
        """Click the first visible ``selector`` element whose text is ``text``."""
        self.click(
            f"Array.from(document.querySelectorAll({json.dumps(selector)})).find(e => "
            f"e.offsetParent !== null && e.innerText.trim() === {json.dumps(text)})",
            text,
        )

    def click_label(self, text: str) -> None:
        """Click the innermost visible element whose whole text is ``text`` (a tree node, a
        tab: MLflow draws some of them without button roles)."""
        area = "(e => e.getBoundingClientRect().width * e.getBoundingClientRect().height)"
        self.click(
            "Array.from(document.querySelectorAll('body *')).filter(e => e.offsetParent !== null"
            f" && e.textContent.trim() === {json.dumps(text)})"
            f".sort((a, b) => {area}(a) - {area}(b))[0]",
            text,
        )

    def goto(self, url: str) -> None:
        self.call("Page.navigate", url=url)

    def text(self) -> str:
        return str(self.evaluate("document.body ? document.body.innerText : ''"))

    def wait_for(self, expression: str, timeout_s: float = 60.0, what: str = "") -> None:
        """Poll until ``expression`` is truthy in the page (the UI renders asynchronously)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with contextlib.suppress(RuntimeError):  # the page may be mid-navigation
                if self.evaluate(f"!!({expression})"):  # a DOM node cannot come back by value
                    return
            time.sleep(0.5)
        raise TimeoutError(f"page never showed {what or expression!r}; it shows:\n{self.text()}")

    def wait_for_text(self, text: str, timeout_s: float = 60.0) -> None:
        self.wait_for(
            f"document.body && document.body.innerText.includes({json.dumps(text)})",
            timeout_s,
            text,
        )

    def screenshot(self, path: Path) -> Path:
        data = self.call("Page.captureScreenshot", format="png")["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))
        return path

    def close(self) -> None:
        self._ws.close()


@contextlib.contextmanager
def headless_chromium(width: int = 1600, height: int = 1000) -> Iterator[Page]:
    """A fresh headless Chromium (new profile: nothing remembered, as a first visit) and its
    first tab; the browser and its profile are removed on exit."""
    binary = find_chromium()
    if binary is None:
        raise RuntimeError("no chromium on PATH (Debian: apt-get install chromium)")
    profile = Path(tempfile.mkdtemp(prefix="sarl-chromium-"))
    command = [
        binary,
        "--headless=new",
        "--no-sandbox",  # root in a container has no user namespaces for the sandbox
        "--disable-gpu",
        "--hide-scrollbars",
        "--no-first-run",
        "--remote-debugging-port=0",
        f"--user-data-dir={profile}",
        f"--window-size={width},{height}",
        "about:blank",
    ]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    page: Page | None = None
    try:
        port_file = profile / "DevToolsActivePort"  # Chromium writes its port here
        deadline = time.monotonic() + 60
        while not port_file.is_file() or not port_file.read_text().strip():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"chromium did not start (exit code {proc.poll()})")
            time.sleep(0.2)
        port = int(port_file.read_text().split()[0])
        tabs = httpx.get(f"http://127.0.0.1:{port}/json/list", timeout=10).json()
        ws_url = next(t["webSocketDebuggerUrl"] for t in tabs if t.get("type") == "page")
        page = Page(ws_url)
        page.call(
            "Emulation.setDeviceMetricsOverride",
            width=width, height=height, deviceScaleFactor=1, mobile=False,
        )  # fmt: skip
        yield page
    finally:
        if page is not None:
            page.close()
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(profile, ignore_errors=True)
