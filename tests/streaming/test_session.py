"""Session state machine with a small energy VAD and a deterministic fake engine."""

from __future__ import annotations

import itertools
import json
import pickle
from collections.abc import Sequence

import numpy as np
import pytest

from engine.types import (
    DEFAULT_HOTWORD_BOOST,
    MAX_HOTWORDS,
    Hotword,
    InferenceRequest,
    InferenceResult,
    RequestKind,
)
from streaming.commands import Audio, Configure, Cut, Stop, merged_hotwords
from streaming.errors import (
    InvalidAudioError,
    StateError,
    UnknownMessageTypeError,
    UnsupportedHotwordError,
)
from streaming.events import (
    Configured,
    Ended,
    ErrorEvent,
    Failed,
    Final,
    Partial,
    SpeechStarted,
    SpeechStopped,
    StopCause,
)
from streaming.limits import SessionLimits
from streaming.partials.policy import PartialPolicy
from streaming.pins import Pins
from streaming.protocols.v1.codec import V1Codec, dump_event, ready_config
from streaming.segmenter import SegmenterConfig
from streaming.session import Session, SessionConfig
from streaming.vad.types import VadConfig
from tests.speech import chunks, to_s16le
from tests.streaming.fakes import (
    EnergyVadModel,
    V1Session,
    answer,
    final_requests,
    tone_bursts,
    word_transcript,
    words_between,
)

SR = 16000
BYTES_PER_S = 2 * SR  # s16le mono


def make_session(**overrides: object) -> Session:
    config = SessionConfig(segmenter=SegmenterConfig(preroll_ms=0), **overrides)  # type: ignore[arg-type]
    return V1Session(Session("s1", config, EnergyVadModel()))


def run(session: Session, data: bytes, chunk: int, answer_now: bool = True) -> list:
    """Feed audio in `chunk`-byte frames, answer requests at once, stop; return events."""
    events: list = []
    for i, piece in enumerate(chunks(data, chunk)):
        session.receive_audio(piece, now=i * chunk / BYTES_PER_S)  # a real-time fake clock
        serve(session, answer_now)
        events += session.events_to_send()
    session.receive_text('{"type":"stop"}', now=99.0)
    serve(session, True)
    return events + session.events_to_send()


def serve(session: Session, answer_now: bool) -> list[InferenceRequest]:
    requests = session.requests_to_submit()
    if answer_now:
        for r in requests:
            session.receive_result(answer(r), now=0.0)
    return requests


def wire(events: list) -> list[dict]:
    """The events as protocol v1 messages, parsed back."""
    codec = V1Codec(SessionLimits())
    return [json.loads(frame) for e in events for frame in codec.encode(e)]


def finals(events: list) -> list[Final]:
    return [e for e in events if isinstance(e, Final)]


def test_implicit_start_then_speech_started_and_finals() -> None:
    audio = tone_bursts([(0.5, 2.0), (3.0, 4.5)], 6.0)
    events = run(make_session(), to_s16le(audio), 3200)
    assert isinstance(events[0], Configured)
    assert ready_config(events[0])["sample_rate"] == 16000
    assert [type(e) for e in events if isinstance(e, SpeechStarted | Final)] == [
        SpeechStarted,
        Final,
        SpeechStarted,
        Final,
    ]
    assert isinstance(events[-1], Ended)
    first, second = finals(events)
    assert first.start_ms == 500 and abs(first.end_ms - 2000) <= 10
    assert second.start_ms == 3000


@pytest.mark.parametrize("chunk", [320, 1183, 3200, 32000])
def test_chunking_does_not_change_requests(chunk: int) -> None:
    audio = tone_bursts([(0.3, 2.2), (2.9, 6.1)], 7.0)
    data = to_s16le(audio)
    reference = make_session()
    ref_requests = collect_requests(reference, data, 640)
    got = collect_requests(make_session(), data, chunk)
    assert [(r.kind, r.utterance_id, r.start_sample) for r in got] == [
        (r.kind, r.utterance_id, r.start_sample) for r in ref_requests
    ]
    for a, b in zip(got, ref_requests, strict=True):
        np.testing.assert_array_equal(a.audio, b.audio)


def collect_requests(session: Session, data: bytes, chunk: int) -> list[InferenceRequest]:
    out: list[InferenceRequest] = []
    for i, piece in enumerate(chunks(data, chunk)):
        session.receive_audio(piece, now=i * chunk / BYTES_PER_S)
        out += session.requests_to_submit()
    session.end_of_stream(now=len(data) / BYTES_PER_S)
    return out + session.requests_to_submit()


def test_final_audio_is_the_exact_source_slice() -> None:
    audio = tone_bursts([(0.5, 2.0)], 3.0)
    data = to_s16le(audio)
    source = np.frombuffer(data, "<i2").astype(np.float32) / 32768
    requests = final_requests(collect_requests(make_session(), data, 999))
    assert len(requests) == 1
    r = requests[0]
    np.testing.assert_array_equal(r.audio, source[r.start_sample : r.start_sample + r.num_samples])


def test_long_speech_is_cut_contiguously() -> None:
    audio = tone_bursts([(0.2, 9.7)], 10.0)
    config = SegmenterConfig(max_segment_ms=3000, preroll_ms=0)
    session = V1Session(Session("s", SessionConfig(segmenter=config), EnergyVadModel()))
    requests = final_requests(collect_requests(session, to_s16le(audio), 1600))
    assert len(requests) >= 3
    for a, b in itertools.pairwise(requests):
        assert a.start_sample + a.num_samples == b.start_sample
    assert all(r.num_samples <= 3 * SR for r in requests)
    covered = np.concatenate([r.audio for r in requests])
    begin = requests[0].start_sample
    source = np.frombuffer(to_s16le(audio), "<i2").astype(np.float32) / 32768
    np.testing.assert_array_equal(covered, source[begin : begin + len(covered)])


def test_end_of_stream_mid_speech_gives_a_final() -> None:
    audio = tone_bursts([(0.5, 3.0)], 2.0)  # speech runs to the very end
    events = run(make_session(), to_s16le(audio), 1600)
    assert len(finals(events)) == 1
    assert finals(events)[0].end_ms == 2000
    assert isinstance(events[-1], Ended)


def test_partials_arrive_during_speech_and_late_ones_are_dropped() -> None:
    audio = tone_bursts([(0.2, 3.0)], 4.0)
    session = make_session(partials=PartialPolicy(interval_ms=400, adaptive=False))
    held: list[InferenceRequest] = []
    for i, piece in enumerate(chunks(to_s16le(audio), 3200)):
        session.receive_audio(piece, now=i * 0.1)
        held += session.requests_to_submit()
    partial_reqs = [r for r in held if r.kind is RequestKind.PARTIAL]
    final_reqs = final_requests(held)
    assert len(partial_reqs) >= 5 and len(final_reqs) == 1
    # Answer the final first: the late partial must not reach the client.
    session.receive_result(answer(final_reqs[0]), now=1.0)
    session.receive_result(answer(partial_reqs[-1]), now=1.0)
    events = session.events_to_send()
    assert not [e for e in events if isinstance(e, Partial)]
    assert len(finals(events)) == 1


@pytest.mark.parametrize("hold_ms", [0, 2000])
def test_partials_of_a_long_utterance_decode_a_bounded_tail(hold_ms: int) -> None:
    audio = tone_bursts([(0.2, 10.2)], 11.0)
    policy = PartialPolicy(interval_ms=400, adaptive=False, hold_ms=hold_ms, context_ms=500)
    session = make_session(partials=policy)
    held: list[InferenceRequest] = []
    events: list = []
    for i, piece in enumerate(chunks(to_s16le(audio), 3200)):
        session.receive_audio(piece, now=i * 0.1)
        for r in session.requests_to_submit():
            held.append(r)
            session.receive_result(InferenceResult(r.ref, word_transcript(r)), now=i * 0.1)
        events += session.events_to_send()
    partial_reqs = [r for r in held if r.kind is RequestKind.PARTIAL]
    partials = [e for e in events if isinstance(e, Partial)]
    assert len(partials) >= 20
    longest_ms = max(r.num_samples for r in partial_reqs) * 1000 // SR
    if hold_ms:
        # Hold, one interval and the context, plus a word gap and a block of slack.
        assert longest_ms <= 2000 + 400 + 500 + 300 + 100
    else:
        assert longest_ms >= 9500
    for p in partials:
        # However little was decoded, a partial covers the utterance so far and says so.
        assert p.start_ms == 200
        assert p.text == words_between(200, p.end_ms)
    (final,) = final_requests(held)
    assert final.start_sample == int(0.2 * SR) and final.num_samples >= 10 * SR


def test_partials_promise_no_text_before_the_final() -> None:
    # The final decodes the utterance afresh, so no partial text is sure to be in it: each
    # partial's text grows, yet none of it counts as settled (issue 33).
    audio = tone_bursts([(0.2, 5.2)], 6.0)
    session = make_session(partials=PartialPolicy(interval_ms=400, adaptive=False))
    events: list = []
    for i, piece in enumerate(chunks(to_s16le(audio), 3200)):
        session.receive_audio(piece, now=i * 0.1)
        for r in session.requests_to_submit():
            session.receive_result(InferenceResult(r.ref, word_transcript(r)), now=i * 0.1)
        events += session.events_to_send()
    partials = [e for e in events if isinstance(e, Partial)]
    assert len(partials) >= 5
    assert all(b.text.startswith(a.text) for a, b in itertools.pairwise(partials))
    assert all(p.stable_chars == 0 for p in partials)


def test_finals_are_delivered_in_utterance_order() -> None:
    audio = tone_bursts([(0.2, 1.0), (2.0, 3.0), (4.0, 5.0)], 6.0)
    session = make_session()
    requests = final_requests(collect_requests(session, to_s16le(audio), 1600))
    session.events_to_send()
    for r in reversed(requests):
        session.receive_result(answer(r), now=2.0)
    events = session.events_to_send()
    assert [e.utt_id for e in finals(events)] == [0, 1, 2]
    assert isinstance(events[-1], Ended)


def test_engine_error_on_a_final_is_reported_and_the_stream_still_ends() -> None:
    audio = tone_bursts([(0.2, 1.0)], 2.0)
    session = make_session()
    (request,) = final_requests(collect_requests(session, to_s16le(audio), 1600))
    session.receive_result(InferenceResult(request.ref, None, "out_of_memory", "too big"), now=1.0)
    events = session.events_to_send()
    errors = [e for e in events if isinstance(e, Failed)]
    assert errors and errors[0].code == "out_of_memory"
    # On the v1 wire a failed utterance is an `error` in the final's place, as it always was.
    (error,) = [m for m in wire(events) if m["type"] == "error"]
    assert error["code"] == "out_of_memory" and "could not be decoded" in error["message"]
    assert isinstance(events[-1], Ended)


def test_protocol_state_errors() -> None:
    session = make_session()
    session.receive_text('{"type":"start","sample_rate":8000,"encoding":"mulaw"}', now=0.0)
    with pytest.raises(StateError):
        session.receive_text('{"type":"start"}', now=0.0)
    session.receive_text('{"type":"stop"}', now=0.0)
    with pytest.raises(StateError):
        session.receive_audio(b"\x00\x00", now=0.0)
    with pytest.raises(UnknownMessageTypeError):
        session.receive_text('{"type":"pause"}', now=0.0)


def test_abort_reports_error_and_still_delivers_owed_finals() -> None:
    session = make_session()
    session.receive_text('{"type":"start","encoding":"pcm_f32le"}', now=0.0)
    speech = tone_bursts([(0.2, 3.0)], 2.0)
    session.receive_audio(speech.astype("<f4").tobytes(), now=0.0)
    bad = np.array([0.1, np.nan], dtype="<f4").tobytes()
    with pytest.raises(InvalidAudioError) as info:
        session.receive_audio(bad, now=0.1)
    session.abort(info.value, now=0.1)
    serve(session, True)
    events = session.events_to_send()
    kinds = [type(e) for e in events]
    assert ErrorEvent in kinds and Final in kinds
    assert isinstance(events[-1], Ended)
    assert session.close_code == InvalidAudioError.close_code
    assert session.finished


def test_toggles_hide_fields_in_finals() -> None:
    session = make_session()
    session.receive_text(
        '{"type":"start","emotion":false,"event":false,"timestamps":false,"partials":false}', 0.0
    )
    events = run(session, to_s16le(tone_bursts([(0.2, 1.5)], 2.0)), 1600)
    assert not [e for e in events if isinstance(e, Partial)]
    wire = json.loads(dump_event(finals(events)[0]))
    assert wire["v"] == 1 and wire["type"] == "final"
    assert "emotion" not in wire and "event" not in wire and "tokens" not in wire
    assert "lang" in wire and "text" in wire


def test_final_says_where_the_vad_decided() -> None:
    # The energy VAD ends speech after 500 ms of silence, seen in whole 100 ms blocks.
    audio = tone_bursts([(0.5, 2.0)], 4.0)
    (final,) = finals(run(make_session(), to_s16le(audio), 3200))
    assert final.decided_ms is not None
    assert 500 <= final.decided_ms - final.end_ms <= 600
    assert dump_event(final) and json.loads(dump_event(final))["decided_ms"] == final.decided_ms


def test_a_final_closed_by_stop_was_decided_at_the_stream_end() -> None:
    audio = tone_bursts([(0.5, 3.0)], 2.0)
    (final,) = finals(run(make_session(), to_s16le(audio), 1600))
    assert final.decided_ms == 2000


def feed_held(session: Session, data: bytes, until_s: float) -> list[InferenceRequest]:
    """Feed 100 ms frames up to `until_s` without answering; return the requests made."""
    held: list[InferenceRequest] = []
    for i, piece in enumerate(chunks(data[: int(until_s * BYTES_PER_S)], 3200)):
        session.receive_audio(piece, now=i * 0.1)
        held += session.requests_to_submit()
    return held


def test_a_lasting_pause_makes_the_early_decode_the_final() -> None:
    data = to_s16le(tone_bursts([(0.5, 2.0)], 4.0))
    session = make_session()
    held = feed_held(session, data, 2.4)  # 400 ms into the pause; the VAD waits for 500
    (early,) = [r for r in held if r.kind is RequestKind.EARLY]
    assert (early.start_sample, early.start_sample + early.num_samples) == (8000, 32000)
    session.receive_result(answer(early), now=2.4)
    assert not finals(session.events_to_send())  # shown as a partial, not yet final
    rest = feed_held(session, data[int(2.4 * BYTES_PER_S) :], 0.5)
    assert not [r for r in rest if r.kind is not RequestKind.PARTIAL]  # no second decode
    (final,) = finals(session.events_to_send())  # out with the VAD's decision, no wait
    assert final.transcript.text == answer(early).transcript.text
    assert (final.start_ms, final.end_ms) == (500, 2000)


def test_speech_after_a_short_pause_still_gets_a_whole_final() -> None:
    # A 300 ms pause: long enough for an early decode, too short to end the utterance.
    data = to_s16le(tone_bursts([(0.5, 1.5), (1.8, 3.0)], 4.0))
    session = make_session()
    requests: list[InferenceRequest] = []
    events: list = []
    for i, piece in enumerate(chunks(data, 3200)):
        session.receive_audio(piece, now=i * 0.1)
        for r in session.requests_to_submit():
            requests.append(r)
            session.receive_result(answer(r), now=i * 0.1)
        events += session.events_to_send()
    earlies = [r for r in requests if r.kind is RequestKind.EARLY]
    assert [r.start_sample + r.num_samples for r in earlies] == [24000, 48000]
    shown = [e for e in events if isinstance(e, Partial)]
    assert any(p.end_ms == 1500 for p in shown)  # the first early answer, as a partial
    (final,) = finals(events)
    assert (final.start_ms, final.end_ms) == (500, 3000)
    assert final.transcript.text == answer(earlies[-1]).transcript.text


def test_no_partial_is_spent_on_a_pause_the_last_one_reached() -> None:
    # A 2 s pause inside one utterance (the VAD waits 3 s), early decodes off.
    data = to_s16le(tone_bursts([(0.2, 1.5), (3.5, 5.0)], 5.5))
    policy = PartialPolicy(interval_ms=400, adaptive=False)
    session = make_session(vad=VadConfig(end_silence_ms=3000), partials=policy, early_final_ms=0)
    ends = [
        (r.start_sample + r.num_samples) / SR
        for r in collect_requests(session, data, 3200)
        if r.kind is RequestKind.PARTIAL
    ]
    # One partial reaches past the speech's end; then none until speech is back.
    assert len([e for e in ends if 1.5 < e <= 3.5]) == 1
    resumed = [e for e in ends if e > 3.5]
    assert resumed and resumed[0] <= 3.5 + 0.4 + 0.1
    assert len(resumed) >= 3  # partials go on through the new speech


@pytest.mark.parametrize("chunk_s", [0.1, 4.0])
def test_an_early_decode_overtaken_within_one_burst_never_leaves(chunk_s: float) -> None:
    # A 300 ms pause: an early decode is due, then speech resumes.
    data = to_s16le(tone_bursts([(0.5, 1.5), (1.8, 3.0)], 4.0))
    requests = collect_requests(make_session(), data, int(chunk_s * BYTES_PER_S))
    early_ends = [r.start_sample + r.num_samples for r in requests if r.kind is RequestKind.EARLY]
    # Live, each early decode goes out at once; in one burst the first one is overtaken by
    # the speech after it before the call ends, and only the one that is the final leaves.
    assert early_ends == ([24000, 48000] if chunk_s < 1 else [48000])
    (final,) = final_requests(requests)
    assert (final.start_sample, final.start_sample + final.num_samples) == (8000, 48000)


def test_early_finals_can_be_turned_off() -> None:
    data = to_s16le(tone_bursts([(0.5, 2.0)], 4.0))
    session = make_session(early_final_ms=0)
    kinds = {r.kind for r in collect_requests(session, data, 3200)}
    assert kinds == {RequestKind.PARTIAL, RequestKind.FINAL}


def test_a_failed_early_decode_that_is_the_final_is_reported() -> None:
    data = to_s16le(tone_bursts([(0.5, 2.0)], 4.0))
    session = make_session()
    (early,) = [r for r in feed_held(session, data, 4.0) if r.kind is RequestKind.EARLY]
    session.receive_text('{"type":"stop"}', now=4.0)
    session.receive_result(InferenceResult(early.ref, None, "backend_error", "boom"), now=4.1)
    events = session.events_to_send()
    errors = [e for e in events if isinstance(e, Failed)]
    assert [e.code for e in errors] == ["backend_error"]
    assert isinstance(events[-1], Ended)


def test_results_are_matched_by_request_id_not_by_object() -> None:
    # An engine in another process answers with copies of the requests it was sent.
    audio = tone_bursts([(0.2, 1.0), (2.0, 3.0)], 4.0)
    local, remote = make_session(), make_session()
    sent = [collect_requests(s, to_s16le(audio), 1600) for s in (local, remote)]
    assert [r.request_id for r in sent[0]] == list(range(1, len(sent[0]) + 1))
    for r in final_requests(sent[0]):
        local.receive_result(answer(r), now=2.0)
    for r in final_requests(sent[1]):
        copy = pickle.loads(pickle.dumps(r))
        assert copy is not r
        remote.receive_result(answer(copy), now=2.0)
    expected, got = local.events_to_send(), remote.events_to_send()
    assert wire(got) == wire(expected)
    assert len(finals(got)) == 2 and isinstance(got[-1], Ended)


def test_a_cut_ends_the_utterance_in_progress_and_speech_goes_on_in_the_next() -> None:
    audio = to_s16le(tone_bursts([(0.2, 3.0)], 4.0))
    config = SessionConfig(segmenter=SegmenterConfig(preroll_ms=0))
    session = Session("s1", config, EnergyVadModel())
    session.handle(Configure(), 0.0)
    session.handle(Cut(), 0.0)  # nothing open yet: no error (a Commit's would be one)
    half = 2 * int(1.5 * SR)
    for i, piece in enumerate(chunks(audio[:half], 3200)):
        session.handle(Audio(piece), i * 0.1)
    session.handle(Cut(), 1.5)
    for i, piece in enumerate(chunks(audio[half:], 3200)):
        session.handle(Audio(piece), 1.5 + i * 0.1)
    session.handle(Stop(), 9.0)
    serve(session, True)
    events = session.events_to_send()
    stops = [e for e in events if isinstance(e, SpeechStopped)]
    assert stops[0].cause is StopCause.COMMIT and stops[0].end_ms == 1500
    spans = [(f.start_ms, f.end_ms) for f in finals(events)]
    assert spans[0] == (200, 1500) and spans[1][0] == 1500  # the speech after it goes on
    assert spans[1][1] >= 2900


def test_requests_carry_the_streams_hotwords_then_the_servers() -> None:
    server = (Hotword("Acme Corp", 3.0), Hotword("Zed"))
    session = make_session(hotwords=server)
    session.receive_text('{"type":"start","hotwords":{"Zed":1.0,"Kowalski":4}}', now=0.0)
    audio = tone_bursts([(0.3, 1.5)], 2.5)
    (request,) = final_requests(collect_requests(session, to_s16le(audio), 1600))
    # The stream's own boost for Zed wins; the server's phrases it does not name follow.
    assert request.options.hotwords == (
        Hotword("Zed", 1.0),
        Hotword("Kowalski", 4.0),
        Hotword("Acme Corp", 3.0),
    )


def test_merged_hotwords_stop_at_the_limit() -> None:
    own = tuple(Hotword(f"own {i}") for i in range(MAX_HOTWORDS - 1))
    server = (Hotword("own 0"), Hotword("server 1"), Hotword("server 2"))
    merged = merged_hotwords(own, server)
    assert len(merged) == MAX_HOTWORDS and merged[-1] == Hotword("server 1")


def test_the_servers_hotwords_apply_without_a_start_and_ready_reports_them() -> None:
    server = (Hotword("Acme Corp", 3.0),)
    session = make_session(hotwords=server)
    audio = tone_bursts([(0.3, 1.5)], 2.5)
    events = run(session, to_s16le(audio), 1600)
    (ready,) = [e for e in wire(events) if e["type"] == "ready"]
    assert ready["config"]["hotwords"] == {"Acme Corp": 3.0}
    requests = final_requests(
        collect_requests(make_session(hotwords=server), to_s16le(audio), 1600)
    )
    assert [r.options.hotwords for r in requests] == [server]


def ascii_only(hotwords: Sequence[Hotword]) -> str | None:
    """A model that writes ASCII only: a small real refusal, as the server's tokenizer gives."""
    bad = [h.phrase for h in hotwords if not h.phrase.isascii()]
    return f"cannot write {bad}" if bad else None


def test_hotwords_the_model_cannot_write_are_refused_at_start() -> None:
    session = make_session(hotword_refusal=ascii_only)
    start = '{"type":"start","hotwords":["Zed","Zo\u00eb"]}'
    with pytest.raises(UnsupportedHotwordError, match="Zo\u00eb") as info:
        session.receive_text(start, now=0.0)
    assert info.value.code == "unsupported_hotword" and "Zed" not in info.value.message
    assert session.events_to_send() == []  # no `ready`: nothing was configured
    session = make_session(hotword_refusal=ascii_only)
    session.receive_text('{"type":"start","hotwords":["Zed"]}', now=0.0)
    (ready,) = [e for e in wire(session.events_to_send()) if e["type"] == "ready"]
    assert ready["config"]["hotwords"] == {"Zed": DEFAULT_HOTWORD_BOOST}


def test_a_client_secrets_pinned_hotwords_are_checked_in_the_clients_place() -> None:
    pins = Pins(hotwords=(Hotword("Zo\u00eb"),))
    session = make_session(hotword_refusal=ascii_only, pinned=pins)
    with pytest.raises(UnsupportedHotwordError, match="Zo\u00eb"):
        session.receive_text('{"type":"start","hotwords":["Zed"]}', now=0.0)
