"""The browser client in headless Chromium against a real server.

Microphone captions (fake capture device), file upload and drop, keyboard use, the engine
panel, downloads, reconnect, the worklet's resampler, refused connections (API key,
origin, a busy server), layout at phone and desktop widths, contrast and live regions,
all with no console errors.
"""

from __future__ import annotations

import base64
import itertools
import json
import re
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.server.conftest import ServerProcess
from tests.web.conftest import API_KEY, WebPage

# Records every partial text and the loudest meter reading the page shows, because both
# change faster than a test can poll for them.
WATCH_PAGE = """() => {
  window.__seen = { partials: [], stableChars: 0, loudest: -60 };
  const partial = document.getElementById('partial');
  new MutationObserver(() => {
    const text = partial.textContent;
    if (text && text !== '…') window.__seen.partials.push(text);
    const stable = partial.querySelector('.stable');
    if (stable) window.__seen.stableChars = Math.max(window.__seen.stableChars,
                                                     stable.textContent.length);
  }).observe(partial, { childList: true, subtree: true, characterData: true });
  const level = document.getElementById('level');
  new MutationObserver(() => {
    window.__seen.loudest = Math.max(window.__seen.loudest,
                                     Number(level.getAttribute('aria-valuenow')));
  }).observe(level, { attributes: true, attributeFilter: ['aria-valuenow'] });
}"""

# Captions only: the list also holds a line for each reconnect ("Reconnected after …").
FINALS = "#finals li.final"


def final_count(web: WebPage) -> int:
    return int(web.page.locator(FINALS).count())


def wait_finals(web: WebPage, at_least: int, timeout: float = 30_000) -> None:
    web.page.wait_for_function(
        f"document.querySelectorAll('{FINALS}').length >= {at_least}", timeout=timeout
    )


def assert_clean_console(web: WebPage, allow: re.Pattern[str] | None = None) -> None:
    errors = [e for e in web.log.errors if allow is None or not allow.search(e)]
    assert not errors, "console errors:\n" + "\n".join(web.log.messages)


# Chromium logs every refused handshake and every non-2xx fetch; for a refused
# connection, those are the expected ones.
REFUSAL_ERRORS = re.compile(
    r"WebSocket connection to '[^']*' failed"
    r"|Failed to load resource: the server responded with a status of (401|403|426|503)"
)


def test_microphone_gives_live_partials_finals_and_engine_stats(web: WebPage) -> None:
    page = web.page
    web.open()
    page.evaluate(WATCH_PAGE)
    # The first /stats poll reports the random-weight model: the banner must say so.
    warning = page.locator("#test-model-warning")
    warning.wait_for(state="visible")
    assert "random weights: transcripts are meaningless" in warning.inner_text()

    page.click("#start")
    start = page.locator("#start")
    assert start.inner_text() == "Stop"
    page.wait_for_function("Number(document.body.dataset.connects) >= 1")

    page.wait_for_function("window.__seen.partials.length >= 1")
    wait_finals(web, 1)
    # The engine panel polls every 2 s; it must show this session.
    page.wait_for_function("Number(document.getElementById('stat-sessions').textContent) >= 1")
    page.wait_for_function("document.getElementById('latency').dataset.lastMs !== undefined")
    # The screenshot shows a final and the next sentence's live partial.
    page.wait_for_function("document.querySelector('#partial .stable') !== null")
    web.screenshot("microphone")

    first = page.locator(FINALS).first
    assert re.fullmatch(r"\d\d:\d\d", first.locator("time").inner_text())
    assert first.locator(".text").inner_text().strip()
    latency_ms = int(page.locator("#latency").get_attribute("data-last-ms") or "-1")
    # Mostly the end-of-speech silence the VAD waits for (500 ms by default).
    assert 0 < latency_ms < 10_000, latency_ms
    # The server's decided_ms splits off the VAD's end-silence: what follows it is shorter.
    after_vad_ms = int(page.locator("#latency").get_attribute("data-after-vad-ms") or "-1")
    assert 0 <= after_vad_ms < latency_ms, (after_vad_ms, latency_ms)
    assert "after the VAD decided" in page.locator("#latency").inner_text()
    seen = page.evaluate("window.__seen")
    assert seen["loudest"] > -40, seen  # the meter moved with the fake microphone's speech
    assert page.locator("#level").get_attribute("data-input-rate") in ("44100", "48000")
    assert page.locator("#stat-memory").inner_text().count("/") == 1
    assert page.locator("#stat-batches").inner_text() != "–"

    # A dropped socket while running comes back by itself, and captions keep coming: the
    # stream resumed where the server resumes streams (--resume-grace-s), else a new one.
    before = final_count(web)
    page.evaluate("window.sensestream.dropConnection()")
    page.wait_for_function(
        "Number(document.body.dataset.connects) + Number(document.body.dataset.resumes ?? 0)"
        " >= 2 && document.querySelector('#finals li.gap') !== null",
        timeout=15_000,
    )
    wait_finals(web, before + 1)

    page.click("#start")
    page.wait_for_function("document.body.dataset.mode === 'idle'")
    assert start.inner_text() == "Start"
    times = page.locator(f"{FINALS} time").all_inner_texts()
    assert times == sorted(times)  # the page clock runs on across the reconnect

    # Transcript downloads.
    with page.expect_download() as srt_download:
        page.click("#download-srt")
    srt = Path(srt_download.value.path()).read_text(encoding="utf-8")
    assert srt_download.value.suggested_filename.endswith(".srt")
    assert re.match(r"1\n\d\d:\d\d:\d\d,\d{3} --> \d\d:\d\d:\d\d,\d{3}\n\S", srt), srt
    assert srt.count(" --> ") == final_count(web)
    with page.expect_download() as txt_download:
        page.click("#download-txt")
    txt = Path(txt_download.value.path()).read_text(encoding="utf-8")
    assert len(txt.splitlines()) == final_count(web)
    assert all(re.match(r"\[\d\d:\d\d\] \S", line) for line in txt.splitlines()), txt
    assert_clean_console(web)


def test_file_input_streams_the_file_and_yields_its_finals(
    web: WebPage, fake_mic_wav: Path
) -> None:
    page = web.page
    web.open()
    page.set_input_files("#file", str(fake_mic_wav))
    page.wait_for_function("document.body.dataset.mode === 'file'")
    page.wait_for_function("document.body.dataset.mode === 'idle'", timeout=40_000)
    status = page.locator("#status").inner_text()
    assert status.startswith("Done: 3 caption(s)"), status
    assert final_count(web) == 3
    times = page.locator(f"{FINALS} time").all_inner_texts()
    # Three sentences 1.5 s apart after 0.5 s of lead-in: they start within the first 10 s.
    assert times[0] == "00:00"
    assert times == sorted(times)
    assert times[-1] < "00:10"
    web.screenshot("file")
    assert_clean_console(web)


def test_dropped_file_is_transcribed(web: WebPage, short_wav: Path) -> None:
    page = web.page
    web.open()
    data = base64.b64encode(short_wav.read_bytes()).decode()
    page.evaluate(
        """(b64) => {
          const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
          const dt = new DataTransfer();
          dt.items.add(new File([bytes], 'short.wav', { type: 'audio/wav' }));
          for (const type of ['dragenter', 'dragover', 'drop']) {
            document.body.dispatchEvent(
              new DragEvent(type, { dataTransfer: dt, bubbles: true, cancelable: true }));
          }
        }""",
        data,
    )
    page.wait_for_function("document.body.dataset.mode === 'idle'", timeout=30_000)
    assert page.locator("#status").inner_text().startswith("Done: 1 caption(s) from short.wav")
    assert page.locator("#drop-overlay").is_hidden()
    assert final_count(web) == 1
    assert_clean_console(web)


def test_keyboard_alone_starts_and_stops(web: WebPage) -> None:
    page = web.page
    web.open()
    for _ in range(10):
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.id") == "start":
            break
    # Focused, and its accessible name (what a screen reader says) is "Start".
    is_focused = "e => e === document.activeElement"
    assert page.get_by_role("button", name="Start").evaluate(is_focused), "Tab missed Start"

    page.keyboard.press("Enter")
    assert page.get_by_role("button", name="Stop").evaluate(is_focused)
    page.wait_for_function("Number(document.body.dataset.connects) >= 1")
    page.keyboard.press("Space")
    page.wait_for_function("document.body.dataset.mode === 'idle'")
    assert page.get_by_role("button", name="Start").evaluate(is_focused)

    # The option toggles are labelled checkboxes that Space flips.
    partials = page.get_by_label("Partials")
    partials.focus()
    page.keyboard.press("Space")
    assert not partials.is_checked()
    assert page.get_by_label("Language").evaluate("e => e.tagName") == "SELECT"
    assert page.locator("#captions").get_attribute("aria-live") == "polite"
    assert_clean_console(web)


def test_worklet_resampler_is_band_limited(web: WebPage) -> None:
    """The worklet's resampler, run in the page: flat to 6 kHz, aliases far below -60 dB."""
    web.open()
    gains = web.page.evaluate(
        """async () => {
          const { Resampler } = await import('/resampler.js');
          const gain = (rate, freq) => {
            const r = new Resampler(rate, 16000);
            const x = new Float32Array(rate);
            for (let i = 0; i < x.length; i++) x[i] = 0.5 * Math.sin(2 * Math.PI * freq * i / rate);
            const out = [];
            for (let i = 0; i < x.length; i += 128) out.push(...r.push(x.subarray(i, i + 128)));
            const y = out.slice(1000, out.length - 1000);
            const rms = Math.sqrt(y.reduce((s, v) => s + v * v, 0) / y.length);
            return { n: out.length, db: 20 * Math.log10(rms / (0.5 / Math.SQRT2)) };
          };
          const result = {};
          for (const rate of [48000, 44100]) {
            for (const freq of [300, 1000, 5000, 9000, 12000, 18000]) {
              result[`${rate}/${freq}`] = gain(rate, freq);
            }
          }
          return result;
        }"""
    )
    for key, got in gains.items():
        freq = int(key.split("/")[1])
        assert abs(got["n"] - 16000) < 50, (key, got)  # the clock stays locked
        if freq <= 5000:
            assert abs(got["db"]) < 0.1, (key, got)
        else:
            assert got["db"] < -60, (key, got)
    assert_clean_console(web)


class ScriptedServer:
    """Stands in for /ws inside the page (Playwright WebSocket routing) with set events."""

    def __init__(self, script: dict[int, list[dict[str, Any]]], refuse_pace: bool = False):
        self.script = script  # audio frame number (per connection) -> events to send
        self.refuse_pace = refuse_pace
        self.starts: list[dict[str, Any]] = []
        self.connections = 0

    def __call__(self, ws: Any) -> None:
        self.connections += 1
        frames = 0

        def send(event: dict[str, Any]) -> None:
            ws.send(json.dumps({"v": 1, **event}))

        def on_message(message: str | bytes) -> None:
            nonlocal frames
            if isinstance(message, bytes):
                frames += 1
                for event in self.script.get(frames, []):
                    if event["type"] == "close":
                        ws.close(code=event["code"], reason="scripted")
                    else:
                        send(event)
                return
            msg = json.loads(message)
            if msg["type"] == "start":
                self.starts.append(msg)
                if self.refuse_pace and "pace" in msg:
                    send({"type": "error", "code": "invalid_field", "message": "unknown pace"})
                    ws.close(code=1008, reason="invalid_field")
                    return
                send(
                    {
                        "type": "ready",
                        "session_id": f"scripted{self.connections}",
                        "config": {},
                        "model": "scripted",
                        "test_model": False,
                    }
                )
            elif msg["type"] == "stop":
                for event in self.script.get(-1, []):
                    send(event)
                send({"type": "end"})
                ws.close(code=1000)

        ws.on_message(on_message)


def final(start_ms: int, text: str, utt_id: int = 0, **fields: Any) -> dict[str, Any]:
    return {
        "type": "final",
        "utt_id": utt_id,
        "start_ms": start_ms,
        "end_ms": start_ms + 1500,
        "text": text,
        "lang": "en",
        "itn": True,
        "rich_text": text,
        **fields,
    }


STATS = {
    "state": "ready",
    "sessions": 5,
    "test_model": False,
    "engine": {"backend": "onnx-fp16-cuda"},
    "queue": {"depth": 2},
    "batches": {"count": 120, "max_batch": 8},
    "memory": {"budget_bytes": 4 << 30, "in_use_bytes": 1 << 30},
    "process": {
        "gpus": [
            {
                "index": 0,
                "name": "H200",
                "memory_used": 1,
                "memory_total": 2,
                "utilization_pct": 37,
                "temperature_c": 61,
            }
        ]
    },
}


def test_captions_badges_partials_gpu_panel_and_reconnect_with_a_scripted_server(
    web: WebPage,
) -> None:
    """Exact rendering, independent of the random model: a scripted /ws and /stats."""
    page = web.page
    server = ScriptedServer(
        {
            1: [
                {"type": "speech_started", "utt_id": 0, "start_ms": 61_000},
                # 8 code points are stable: the wave emoji is two UTF-16 units but one char.
                {
                    "type": "partial",
                    "utt_id": 0,
                    "start_ms": 61_000,
                    "end_ms": 61_800,
                    "text": "héllo 👋 wor",
                    "stable_chars": 8,
                    "lang": "en",
                    "emotion": "happy",
                    "event": "speech",
                },
            ],
            40: [
                final(61_000, "Hello world.", emotion="happy", event="applause"),
                final(63_000, "Plain words.", 1, emotion="neutral", event="speech"),
                final(65_000, "Ahem.", 2, emotion="unknown", event="cough"),
                {"type": "close", "code": 1012},
            ],  # a server restart: the page must come back
        }
    )
    page.route_web_socket(re.compile(r".*/ws$"), server)
    page.route("**/stats", lambda route: route.fulfill(json=STATS))
    web.open()
    page.select_option("#language", "en")
    page.uncheck("#opt-itn")
    page.click("#start")

    page.wait_for_function("document.querySelector('#partial .stable') !== null")
    assert page.locator("#partial .stable").inner_text() == "héllo 👋 "
    assert page.locator("#partial .unstable").inner_text() == "wor"
    wait_finals(web, 3)
    lines = page.locator(FINALS)
    assert lines.nth(0).locator("time").inner_text() == "01:01"
    assert lines.nth(0).locator(".emotion").get_attribute("aria-label") == "emotion: happy"
    assert lines.nth(0).locator(".emotion").inner_text() == "😊"
    assert lines.nth(0).locator(".event").inner_text() == "👏"
    assert lines.nth(1).locator(".emotion, .event").count() == 0
    assert lines.nth(2).locator(".event").inner_text() == "🤧"
    assert lines.nth(2).locator(".emotion").count() == 0
    assert page.locator("#partial").inner_text() == ""

    # Closed with 1012 after the finals: reconnect after backoff, with the same options.
    page.wait_for_function("Number(document.body.dataset.connects) >= 2", timeout=10_000)
    assert server.connections == 2
    expected = {
        "type": "start",
        "sample_rate": 16000,
        "encoding": "pcm_s16le",
        "channels": 1,
        "language": "en",
        "itn": False,
        "partials": True,
        "commit": "pauses",
        "emotion": True,
        "event": True,
        "timestamps": True,
    }
    assert server.starts == [expected, expected]
    # `ready` gave no resume token: a new stream, and the transcript says what was lost.
    gap = page.locator("#finals li.gap")
    assert re.fullmatch(
        r"Reconnected after \d+\.\d s as a new stream: speech in the gap is lost",
        gap.inner_text(),
    ), gap.inner_text()

    # The engine panel with a GPU and real weights.
    assert page.locator("#stat-sessions").inner_text() == "5"
    assert page.locator("#stat-queue").inner_text() == "2"
    assert page.locator("#stat-batches").inner_text() == "8 / 120"
    assert page.locator("#stat-memory").inner_text() == "1.0\u00a0GiB / 4.0\u00a0GiB"
    assert page.locator("#stat-gpu-util").inner_text() == "37%"
    assert page.locator("#stat-gpu-temp").inner_text() == "61\u00a0°C"
    assert page.locator("#test-model-warning").is_hidden()
    web.screenshot("scripted")
    page.click("#start")
    page.wait_for_function("document.body.dataset.mode === 'idle'")
    assert_clean_console(web)


def test_file_falls_back_when_the_server_does_not_know_pace(web: WebPage, short_wav: Path) -> None:
    page = web.page
    server = ScriptedServer({-1: [final(500, "From the file.")]}, refuse_pace=True)
    page.route_web_socket(re.compile(r".*/ws$"), server)
    web.open()
    page.set_input_files("#file", str(short_wav))
    page.wait_for_function("document.body.dataset.mode === 'idle'", timeout=20_000)
    assert page.locator("#status").inner_text() == "Done: 1 caption(s) from short.wav."
    assert [s.get("pace") for s in server.starts] == ["replay", None]
    assert_clean_console(web)


# ---- layout ------------------------------------------------------------------------------

OVERFLOW = """() => {
  const name = (e) => `${e.tagName.toLowerCase()}#${e.id}.${e.className}`;
  const right = (e) => e.getBoundingClientRect().right;
  const cards = '.top, .banner, .key-form, .controls, .captions-card, .card';
  return {
    scrollWidth: document.documentElement.scrollWidth,
    innerWidth: window.innerWidth,
    // What sticks out of the window, or out of its card (a smaller break, same cause).
    wide: [...document.querySelectorAll('body *')]
      .filter((e) => right(e) > window.innerWidth + 0.5)
      .map(name),
    outOfCard: [...document.querySelectorAll('body *')]
      .filter((e) => e.closest(cards) && right(e) > right(e.closest(cards)) + 0.5)
      .map(name),
  };
}"""


def assert_no_horizontal_overflow(web: WebPage) -> None:
    got = web.page.evaluate(OVERFLOW)
    assert got["scrollWidth"] <= got["innerWidth"], got
    assert not got["outOfCard"], got


# Eight GPUs: the readings make the longest values the engine panel shows.
MANY_GPUS = {
    **STATS,
    "test_model": True,
    "memory": {"budget_bytes": 1100 << 30, "in_use_bytes": 123 << 30},
    "process": {
        "gpus": [{"index": i, "utilization_pct": 100, "temperature_c": 61 + i} for i in range(8)]
    },
}
LONG_WORD = "Donaudampfschifffahrtsgesellschaftskapitänsmützenabzeichen" * 2
LONG_URL = "https://example.com/" + "a-very-long-path-segment/" * 6


def partial(start_ms: int, text: str, stable_chars: int) -> dict[str, Any]:
    return {
        "type": "partial",
        "utt_id": 1,
        "start_ms": start_ms,
        "end_ms": start_ms + 800,
        "text": text,
        "stable_chars": stable_chars,
        "lang": "en",
        "emotion": "neutral",
        "event": "speech",
    }


@pytest.mark.parametrize("width", [320, 390, 1280])  # 320: WCAG reflow
def test_no_horizontal_overflow_at_phone_and_desktop_widths(web: WebPage, width: int) -> None:
    """Nothing sticks out sideways: empty, or full of long words and many GPUs."""
    page = web.page
    page.set_viewport_size({"width": width, "height": 820})
    server = ScriptedServer(
        {
            10: [
                final(1_000, f"{LONG_WORD} {LONG_URL}", emotion="happy", event="applause"),
                final(3_000, LONG_URL, 1, emotion="neutral", event="speech"),
            ],
            15: [partial(5_000, f"stable {LONG_WORD} {LONG_URL}", 7)],
        }
    )
    page.route_web_socket(re.compile(r".*/ws$"), server)
    page.route("**/stats", lambda route: route.fulfill(json=MANY_GPUS))
    web.open()
    page.locator("#test-model-warning").wait_for(state="visible")
    assert_no_horizontal_overflow(web)

    page.click("#start")
    wait_finals(web, 2)
    page.wait_for_function("document.querySelector('#partial .unstable') !== null")
    assert page.locator("#stat-gpu-temp").inner_text().count("°C") == 8
    assert_no_horizontal_overflow(web)
    web.screenshot(f"layout-{width}")
    page.click("#start")
    page.wait_for_function("document.body.dataset.mode === 'idle'")
    assert_clean_console(web)


# ---- contrast and live regions -----------------------------------------------------------

# WCAG 2.x relative luminance and contrast ratio, from computed colours. The page has
# opaque cards, so an element's background is the first opaque one at or above it.
CONTRAST_HELPERS = """
  const rgba = (c) => {
    const [r, g, b, a = 1] = c.match(/[\\d.]+/g).map(Number);
    return { rgb: [r, g, b], a };
  };
  const channel = (v) => {
    const s = v / 255;
    return s <= 0.04045 ? s / 12.92 : ((s + 0.055) / 1.055) ** 2.4;
  };
  const luminance = ([r, g, b]) =>
    0.2126 * channel(r) + 0.7152 * channel(g) + 0.0722 * channel(b);
  const ratio = (x, y) => {
    const [hi, lo] = [luminance(x), luminance(y)].sort((p, q) => q - p);
    return Math.round(((hi + 0.05) / (lo + 0.05)) * 100) / 100;
  };
  const background = (el) => {
    for (let e = el; e; e = e.parentElement) {
      const c = rgba(getComputedStyle(e).backgroundColor);
      if (c.a === 1) return c.rgb;
    }
    return [255, 255, 255];
  };
  const name = (e) => `${e.tagName.toLowerCase()}#${e.id}.${e.className}`;
"""

# Every visible text that is not part of a disabled control: 4.5:1, or 3:1 when large.
TEXT_CONTRAST = f"""() => {{
  {CONTRAST_HELPERS}
  const ownText = (e) =>
    [...e.childNodes].some((n) => n.nodeType === Node.TEXT_NODE && n.textContent.trim());
  const inactive = (e) => e.closest(':disabled, [aria-disabled="true"]') !== null;
  return [...document.body.querySelectorAll('*')]
    .filter((e) => ownText(e) && e.checkVisibility() && !inactive(e))
    .map((e) => {{
      const style = getComputedStyle(e);
      const px = parseFloat(style.fontSize);
      const large = px >= 24 || (px >= 18.66 && Number(style.fontWeight) >= 700);
      const got = ratio(rgba(style.color).rgb, background(e));
      return {{ element: name(e), text: e.textContent.trim().slice(0, 40), got,
               needed: large ? 3 : 4.5 }};
    }});
}}"""

# The focused element's ring, against the background it is drawn on: the outline sits
# outside the element (outline-offset), on its parent's background.
FOCUS_RING = f"""() => {{
  {CONTRAST_HELPERS}
  const e = document.activeElement;
  const style = getComputedStyle(e);
  return {{
    element: name(e),
    visible: e.matches(':focus-visible'),
    style: style.outlineStyle,
    width: parseFloat(style.outlineWidth),
    got: ratio(rgba(style.outlineColor).rgb, background(e.parentElement)),
  }};
}}"""


def test_partial_captions_and_focus_ring_meet_wcag_aa_contrast(web: WebPage) -> None:
    page = web.page
    server = ScriptedServer(
        {5: [final(1_000, "A final caption.")], 8: [partial(3_000, "settled words then more", 13)]}
    )
    page.route_web_socket(re.compile(r".*/ws$"), server)
    page.route("**/stats", lambda route: route.fulfill(json={**STATS, "test_model": True}))
    web.open()
    page.locator("#test-model-warning").wait_for(state="visible")

    # Every control the keyboard reaches on the idle page shows a ring of 3:1 or more.
    rings: dict[str, dict[str, Any]] = {}
    for _ in range(20):
        page.keyboard.press("Tab")
        ring = page.evaluate(FOCUS_RING)
        if ring["element"].startswith("body"):
            break  # past the last control
        rings[ring["element"]] = ring
    assert any(name.startswith("button#start") for name in rings), rings
    assert any(name.startswith("input#opt-itn") for name in rings), rings
    for ring in rings.values():
        assert ring["visible"] and ring["style"] != "none" and ring["width"] >= 2, ring
        assert ring["got"] >= 3, ring

    page.click("#start")
    wait_finals(web, 1)
    page.wait_for_function("document.querySelector('#partial .unstable') !== null")
    texts = page.evaluate(TEXT_CONTRAST)
    partials = [t for t in texts if t["element"].startswith("span#.unstable")]
    assert partials and partials[0]["text"] == "then more", texts
    assert partials[0]["got"] >= 4.5, partials
    low = [t for t in texts if t["got"] < t["needed"]]
    assert not low, low
    page.click("#start")
    page.wait_for_function("document.body.dataset.mode === 'idle'")
    assert_clean_console(web)


LIVE_ANCESTRY = """(id) => {
  // <output> is an implicit role=status live region, as are these roles.
  const live = ['status', 'log', 'alert', 'marquee', 'timer'];
  const found = [];
  for (let e = document.getElementById(id); e; e = e.parentElement) {
    const role = e.getAttribute('role') ?? (e.tagName === 'OUTPUT' ? 'status' : null);
    const politeness = e.getAttribute('aria-live');
    if (live.includes(role) || (politeness && politeness !== 'off')) {
      found.push(`${e.tagName.toLowerCase()}#${e.id} role=${role} aria-live=${politeness}`);
    }
  }
  return found;
}"""


def test_latency_readout_is_not_announced_but_finals_are(web: WebPage) -> None:
    page = web.page
    web.open()
    assert page.evaluate(LIVE_ANCESTRY, "latency") == []
    # The finals stay in a polite live region; the partial stays out of it.
    assert page.evaluate(LIVE_ANCESTRY, "finals") == ["div#captions role=null aria-live=polite"]
    assert page.locator("#partial").get_attribute("aria-hidden") == "true"
    assert page.locator("#latency").inner_text() == "–"
    assert_clean_console(web)


# ---- refused connections -------------------------------------------------------------------

# Records when the page opens each WebSocket, on the page's own clock.
COUNT_SOCKETS = """
  window.__sockets = [];
  const Native = window.WebSocket;
  window.WebSocket = class extends Native {
    constructor(...args) {
      super(...args);
      window.__sockets.push({ url: String(args[0]), at: performance.now() });
    }
  };
"""


def sockets(web: WebPage) -> list[dict[str, Any]]:
    return list(web.page.evaluate("window.__sockets"))


def status(web: WebPage) -> str:
    return str(web.page.locator("#status").inner_text())


def test_missing_or_wrong_api_key_asks_for_one_and_stops_reconnecting(
    web_for: Callable[[ServerProcess], WebPage], keyed_server: ServerProcess
) -> None:
    web = web_for(keyed_server)
    page = web.page
    page.set_viewport_size({"width": 390, "height": 820})  # the key field fits a phone too
    page.add_init_script(COUNT_SOCKETS)
    web.open()
    page.click("#start")
    key = page.get_by_label("API key")
    key.wait_for(state="visible")
    page.wait_for_function("document.body.dataset.mode === 'idle'")
    assert status(web) == "This server needs an API key"
    assert page.locator("#key-message").inner_text() == "This server needs an API key."
    assert key.evaluate("e => e === document.activeElement")
    assert_no_horizontal_overflow(web)
    web.screenshot("api-key-390")
    # The old page went on reconnecting after 0.5, 1 and 2 s; this one has stopped.
    page.wait_for_timeout(3_000)
    assert len(sockets(web)) == 1
    assert status(web) == "This server needs an API key"

    key.fill("not-the-key-0123456789")
    page.get_by_role("button", name="Connect").click()
    page.wait_for_function("document.getElementById('status').textContent.includes('refused')")
    key.wait_for(state="visible")
    assert status(web) == "The API key was refused"
    assert sockets(web)[-1]["url"].endswith("/ws?token=not-the-key-0123456789")

    key.fill(API_KEY)
    key.press("Enter")
    page.wait_for_function("Number(document.body.dataset.connects) >= 1")
    assert page.locator("#key-form").is_hidden()
    wait_finals(web, 1)
    assert len(sockets(web)) == 3
    assert sockets(web)[-1]["url"].endswith(f"/ws?token={API_KEY}")
    page.click("#start")
    page.wait_for_function("document.body.dataset.mode === 'idle'")

    # The key lives in this tab's sessionStorage: a reload connects without asking.
    page.reload()
    page.wait_for_function("document.body.dataset.mode === 'idle'")
    page.click("#start")
    page.wait_for_function("Number(document.body.dataset.connects) >= 1")
    assert len(sockets(web)) == 1  # counted afresh after the reload
    page.click("#start")
    page.wait_for_function("document.body.dataset.mode === 'idle'")
    assert_clean_console(web, allow=REFUSAL_ERRORS)


def mint(server: ServerProcess, key: str) -> str:
    """A client secret, as a customer's backend mints one for its page."""
    request = urllib.request.Request(
        server.server.http_url + "/v1/realtime/client_secrets",
        data=json.dumps({"max_sessions": 2}).encode(),
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        value: str = json.loads(answer.read())["value"]
    return value


def test_a_client_secret_in_the_fragment_is_used_and_taken_off_the_address(
    web_for: Callable[[ServerProcess], WebPage], keyed_server: ServerProcess
) -> None:
    token = mint(keyed_server, API_KEY)
    web = web_for(keyed_server)
    page = web.page
    page.add_init_script(COUNT_SOCKETS)
    web.open(f"#token={token}")
    assert page.evaluate("location.href") == web.base_url + "/"  # nothing left to copy
    page.click("#start")
    page.wait_for_function("Number(document.body.dataset.connects) >= 1")
    assert page.locator("#key-form").is_hidden()
    assert sockets(web)[-1]["url"].endswith(f"/ws?token={token}")
    page.click("#start")
    page.wait_for_function("document.body.dataset.mode === 'idle'")
    # Its second and last session: the reload kept it (in the tab, like a typed key).
    page.reload()
    page.wait_for_function("document.body.dataset.mode === 'idle'")
    page.click("#start")
    page.wait_for_function("Number(document.body.dataset.connects) >= 1")
    page.click("#start")
    page.wait_for_function("document.body.dataset.mode === 'idle'")
    # Used up: refused, and the page says so and asks for a key instead.
    page.click("#start")
    page.get_by_label("API key").wait_for(state="visible")
    assert status(web) == "The access token has opened all the sessions it may"
    assert_clean_console(web, allow=REFUSAL_ERRORS)


def test_file_with_a_refused_key_asks_for_one_then_transcribes(
    web_for: Callable[[ServerProcess], WebPage], keyed_server: ServerProcess, short_wav: Path
) -> None:
    web = web_for(keyed_server)
    page = web.page
    web.open("?token=an-old-key-0123456789")
    page.set_input_files("#file", str(short_wav))
    key = page.get_by_label("API key")
    key.wait_for(state="visible")
    assert status(web) == "Transcribing short.wav failed: The API key was refused"
    key.fill(API_KEY)
    key.press("Enter")
    page.wait_for_function("document.getElementById('status').textContent.startsWith('Done')")
    assert status(web) == "Done: 1 caption(s) from short.wav."
    # The typed key replaces the address's old one, which would win again on reload.
    assert "token" not in page.url
    assert_clean_console(web, allow=REFUSAL_ERRORS)


def test_busy_server_is_retried_with_growing_delays(
    web_for: Callable[[ServerProcess], WebPage], keyed_server: ServerProcess
) -> None:
    """A starting or draining server answers 503: worth retrying, with backoff."""
    web = web_for(keyed_server)
    page = web.page
    page.add_init_script(COUNT_SOCKETS)
    busy = re.compile(r"/ws(\?.*)?$")
    # The handshake is refused for real (no key); the probe that explains it says 503.
    page.route(busy, lambda route: route.fulfill(status=503, body="server is draining\n"))
    web.open()
    page.click("#start")
    page.wait_for_function("window.__sockets.length >= 4", timeout=10_000)
    page.wait_for_function(
        "document.getElementById('status').textContent.startsWith("
        "'The server is draining; reconnecting in')"
    )
    at = [s["at"] for s in sockets(web)]
    gaps = [later - earlier for earlier, later in itertools.pairwise(at)]
    # 0.5, 1 and 2 s, each within ±20 % jitter (plus the probe's few ms).
    assert 400 < gaps[0] < 900 and 800 < gaps[1] < 1_500 and 1_600 < gaps[2] < 2_700, gaps

    page.unroute(busy)  # now the probe reaches the server: the key is what is missing
    page.get_by_label("API key").wait_for(state="visible")
    assert status(web) == "This server needs an API key"
    assert_clean_console(web, allow=REFUSAL_ERRORS)


def test_refused_origin_stops_without_a_reconnect_loop(rebound_web: WebPage) -> None:
    # The page under a name that resolves to 127.0.0.1 (DNS rebinding): the server serves
    # the page, but does not take that origin for its own and refuses its WebSocket.
    web = rebound_web
    page = web.page
    page.add_init_script(COUNT_SOCKETS)
    web.open()
    page.click("#start")
    page.wait_for_function("document.getElementById('status').textContent.includes('origins')")
    page.wait_for_function("document.body.dataset.mode === 'idle'")
    assert f"does not list {web.base_url}" in status(web)
    # A same-origin fetch carries no Origin, so the probe passes and the page retries
    # once before it blames the origin; then it stops.
    page.wait_for_timeout(2_000)
    assert len(sockets(web)) == 2
    assert page.locator("#key-form").is_hidden()
    assert_clean_console(web, allow=REFUSAL_ERRORS)


def test_the_page_says_when_the_demo_model_hears_the_speaker(web: WebPage) -> None:
    """Template sentences for whatever a person says are the demo model's: the page says so."""
    page = web.page
    page.route("**/stats", lambda route: route.fulfill(json={**STATS, "demo_model": True}))
    web.open()
    note = page.locator("#demo-model-note")
    note.wait_for(state="visible")
    assert "synthetic English call-centre and caption" in note.inner_text()
    assert page.locator("#test-model-warning").is_hidden()
    page.unroute("**/stats")
    page.route("**/stats", lambda route: route.fulfill(json=STATS))
    note.wait_for(state="hidden", timeout=10_000)  # the next poll: another model now
