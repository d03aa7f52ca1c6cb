"""The page resumes a dropped stream (docs/protocol.md, "Resuming a stream").

resume.js's pure logic run in the page; a scripted /ws that checks the protocol byte by
byte (the resume start, the resent audio, a replayed final, a refusal, a drop while
stopping); and a real server with `--resume-grace-s` whose connections a loopback proxy
cuts mid-stream.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from tests.server.conftest import ServerProcess
from tests.web.conftest import WebPage, open_page
from tests.web.test_browser import FINALS, assert_clean_console, wait_finals
from tools.cutting_proxy import CuttingProxy

GAPS = "#finals li.gap"
RESUMED_GAP = re.compile(r"Reconnected after \d+\.\d s")
NEW_STREAM_GAP = re.compile(
    r"Reconnected after \d+\.\d s as a new stream: speech in the gap is lost"
)

# ---- resume.js alone -----------------------------------------------------------------------


def test_resume_module_keeps_audio_since_the_ack_and_drops_repeated_finals(web: WebPage) -> None:
    web.open()
    got = web.page.evaluate(
        """async () => {
          const { KeptAudio, Resumer, backoffMs } = await import('/resume.js');
          const chunk = (n, v) => new Int16Array(n).fill(v);
          const flat = (chunks) => chunks === null ? null
            : chunks.flatMap((c) => Array.from(c));
          const out = {};

          // Kept audio: an ack forgets whole chunks before it; a resend starts mid-chunk.
          const kept = new KeptAudio(100);
          kept.append(chunk(30, 1)); kept.append(chunk(30, 2)); kept.append(chunk(30, 3));
          kept.forget(40); // the first chunk (0..30) goes; the second holds 40
          out.afterAck = [kept.start, kept.end, kept.covers(40), kept.covers(20)];
          out.from40 = flat(kept.from(40));
          out.from20 = flat(kept.from(20));
          out.fromEnd = flat(kept.from(90));
          // Past the bound the oldest go, and a resume from the ack would leave a hole.
          kept.append(chunk(30, 4)); kept.append(chunk(30, 5));
          out.bounded = [kept.start, kept.end, kept.covers(40)];

          // The resume state: token from ready, ack, last final, renewed token, the gap.
          const r = new Resumer(1000);
          out.before = r.canResume;
          r.take({ type: 'ready', resume_token: 'rs_a' }, 0);
          out.noGapAtStart = r.gapMs;
          r.kept.append(chunk(400, 1));
          r.take({ type: 'ack', samples: 320 }, 0);
          out.finals = [0, 1, 1, 0, 2].map((id) => r.take({ type: 'final', utt_id: id }, 0));
          r.dropped(1000);
          r.dropped(1500); // a failed retry: the gap still began at the first drop
          out.start = r.startMessage();
          out.canResume = r.canResume;
          out.delays = [0, 1, 2, 3, 4, 5, 6].map(() => r.nextDelayMs(() => 0.5));
          r.take({ type: 'resumed', samples: 400, resume_token: 'rs_b', stopped: false }, 2250);
          out.afterResumed = [r.token, r.gapMs, r.attempt];
          // More than the bound since the ack: no resume, whatever the token says.
          r.kept.append(chunk(700, 2));
          out.overflowed = r.canResume;
          // A new stream forgets the old one's token and utt_ids; its ready closes the gap.
          r.dropped(5000);
          r.fresh();
          out.fresh = [r.token, r.acked, r.lastUttId, r.kept.end, r.canResume];
          out.newFinal = r.take({ type: 'final', utt_id: 0 }, 0);
          r.take({ type: 'ready' }, 5400);
          out.noToken = [r.token, r.canResume, r.gapMs];

          out.backoff = [0, 1, 2].map((a) => backoffMs(a, 500, 10000, () => 0.5));
          out.jitter = [backoffMs(0, 1000, 1000, () => 0), backoffMs(0, 1000, 1000, () => 1)];
          return out;
        }"""
    )
    assert got["afterAck"] == [30, 90, True, False]
    assert got["from40"] == [2] * 20 + [3] * 30
    assert got["from20"] is None  # forgotten: the server acknowledged it
    assert got["fromEnd"] == []
    assert got["bounded"] == [60, 150, False]

    assert got["before"] is False  # no token yet
    assert got["noGapAtStart"] is None
    assert got["finals"] == [True, True, False, False, True]
    assert got["start"] == {
        "type": "start",
        "resume": {"token": "rs_a", "samples": 320, "last_utt_id": 2},
    }
    assert got["canResume"] is True
    assert got["delays"] == [100, 200, 400, 800, 1600, 3200, 3200]
    assert got["afterResumed"] == ["rs_b", 1250, 0]
    assert got["overflowed"] is False
    assert got["fresh"] == [None, 0, None, 0, False]
    assert got["newFinal"] is True
    assert got["noToken"] == [None, False, 400]
    assert got["backoff"] == [500, 1000, 2000]
    assert got["jitter"] == [800, 1200]
    assert_clean_console(web)


# ---- a scripted /ws that resumes -------------------------------------------------------------

FRAME_BYTES = 1280  # the page's 40 ms microphone frames, 16 kHz int16


def caption(utt_id: int, text: str) -> dict[str, Any]:
    return {
        "type": "final",
        "utt_id": utt_id,
        "start_ms": 1000 * utt_id,
        "end_ms": 1000 * utt_id + 500,
        "text": text,
        "lang": "en",
    }


class ResumingServer:
    """Stands in for a resuming /ws inside the page (Playwright WebSocket routing).

    It keeps the stream's audio as a server does: a resume's resent audio is trimmed by
    what the stream already has, and checked byte for byte against it. `plan` says, per
    connection, what to answer (`start` for a fresh start, `resume` for a resume,
    `refuse`), which events to send after which audio frame, and the frame after which the
    connection drops (closed with 4000, as a network failure would be seen); `first`: what
    follows `ready` or `resumed` at once (then a close, with `close_after_first`).
    """

    def __init__(self, plan: list[dict[str, Any]]) -> None:
        self.plan = plan
        self.starts: list[dict[str, Any]] = []
        self.stream = bytearray()  # the stream's audio, as taken
        self.resent_ok: list[bool] = []  # per resume: the resend matched the stream
        self.texts: list[list[str]] = []  # text messages, per connection
        self.acks: list[int] = []

    def __call__(self, ws: Any) -> None:
        step = self.plan[len(self.texts)] if len(self.texts) < len(self.plan) else {}
        self.texts.append([])
        ScriptedSocket(self, ws, step)


class ScriptedSocket:
    """One connection of a ResumingServer, following its `step` of the plan."""

    def __init__(self, server: ResumingServer, ws: Any, step: dict[str, Any]) -> None:
        self.server, self.ws, self.step = server, ws, step
        self.texts = server.texts[-1]
        self.frames = 0
        self.trim = 0  # bytes of the resend that the stream already has: dropped
        self.resent = bytearray()  # those bytes, to compare with the stream
        ws.on_message(lambda m: self.on_text(m) if isinstance(m, str) else self.on_audio(m))

    def send(self, event: dict[str, Any]) -> None:
        if event["type"] == "ack":
            event = {"type": "ack", "samples": len(self.server.stream) // 2}
            self.server.acks.append(event["samples"])
        self.ws.send(json.dumps({"v": 1, **event}))

    def on_audio(self, data: bytes) -> None:
        self.frames += 1
        cut = min(self.trim, len(data))
        if cut:
            self.resent.extend(data[:cut])
            self.trim -= cut
            if not self.trim:
                stream = self.server.stream
                same = bytes(self.resent) == bytes(stream[len(stream) - len(self.resent) :])
                self.server.resent_ok.append(same)
        self.server.stream.extend(data[cut:])
        for event in self.step.get("events", {}).get(self.frames, []):
            self.send(event)
        if self.frames == self.step.get("drop_after"):
            self.ws.close(code=4000, reason="scripted drop")

    def on_text(self, message: str) -> None:
        self.texts.append(message)
        msg = json.loads(message)
        if msg["type"] == "stop":
            self.stop()
        elif msg["type"] == "start":
            self.start(msg)

    def stop(self) -> None:
        if self.step.get("drop_on_stop"):
            self.ws.close(code=4000, reason="scripted drop")
            return
        self.send({"type": "end"})
        self.ws.close(code=1000)

    def start(self, msg: dict[str, Any]) -> None:
        self.server.starts.append(msg)
        answer = self.step["answer"]
        if answer == "refuse":
            self.send({"type": "error", "code": "resume_refused", "message": "grace ran out"})
            self.ws.close(code=1008, reason="resume_refused")
            return
        if answer == "resume":
            have = len(self.server.stream) // 2
            self.trim = (have - msg["resume"]["samples"]) * 2
            stopped = bool(self.step.get("stopped"))
            resumed = {"samples": have, "resume_token": self.step["token"], "stopped": stopped}
            self.send({"type": "resumed", **resumed})
        else:
            self.server.stream.clear()
            ready = {"type": "ready", "session_id": self.step["session"], "config": {}}
            if self.step.get("token"):
                ready["resume_token"] = self.step["token"]
            self.send({**ready, "model": "scripted", "test_model": False})
        for event in self.step.get("first", []):
            self.send(event)
        if self.step.get("close_after_first"):
            self.ws.close(code=1000)


# The status line's every text, and when the page opened and saw closed each socket.
WATCH = """
  window.__statuses = [];
  window.__opened = [];
  window.__closed = [];
  const Native = window.WebSocket;
  window.WebSocket = class extends Native {
    constructor(...args) {
      super(...args);
      window.__opened.push(performance.now());
      this.addEventListener('close', () => window.__closed.push(performance.now()));
    }
  };
  addEventListener('DOMContentLoaded', () => {
    const status = document.getElementById('status');
    new MutationObserver(() => window.__statuses.push(status.textContent))
      .observe(status, { childList: true, characterData: true, subtree: true });
  });
"""

ACK = {"type": "ack"}  # the server fills in its samples


def shown(web: WebPage) -> list[tuple[str, str]]:
    """The transcript's lines: ("final", utt_id text) and ("gap", text)."""
    return [
        (str(kind), str(text))
        for kind, text in web.page.evaluate(
            """() => [...document.querySelectorAll('#finals li')].map((li) =>
                 li.classList.contains('gap') ? ['gap', li.textContent]
                   : ['final', `${li.dataset.uttId} ${li.querySelector('.text').textContent}`])"""
        )
    ]


def test_a_dropped_stream_is_resumed_from_the_ack_with_each_final_once(web: WebPage) -> None:
    page = web.page
    server = ResumingServer(
        [
            # The stream: acknowledged after frame 10, dropped after frame 25.
            {
                "answer": "start",
                "session": "resumable",
                "token": "rs_first",
                "events": {10: [ACK, caption(0, "Zero.")], 20: [caption(1, "One.")]},
                "drop_after": 25,
            },
            # Resumed: a final the page already has (a server that should not resend it)
            # and one it missed; acknowledged again, then dropped again.
            {
                "answer": "resume",
                "token": "rs_second",
                "first": [caption(1, "One."), caption(2, "Two.")],
                "events": {40: [ACK]},
                "drop_after": 50,
            },
            # The stream is no longer waiting: refused, so the page starts a new stream.
            {"answer": "refuse"},
            {
                "answer": "start",
                "session": "fresh",
                "token": "rs_fresh",
                "events": {10: [caption(0, "After the refusal.")]},
            },
        ]
    )
    page.route_web_socket(re.compile(r".*/ws$"), server)
    page.add_init_script(WATCH)
    web.open()
    page.select_option("#language", "en")
    page.click("#start")
    page.get_by_text("After the refusal.").wait_for(timeout=20_000)  # the last stream's
    page.click("#start")
    page.wait_for_function("document.body.dataset.mode === 'idle'")

    fresh = {
        "type": "start",
        "sample_rate": 16000,
        "encoding": "pcm_s16le",
        "channels": 1,
        "language": "en",
        "itn": True,
        "partials": True,
        "commit": "pauses",
        "emotion": True,
        "event": True,
        "timestamps": True,
    }
    first_ack, second_ack = server.acks
    assert server.starts == [
        fresh,
        # From the last ack, after the last final received, with the token `ready` gave.
        {"type": "start", "resume": {"token": "rs_first", "samples": first_ack, "last_utt_id": 1}},
        # The token `resumed` renewed; utt 2 came with the replay.
        {
            "type": "start",
            "resume": {"token": "rs_second", "samples": second_ack, "last_utt_id": 2},
        },
        fresh,
    ]
    # The audio since the ack was resent, exactly what the server already had from there.
    assert first_ack >= 10 * FRAME_BYTES // 2
    assert server.resent_ok == [True]  # the second resume was refused
    # Nothing but the resume start before `resumed`, and no stop was sent twice.
    assert [json.loads(t)["type"] for t in server.texts[1]] == ["start"]
    assert [json.loads(t)["type"] for t in server.texts[3]] == ["start", "stop"]

    lines = shown(web)
    kinds = [kind for kind, _ in lines]
    assert kinds == ["final", "final", "gap", "final", "gap", "final"], lines
    assert [text for kind, text in lines if kind == "final"] == [
        "0 Zero.",
        "1 One.",
        "2 Two.",
        "0 After the refusal.",
    ]
    gaps = [text for kind, text in lines if kind == "gap"]
    assert RESUMED_GAP.fullmatch(gaps[0]), gaps
    assert NEW_STREAM_GAP.fullmatch(gaps[1]), gaps
    assert page.evaluate("document.body.dataset.connects") == "2"
    assert page.evaluate("document.body.dataset.resumes") == "1"

    statuses: list[str] = page.evaluate("window.__statuses")
    assert "Connection lost (4000 scripted drop); resuming in 0.1 s" in statuses, statuses
    assert "Resuming the stream (try 1)…" in statuses
    assert "Listening (session resumable, resumed)" in statuses
    assert "The stream could not be resumed (grace ran out); starting a new one" in statuses
    # A resume is tried after about 0.1 s, not the 0.5 s a new stream waits; after a
    # refusal the new stream starts at once.
    opened: list[float] = page.evaluate("window.__opened")
    closed: list[float] = page.evaluate("window.__closed")
    assert len(opened) == 4 and len(closed) == 4
    assert 60 < opened[1] - closed[0] < 400, (opened, closed)
    assert 60 < opened[2] - closed[1] < 400, (opened, closed)
    assert opened[3] - closed[2] < 100, (opened, closed)
    assert_clean_console(web)


def test_stop_while_dropped_resumes_to_get_the_last_finals(web: WebPage) -> None:
    page = web.page
    server = ResumingServer(
        [
            {
                "answer": "start",
                "session": "stopping",
                "token": "rs_one",
                "events": {10: [ACK]},
                "drop_on_stop": True,  # the stop is taken, but the socket drops
            },
            # The stream had the stop: the page sends nothing more and reads to `end`.
            {
                "answer": "resume",
                "token": "rs_two",
                "stopped": True,
                "first": [caption(0, "Owed."), {"type": "end"}],
                "close_after_first": True,
            },
        ]
    )
    page.route_web_socket(re.compile(r".*/ws$"), server)
    web.open()
    page.click("#start")
    page.wait_for_function("document.body.dataset.connects === '1'")
    page.wait_for_timeout(1_000)  # past the ack at frame 10
    page.click("#start")
    page.wait_for_function("document.body.dataset.mode === 'idle'")
    assert server.acks and server.starts[1]["resume"] == {
        "token": "rs_one",
        "samples": server.acks[0],
        "last_utt_id": None,
    }
    assert [json.loads(t)["type"] for t in server.texts[0]] == ["start", "stop"]
    assert [json.loads(t)["type"] for t in server.texts[1]] == ["start"]  # no second stop
    lines = shown(web)
    assert [kind for kind, _ in lines] == ["gap", "final"] and lines[1][1] == "0 Owed.", lines
    assert page.locator("#status").inner_text() == "Stopped. 1 caption(s)."
    assert_clean_console(web)


# ---- a real server, its connections cut -------------------------------------------------------


class ProxyThread:
    """tools/cutting_proxy.py on its own event loop, for these synchronous tests."""

    def __init__(self, target_port: int) -> None:
        self.proxy = CuttingProxy(target_port)
        self.loop = asyncio.new_event_loop()
        self.started = threading.Event()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.closing: Any = None

    def __enter__(self) -> ProxyThread:
        self.thread.start()
        self.closing = asyncio.run_coroutine_threadsafe(self._serve(), self.loop)
        assert self.started.wait(10), "the proxy did not start"
        return self

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        async with self.proxy.running():
            self.started.set()
            await self._stop.wait()

    def cut(self) -> None:
        asyncio.run_coroutine_threadsafe(self._cut(), self.loop).result(10)

    async def _cut(self) -> None:
        self.proxy.cut()

    def __exit__(self, *exc: object) -> None:
        self.loop.call_soon_threadsafe(self._stop.set)
        self.closing.result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@pytest.fixture
def cut_web(browser: Any, resumable_server: ServerProcess) -> Iterator[tuple[WebPage, ProxyThread]]:
    """The resumable server's page, loaded (and streaming) through a cutting proxy."""
    contexts: list[Any] = []
    with ProxyThread(resumable_server.port) as proxy:
        yield open_page(browser, contexts, f"http://127.0.0.1:{proxy.proxy.port}"), proxy
        for context in contexts:
            context.close()


# Every socket's text messages both ways, parsed.
RECORD_SOCKETS = """
  window.__sockets = [];
  const Native = window.WebSocket;
  window.WebSocket = class extends Native {
    constructor(...args) {
      super(...args);
      this.__log = { sent: [], got: [] };
      window.__sockets.push(this.__log);
      this.addEventListener('message', (ev) => {
        if (typeof ev.data === 'string') this.__log.got.push(JSON.parse(ev.data));
      });
    }
    send(data) {
      if (typeof data === 'string') this.__log.sent.push(JSON.parse(data));
      super.send(data);
    }
  };
"""

# A cut socket, and a /stats poll cut on its way, are logged as errors.
CUT_ERRORS = re.compile(
    r"WebSocket connection to '[^']*' failed|Failed to load resource: net::ERR_"
)


def socket_log(web: WebPage) -> list[dict[str, list[dict[str, Any]]]]:
    # Partials are many and not needed here: leave them in the page.
    return list(
        web.page.evaluate(
            """() => window.__sockets.map((s) => ({
                 sent: s.sent,
                 got: s.got.filter((e) => e.type !== 'partial' && e.type !== 'committed'),
               }))"""
        )
    )


def events(log: list[dict[str, list[dict[str, Any]]]], kind: str) -> list[dict[str, Any]]:
    return [e for socket in log for e in socket["got"] if e["type"] == kind]


def cut_after_a_final_and_an_ack(web: WebPage, proxy: ProxyThread, finals_before: int) -> None:
    """Wait until the current socket has had a final and an ack, then cut it."""
    page = web.page
    wait_finals(web, finals_before + 1)
    page.wait_for_function(
        "window.__sockets.at(-1).got.some((e) => e.type === 'ack')", timeout=10_000
    )
    proxy.cut()


def test_the_page_resumes_a_cut_stream_on_a_real_server(
    cut_web: tuple[WebPage, ProxyThread], resumable_server: ServerProcess
) -> None:
    web, proxy = cut_web
    page = web.page
    page.add_init_script(RECORD_SOCKETS)
    web.open()
    page.click("#start")
    page.wait_for_function("document.body.dataset.connects === '1'")

    # Cut twice: the second resume uses the token the first `resumed` renewed.
    for resumes in (1, 2):
        cut_after_a_final_and_an_ack(web, proxy, int(page.locator(FINALS).count()))
        page.wait_for_function(f"document.body.dataset.resumes === '{resumes}'", timeout=15_000)
    wait_finals(web, int(page.locator(FINALS).count()) + 1)
    page.click("#start")
    page.wait_for_function("document.body.dataset.mode === 'idle'", timeout=30_000)
    web.screenshot("resumed")

    log = socket_log(web)
    assert proxy.proxy.cuts == 2
    starts = [socket["sent"][0] for socket in log]
    assert len(starts) == 3, starts  # each resume took one try: no new stream
    assert "resume" not in starts[0]
    tokens = [events(log[:1], "ready")[0]["resume_token"]] + [
        events([socket], "resumed")[0]["resume_token"] for socket in log[1:]
    ]
    for i in (1, 2):
        before = log[:i]
        resume = starts[i]["resume"]
        # The token the last socket gave, the last ack it had, the last final it had.
        assert resume["token"] == tokens[i - 1] and resume["token"].startswith("rs_")
        assert resume["samples"] == events(before, "ack")[-1]["samples"] > 0
        assert resume["last_utt_id"] == events(before, "final")[-1]["utt_id"]
        resumed = events(log[i : i + 1], "resumed")[0]
        assert resumed["samples"] >= resume["samples"] and resumed["stopped"] is False
    assert page.evaluate("document.body.dataset.connects") == "1"  # one session throughout

    # Each final once, in order: the server replayed none twice, the page showed each once.
    received = [e["utt_id"] for e in events(log, "final")]
    assert received == sorted(set(received)), received
    on_page = [
        int(n) for n in page.locator(FINALS).evaluate_all("ls => ls.map((l) => l.dataset.uttId)")
    ]
    with_text = [e["utt_id"] for e in events(log, "final") if e["text"]]
    assert on_page == with_text, (on_page, received)
    gaps = page.locator(GAPS).all_inner_texts()
    assert len(gaps) == 2 and all(RESUMED_GAP.fullmatch(g) for g in gaps), gaps
    times = page.locator(f"{FINALS} time").all_inner_texts()
    assert times == sorted(times)  # one clock across the gaps
    assert resumable_server.wait_for(r"session \S+: resumed", count=2)
    assert_clean_console(web, allow=CUT_ERRORS)
