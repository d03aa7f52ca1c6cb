"""Browser fixtures: Debian's chromium driven by Playwright, a real server, a fake microphone.

Chromium plays `fake_mic_wav` (three espeak-ng sentences, looped) as its microphone, so
the page's real getUserMedia -> AudioWorklet -> WebSocket path runs end to end against
`python -m server` with the tiny random-weight model.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile as sf

from tests.server.conftest import REPO, ServerProcess
from tests.speech import Clip, three_sentences

CHROMIUM = Path(os.environ.get("SENSESTREAM_CHROMIUM", "/usr/bin/chromium"))
# The server wants keys of at least 16 characters.
API_KEY = "web-test-key-0123456789"
OTHER_KEY = "web-test-key-abcdefghij"
ARTIFACTS = REPO / "test-artifacts" / "web"
SKIP_ENV = "SENSESTREAM_SKIP_BROWSER"


def require_browser() -> None:
    """Fail (not skip) without the browser or Playwright: CI installs both."""
    if os.environ.get(SKIP_ENV) == "1":
        pytest.skip(f"{SKIP_ENV}=1")
    missing = []
    if importlib.util.find_spec("playwright") is None:
        missing.append("the playwright Python package: pip install -e '.[dev]'")
    if not CHROMIUM.exists():
        missing.append(f"{CHROMIUM}: apt-get install chromium (or set SENSESTREAM_CHROMIUM)")
    if missing:
        pytest.fail(
            "browser tests need " + "; ".join(missing) + f". Set {SKIP_ENV}=1 to skip them.",
            pytrace=False,
        )


@pytest.fixture(scope="session", autouse=True)
def _browser_first() -> None:
    """Check before the session fixtures (model, speech) spend their seconds."""
    require_browser()


@dataclass
class PageLog:
    """Everything the page printed, and every uncaught exception."""

    messages: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def on_console(self, message: Any) -> None:
        line = f"{message.type}: {message.text}"
        self.messages.append(line)
        if message.type == "error":
            self.errors.append(line)

    def on_page_error(self, error: Any) -> None:
        self.errors.append(f"uncaught: {error}")


@dataclass
class WebPage:
    page: Any  # playwright.sync_api.Page
    log: PageLog
    base_url: str

    def open(self, query: str = "") -> None:
        self.page.goto(self.base_url + "/" + query)
        self.page.wait_for_function("document.body.dataset.mode === 'idle'")

    def screenshot(self, name: str) -> Path:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        path = ARTIFACTS / f"{name}.png"
        self.page.screenshot(path=str(path), full_page=True)
        return path


@pytest.fixture(scope="session")
def fake_mic_wav(speech_clips: list[Clip], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three sentences with 1.5 s gaps as a 16-bit wav; chromium loops it as the mic."""
    path = tmp_path_factory.mktemp("web") / "fake-mic.wav"
    sf.write(path, three_sentences(speech_clips), 16000, subtype="PCM_16")
    return path


@pytest.fixture(scope="session")
def short_wav(speech_clips: list[Clip], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One sentence with half a second of silence either side, at 44.1 kHz stereo."""
    import soxr

    edge = np.zeros(8000, np.float32)
    mono = soxr.resample(np.concatenate([edge, speech_clips[1].audio, edge]), 16000, 44100)
    path = tmp_path_factory.mktemp("web") / "short.wav"
    sf.write(path, np.stack([mono, mono], axis=1), 44100, subtype="PCM_16")
    return path


@pytest.fixture(scope="module")
def web_server(tiny_model_dir: Path) -> Iterator[ServerProcess]:
    require_browser()
    proc = ServerProcess(tiny_model_dir)
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def keyed_server(tiny_model_dir: Path) -> Iterator[ServerProcess]:
    """A server that wants an API key (`--api-keys`)."""
    require_browser()
    proc = ServerProcess(tiny_model_dir, "--api-keys", f"{API_KEY},{OTHER_KEY}")
    yield proc
    proc.stop()


#: A name the browser resolves to 127.0.0.1, as a DNS-rebinding attacker's name would: a
#: server on loopback must not take a page from it for its own.
REBOUND_HOST = "rebind.test"


@pytest.fixture(scope="module")
def playwright_driver() -> Iterator[Any]:
    require_browser()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as driver:
        yield driver


def launch(driver: Any, fake_mic_wav: Path, *extra: str) -> Any:
    """Chromium with the fake microphone playing `fake_mic_wav`."""
    return driver.chromium.launch(
        executable_path=str(CHROMIUM),
        headless=True,
        args=[
            "--no-sandbox",  # CI runs as root
            "--use-fake-ui-for-media-stream",
            "--use-fake-device-for-media-stream",
            f"--use-file-for-fake-audio-capture={fake_mic_wav}",
            "--autoplay-policy=no-user-gesture-required",
            *extra,
        ],
    )


@pytest.fixture(scope="module")
def browser(playwright_driver: Any, fake_mic_wav: Path) -> Iterator[Any]:
    chromium = launch(playwright_driver, fake_mic_wav)
    yield chromium
    chromium.close()


@pytest.fixture(scope="module")
def rebound_browser(
    playwright_driver: Any, fake_mic_wav: Path, web_server: ServerProcess
) -> Iterator[Any]:
    """Chromium that resolves REBOUND_HOST to 127.0.0.1 and takes the web server's page
    there for a secure context (so its microphone works, as it would for an attacker's
    HTTPS page)."""
    origin = f"http://{REBOUND_HOST}:{web_server.port}"
    chromium = launch(
        playwright_driver,
        fake_mic_wav,
        f"--host-resolver-rules=MAP {REBOUND_HOST} 127.0.0.1",
        # A proxy in the environment would get the name (Chromium bypasses it for
        # loopback addresses only): this browser reaches nothing but the test server.
        "--no-proxy-server",
        f"--unsafely-treat-insecure-origin-as-secure={origin}",
    )
    yield chromium
    chromium.close()


def open_page(browser: Any, contexts: list[Any], base_url: str) -> WebPage:
    """A fresh context (kept in `contexts` for closing) and page at `base_url`."""
    context = browser.new_context(
        viewport={"width": 1280, "height": 820}, accept_downloads=True, base_url=base_url
    )
    contexts.append(context)
    context.grant_permissions(["microphone"], origin=base_url)
    page = context.new_page()
    page.set_default_timeout(20_000)
    log = PageLog()
    page.on("console", log.on_console)
    page.on("pageerror", log.on_page_error)
    return WebPage(page, log, base_url)


@pytest.fixture
def web_for(browser: Any) -> Iterator[Callable[[ServerProcess], WebPage]]:
    """A fresh browser context and page on a given server; closed after the test."""
    contexts: list[Any] = []
    yield lambda server: open_page(browser, contexts, f"http://127.0.0.1:{server.port}")
    for context in contexts:
        context.close()


@pytest.fixture
def rebound_web(rebound_browser: Any, web_server: ServerProcess) -> Iterator[WebPage]:
    """The web server's page under REBOUND_HOST, a name the server does not own."""
    contexts: list[Any] = []
    yield open_page(rebound_browser, contexts, f"http://{REBOUND_HOST}:{web_server.port}")
    for context in contexts:
        context.close()


@pytest.fixture
def web(web_for: Callable[[ServerProcess], WebPage], web_server: ServerProcess) -> WebPage:
    return web_for(web_server)


@pytest.fixture(scope="module")
def resumable_server(tiny_model_dir: Path) -> Iterator[ServerProcess]:
    """A server whose dropped v1 streams wait 30 s for their client to resume them."""
    require_browser()
    proc = ServerProcess(tiny_model_dir, "--resume-grace-s", "30")
    yield proc
    proc.stop()
