"""Fuzzing: any sequence of text and binary frames only ever raises typed protocol errors."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streaming.errors import ProtocolError
from streaming.session import Session, SessionConfig
from tests.streaming.fakes import EnergyVadModel, V1Session, answer

start_messages = st.fixed_dictionaries(
    {"type": st.just("start")},
    optional={
        "sample_rate": st.sampled_from([8000, 16000, 44100, 12345, 0, -1, True, "16000"]),
        "encoding": st.sampled_from(["pcm_s16le", "pcm_f32le", "mulaw", "alaw", "mp3", 7]),
        "channels": st.sampled_from([1, 2, 3, None]),
        "language": st.sampled_from(["auto", "en", "xx"]),
        "pace": st.sampled_from(["live", "replay", "warp"]),
        "itn": st.booleans(),
    },
).map(json.dumps)
texts = st.one_of(
    start_messages,
    st.just('{"type":"stop"}'),
    st.text(max_size=40),
    st.sampled_from(['{"type":"pause"}', "[]", "null", '{"type":7}', '{"v":2,"type":"stop"}']),
)
frames = st.one_of(texts, st.binary(max_size=4000))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(frames, max_size=25))
def test_any_frame_sequence_raises_only_protocol_errors(sequence: list[str | bytes]) -> None:
    session = V1Session(Session("fuzz", SessionConfig(), EnergyVadModel()))
    events: list[object] = []
    now = 0.0
    for frame in sequence:
        now += 0.5
        try:
            if isinstance(frame, bytes):
                session.receive_audio(frame, now)
            else:
                session.receive_text(frame, now)
        except ProtocolError as exc:
            assert exc.code and exc.message
            session.abort(exc, now)
            break
        for request in session.requests_to_submit():
            session.receive_result(answer(request), now)
        events += session.events_to_send()
    session.end_of_stream(now)
    for request in session.requests_to_submit():
        session.receive_result(answer(request), now)
    events += session.events_to_send()
    assert session.finished and type(events[-1]).__name__ == "Ended"
    assert sum(type(e).__name__ == "Ended" for e in events) == 1
