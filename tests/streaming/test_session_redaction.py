"""Redaction in the session core: what every protocol, webhook and follower is sent."""

from __future__ import annotations

import json
from collections.abc import Mapping

import pytest

from engine.types import InferenceRequest, InferenceResult, RequestKind, Token, Transcript
from streaming.audio.decoder import AudioFormat
from streaming.channels import ChannelGroup
from streaming.commands import Audio, Configure, Stop, StreamOptions
from streaming.errors import InvalidFieldError
from streaming.events import Final
from streaming.limits import SessionLimits
from streaming.protocols.v1.codec import V1Codec
from streaming.redaction.events import HOLD_S
from streaming.redaction.policies import Policy, Redaction
from streaming.segmenter import SegmenterConfig
from streaming.session import Session, SessionConfig
from tests.speech import chunks, to_s16le
from tests.streaming.fakes import EnergyVadModel, V1Session, stereo, tone_bursts

BYTES_PER_S = 32000
TWO_UTTERANCES = tone_bursts([(0.3, 1.5), (2.5, 3.7)], 5.0)


def said(text: str, itn: bool = True) -> Transcript:
    """A transcript of these words, one timed token a word (100 ms each, from 0)."""
    tokens = tuple(Token(i, f" {w}", i * 100, (i + 1) * 100) for i, w in enumerate(text.split()))
    return Transcript(text, "en", "neutral", "speech", itn, f"<|en|>{text}", tokens)


def session(**config: object) -> V1Session:
    cfg = SessionConfig(segmenter=SegmenterConfig(preroll_ms=0), **config)  # type: ignore[arg-type]
    return V1Session(Session("s1", cfg, EnergyVadModel()))


def speak(
    s: V1Session, finals: Mapping[int, str], partials: Mapping[int, str] | None = None
) -> list[dict]:
    """Two utterances of tone (ids 0 and 1); utterance k's final says `finals[k]`, its partials
    `partials[k]`; stop; the v1 messages sent."""
    codec, out = V1Codec(SessionLimits()), []
    for i, piece in enumerate(chunks(to_s16le(TWO_UTTERANCES), 3200)):
        s.receive_audio(piece, now=i * 3200 / BYTES_PER_S)
        answer(s, finals, partials or {}, now=i * 3200 / BYTES_PER_S)
        out += [json.loads(f) for e in s.events_to_send() for f in codec.encode(e)]
    s.receive_text('{"type":"stop"}', now=99.0)
    answer(s, finals, partials or {}, now=99.0)
    return out + [json.loads(f) for e in s.events_to_send() for f in codec.encode(e)]


def answer(
    s: V1Session, finals: Mapping[int, str], partials: Mapping[int, str], now: float
) -> None:
    for r in s.requests_to_submit():
        text = partials.get(r.utterance_id, "") if r.kind is RequestKind.PARTIAL else None
        s.receive_result(InferenceResult(r.ref, said(text or finals[r.utterance_id])), now)


def of(messages: list[dict], kind: str) -> list[dict]:
    return [m for m in messages if m["type"] == kind]


def test_a_card_read_over_two_finals_never_reaches_the_client() -> None:
    s = session()
    s.receive_text('{"type":"start","redact":["pci"]}', now=0.0)
    sent = speak(s, {0: "The number is 4111 1111", 1: "1111 1111."})
    (ready,) = of(sent, "ready")
    assert ready["config"]["redact"] == ["pci"] and ready["config"]["redact_mask"] is False
    texts = [m["text"] for m in of(sent, "final")]
    assert texts == ["The number is [PCI]", "[PCI]."]
    assert not any(ch.isdigit() for m in sent for ch in json.dumps(m.get("text", "")))
    first, second = of(sent, "final")
    assert first["redactions"] == [{"policy": "pci", "start_ms": 300, "end_ms": 500}]
    assert second["redactions"] == [{"policy": "pci", "start_ms": 0, "end_ms": 200}]
    assert "4111" not in first["rich_text"] and "[PCI]" in first["rich_text"]
    assert sent[-1]["type"] == "end"


def test_the_servers_policies_hold_and_a_stream_adds_its_own() -> None:
    s = session(redaction=Redaction(frozenset({Policy.PCI})))
    s.receive_text('{"type":"start","redact":"email","redact_mask":true}', now=0.0)
    sent = speak(s, {0: "Card 4111 1111 1111 1111 please", 1: "mail a@b.com now"})
    (ready,) = of(sent, "ready")
    assert ready["config"]["redact"] == ["email", "pci"] and ready["config"]["redact_mask"]
    assert [m["text"] for m in of(sent, "final")] == [
        "Card **** **** **** **** please",
        "mail *@*.*** now",
    ]


def test_partials_show_no_digits_their_final_might_redact() -> None:
    s = session()
    s.receive_text('{"type":"start","redact":["pci"]}', now=0.0)
    sent = speak(
        s,
        {0: "My card is 4111 1111 1111 1111", 1: "Thanks"},
        partials={0: "my card is 4111 11", 1: "thanks"},
    )
    shown = [m["text"] for m in of(sent, "partial")]
    assert shown and not any(ch.isdigit() for text in shown for ch in text)


def final_times(start: str) -> list[tuple[str, float]]:
    """One utterance that says an order number, then silence: each final's text and the
    stream time (100 ms frames) it was sent at."""
    s = session()
    s.receive_text(start, now=0.0)
    codec = V1Codec(SessionLimits())
    data = to_s16le(tone_bursts([(0.3, 1.5)], 12.0))
    out = []
    for i, piece in enumerate(chunks(data, 3200)):
        now = i * 3200 / BYTES_PER_S
        s.receive_audio(piece, now=now)
        for r in s.requests_to_submit():
            if r.kind is not RequestKind.PARTIAL:
                s.receive_result(InferenceResult(r.ref, said("My order is 12345678")), now)
        out += [
            (m["text"], now) for m in map(json.loads, _frames(codec, s)) if m["type"] == "final"
        ]
    return out


def _frames(codec: V1Codec, s: V1Session) -> list[str]:
    return [f for e in s.events_to_send() for f in codec.encode(e)]


def test_a_held_final_goes_out_after_its_wait_without_a_next_part() -> None:
    ((plain, due),) = final_times('{"type":"start"}')
    ((held, sent),) = final_times('{"type":"start","redact":["pci"]}')
    assert held == plain == "My order is 12345678"  # no card after all: sent as it was
    # Held for HOLD_S (3 s) from when it was due, released by the first frame after that.
    assert 3.0 <= sent - due <= 3.1


def test_without_redaction_finals_carry_no_redactions() -> None:
    s = session()
    sent = speak(s, {0: "Card 4111 1111 1111 1111", 1: "thanks"})
    assert [m["text"] for m in of(sent, "final")] == ["Card 4111 1111 1111 1111", "thanks"]
    assert all("redactions" not in m for m in of(sent, "final"))


def test_an_unknown_policy_is_a_typed_error_naming_it() -> None:
    with pytest.raises(InvalidFieldError, match="unknown redaction policy cards"):
        session().receive_text('{"type":"start","redact":["pci","cards"]}', now=0.0)


def at_real_pace(
    core: Session | ChannelGroup,
    audio: bytes,
    finals: Mapping[tuple[int, int], str],
    stop: bool = True,
) -> list[tuple[Final, float]]:
    """`audio` (mono, or interleaved stereo for a group) fed in 100 ms frames as it is
    spoken, each final decode answered `DECODE_S` later with `finals[(channel, utt)]`; then
    stop (unless not). Each final sent, with the stream time it was sent at."""
    frame = 3200 * (2 if isinstance(core, ChannelGroup) else 1)
    waiting: list[InferenceRequest] = []
    sent: list[tuple[Final, float]] = []

    def step(now: float) -> None:
        waiting.extend(r for r in core.requests_to_submit() if r.kind is not RequestKind.PARTIAL)
        for r in [r for r in waiting if r.arrival + DECODE_S <= now]:
            waiting.remove(r)
            channel = 0 if "/" not in r.session_id else int(r.session_id.split("/")[1])
            core.receive_result(InferenceResult(r.ref, said(finals[channel, r.utterance_id])), now)
        sent.extend((e, now) for e in core.events_to_send() if isinstance(e, Final))

    now = 0.0
    for piece in chunks(audio, frame):
        now += 0.1
        core.handle(Audio(piece), now)
        step(now)
    if stop:
        core.handle(Stop(), now)
        for later in (now + DECODE_S, now + 2 * DECODE_S):
            step(later)
    return sent


DECODE_S = 0.3


def redacting_session() -> Session:
    cfg = SessionConfig(segmenter=SegmenterConfig(preroll_ms=0))
    s = Session("s1", cfg, EnergyVadModel())
    s.handle(Configure(AudioFormat(), StreamOptions(redact=Redaction(frozenset({Policy.PCI})))), 0)
    return s


def test_a_second_part_said_slowly_after_a_long_pause_is_still_joined() -> None:
    # The pause (1.5 s) is longer than the end silence (0.5 s), and the second part takes
    # 3 s to say: its final comes 5.3 s after the first's, long past a fixed 3 s hold.
    audio = to_s16le(tone_bursts([(0.3, 2.3), (3.8, 6.8)], 8.0))
    said_ = {(0, 0): "My card number is 4111 1111", (0, 1): "1111 1111."}
    sent = at_real_pace(redacting_session(), audio, said_)
    assert [e.transcript.text for e, _ in sent] == ["My card number is [PCI]", "[PCI]."]
    first_due = 2.3 + 0.5 + DECODE_S
    assert all(when >= 6.8 for _, when in sent) and first_due < 6.8


def test_a_card_read_in_four_parts_with_a_cough_between_is_caught() -> None:
    spans = [(0.3, 2.3), (3.5, 3.9), (5.0, 6.5), (8.0, 9.5), (11.0, 12.5)]
    said_ = {
        (0, 0): "My card number is 4111",
        (0, 1): "",  # a cough
        (0, 2): "1111",
        (0, 3): "1111",
        (0, 4): "1111.",
    }
    sent = at_real_pace(redacting_session(), to_s16le(tone_bursts(spans, 14.0)), said_)
    texts = [e.transcript.text for e, _ in sent]
    assert [e.utt_id for e, _ in sent] == [0, 1, 2, 3, 4]
    assert texts == ["My card number is [PCI]", "", "[PCI]", "[PCI]", "[PCI]."]


def test_held_finals_go_out_once_no_next_part_comes() -> None:
    spans = [(0.3, 2.3), (3.5, 4.5)]
    said_ = {(0, 0): "The number is 4111 1111", (0, 1): "1111"}
    audio = to_s16le(tone_bursts(spans, 12.0))
    sent = at_real_pace(redacting_session(), audio, said_)
    # 12 digits are no card: both go out as said, HOLD_S after the second part's final
    # (an early decode, or the one after the end silence).
    assert [e.transcript.text for e, _ in sent] == ["The number is 4111 1111", "1111"]
    latest_final = 4.5 + 0.5 + DECODE_S + 0.1
    assert all(4.5 + 3.0 <= when <= latest_final + 3.0 for _, when in sent)


def test_a_security_code_asked_on_one_channel_is_redacted_on_the_other() -> None:
    agent = tone_bursts([(0.3, 1.8)], 4.5)
    customer = tone_bursts([(2.5, 3.2)], 4.5)
    cfg = SessionConfig(segmenter=SegmenterConfig(preroll_ms=0))
    group = ChannelGroup("call", cfg, EnergyVadModel(), ("agent", "customer"))
    options = StreamOptions(redact=Redaction(frozenset({Policy.PCI})))
    group.handle(Configure(AudioFormat(channels=2), options, channel_labels=group.labels), 0)
    said_ = {(0, 0): "And what is the security code on the back?", (1, 0): "It's 123."}
    sent = at_real_pace(group, stereo(agent, customer), said_)
    assert [(e.channel, e.transcript.text) for e, _ in sent] == [
        (0, "And what is the security code on the back?"),
        (1, "It's [PCI]."),
    ]


def test_held_finals_are_released_for_a_client_that_went_away() -> None:
    s = redacting_session()
    audio = to_s16le(tone_bursts([(0.3, 2.3)], 3.5))
    sent = at_real_pace(s, audio, {(0, 0): "My card number is 4111 1111"}, stop=False)
    assert sent == []  # held: a next part may come
    (held,) = s.release_held()
    assert held.transcript.text == "My card number is [PCI]"
    assert s.release_held() == []


def test_a_held_final_falls_due_with_no_input_at_its_wake_time() -> None:
    # A client that has sent all it had and waits: time alone must release the final.
    s = redacting_session()
    audio = to_s16le(tone_bursts([(0.3, 2.3)], 3.5))
    assert at_real_pace(s, audio, {(0, 0): "My card number is 4111 1111"}, stop=False) == []
    wake = s.wake_at
    assert wake is not None and 2.3 + HOLD_S <= wake <= 3.5 + HOLD_S
    s.tick(wake - 0.01)
    assert [e for e in s.events_to_send() if isinstance(e, Final)] == []
    s.tick(wake)
    (out,) = [e for e in s.events_to_send() if isinstance(e, Final)]
    assert out.transcript.text == "My card number is [PCI]"
    assert s.wake_at is None
