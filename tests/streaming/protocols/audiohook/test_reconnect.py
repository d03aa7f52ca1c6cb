"""AudioHook's server-asked `reconnect` (a hand-off) and `open`s that continue sessions."""

from __future__ import annotations

import json
from typing import Any

import pytest

from streaming.commands import Configure
from streaming.errors import CLOSE_POLICY_VIOLATION, InvalidFieldError
from streaming.events import Configured, Ended, Final
from streaming.limits import SessionLimits
from streaming.protocols.audiohook.codec import HAND_OFF_INFO, MAX_INFO_CHARS, AudioHookCodec
from streaming.protocols.audiohook.messages import ContinuedSession, read_continued
from tests.streaming.protocols.audiohook.test_codec import (
    CONVERSATION,
    RATE,
    SID,
    STEREO,
    Link,
    disconnected,
    opened_link,
    stereo_call,
)

EARLIER = "3c1d9a52-6b0e-4f7a-9d2c-5e8f1a2b3c4d"  # the session a new one continues
OTHER = "a0b1c2d3-e4f5-4a6b-8c7d-9e0f1a2b3c4d"


def codec_of(link: Link) -> AudioHookCodec:
    codec = link.codec
    assert isinstance(codec, AudioHookCodec)
    return codec


def hand_off(link: Link, info: str = HAND_OFF_INFO) -> list[dict[str, Any]]:
    """The connection's hand-off: what the codec gives it, sent at once."""
    sent = [json.loads(frame) for frame in codec_of(link).hand_off(info)]
    link.messages += sent
    return sent


def entry(session: Any = EARLIER, serverseq: Any = 7, clientseq: Any = 12) -> dict[str, Any]:
    return {"id": session, "serverseq": serverseq, "clientseq": clientseq}


def transcript_offsets(link: Link) -> list[str]:
    return [t["offset"] for t in link.transcripts()]


# ---- the hand-off: `reconnect` -----------------------------------------------------------


def test_a_hand_off_is_a_reconnect_counted_as_every_server_message() -> None:
    link = opened_link()
    link.send("ping")
    (reconnect,) = hand_off(link)
    assert reconnect == {
        "version": "2",
        "type": "reconnect",
        "seq": 3,  # after `opened` and `pong`
        "clientseq": 2,  # the `ping`, the last client message taken
        "id": SID,
        "parameters": {"info": HAND_OFF_INFO},
    }
    codec = codec_of(link)
    assert (codec.serverseq, codec.clientseq) == (3, 2)
    link.send("ping")  # the client has seen the reconnect: its serverseq says so
    assert link.of("pong")[-1]["seq"] == 4 and link.close_code is None


def test_after_a_hand_off_the_stream_goes_on_until_the_clients_close() -> None:
    link = opened_link()
    link.hold = True  # the engine answers late: a final is owed at the close
    hand_off(link)
    # The client goes on streaming until its new session is open, then closes this one.
    link.audio(stereo_call([(0.2, 1.0)], [(0.5, 2.0)], 2.0))
    link.send("close", reason="reconnect")
    assert "closed" not in link.kinds
    link.release()
    assert link.kinds == ["opened", "reconnect", "event", "event", "closed"]
    assert [m["seq"] for m in link.messages] == [1, 2, 3, 4, 5]
    assert link.of("closed")[0]["clientseq"] == 2  # the close
    assert isinstance(link.events[-1], Ended) and link.close_code is None


@pytest.mark.parametrize(
    ("handed_off", "end"),
    [
        (False, ["event", "disconnect"]),  # a plain drain: the session is over
        # Asked to reconnect, the client has not closed this session by the drain's end:
        # it did not move (Genesys Cloud does not yet), and learns the session is over.
        (True, ["reconnect", "event", "disconnect"]),
    ],
)
def test_a_drain_ends_in_a_disconnect_unless_the_client_closed(
    handed_off: bool, end: list[str]
) -> None:
    link = opened_link()
    link.hold = True
    link.audio(stereo_call([(0.2, 2.0)], [], 1.0))  # speech still open: a final is owed
    if handed_off:
        hand_off(link)
    link.core.end_of_stream(link.now)  # the server drains the session
    link.release()
    assert link.kinds == ["opened", *end]
    assert link.messages[-1]["parameters"] == {
        "reason": "completed",
        "info": "the server is shutting down",
    }
    assert isinstance(link.events[-1], Ended) and link.close_code is None


def test_there_is_nothing_to_hand_off_before_opened_goes_out() -> None:
    codec = AudioHookCodec(SessionLimits(), SID)
    assert codec.hand_off() == ()  # no session yet
    open_message = {
        "version": "2",
        "id": SID,
        "type": "open",
        "seq": 1,
        "serverseq": 0,
        "position": "PT0S",
        "parameters": {
            "organizationId": EARLIER,
            "conversationId": CONVERSATION,
            "participant": {},
            "media": [STEREO],
        },
    }
    (configure,) = codec.decode(json.dumps(open_message))
    assert isinstance(configure, Configure)
    assert codec.hand_off() == ()  # `opened` has not gone out: no `reconnect` before it
    configured = Configured("core", configure.audio, configure.options, "model", False)
    (opened,) = codec.encode(configured)
    assert json.loads(opened)["type"] == "opened"
    (reconnect,) = codec.hand_off()
    assert json.loads(reconnect)["seq"] == 2


def test_a_session_is_handed_off_once_and_not_while_it_closes_or_after_a_disconnect() -> None:
    link = opened_link()
    assert len(hand_off(link)) == 1
    assert hand_off(link) == []  # the client was asked already
    closing = opened_link()
    closing.hold = True
    closing.audio(stereo_call([(0.2, 2.0)], [], 1.0))
    closing.send("close", reason="end")
    assert hand_off(closing) == []  # the client is ending the session itself
    closing.release()
    assert closing.kinds == ["opened", "event", "closed"]
    failed = opened_link()
    failed.send("bogus")
    assert hand_off(failed) == [] and failed.kinds == ["opened", "disconnect"]


def test_a_long_hand_off_info_is_cut() -> None:
    link = opened_link()
    (reconnect,) = hand_off(link, "x" * (MAX_INFO_CHARS + 50))
    info = reconnect["parameters"]["info"]
    assert len(info) == MAX_INFO_CHARS and info.endswith("…")


# ---- continued sessions ------------------------------------------------------------------


def test_a_continued_open_names_the_earlier_sessions_and_a_stream_of_its_own() -> None:
    sessions = [entry(EARLIER.upper(), 7, 12), entry(OTHER, 0, 0)]
    link = opened_link(continuedSessions=sessions)
    assert codec_of(link).continues == (
        ContinuedSession(EARLIER, 7, 12),  # the id as every id here: in lower case
        ContinuedSession(OTHER, 0, 0),
    )
    (opened,) = link.messages
    assert opened["type"] == "opened" and opened["seq"] == 1 and opened["clientseq"] == 1
    # The session it continues still holds the call's name until the client closes it:
    # the new one is named by its own session id.
    assert link.configures()[0].stream_id == SID != CONVERSATION
    assert link.close_code is None


@pytest.mark.parametrize("sessions", [None, []])
def test_an_open_that_continues_nothing_is_a_new_session(sessions: list[Any] | None) -> None:
    extra = {} if sessions is None else {"continuedSessions": sessions}
    link = opened_link(**extra)
    assert codec_of(link).continues == () and link.close_code is None


@pytest.mark.parametrize(
    ("sessions", "info"),
    [
        ({"id": EARLIER}, "open: continuedSessions must be a list of sessions"),
        ([7], "open: continuedSessions[0] must be a JSON object"),
        ([entry(OTHER), entry("call-1")], "open: continuedSessions[1].id must be a UUID"),
        ([entry(serverseq=-1)], "open: continuedSessions[0].serverseq must be a non-negative"),
        ([entry(serverseq="7")], "open: continuedSessions[0].serverseq must be a non-negative"),
        ([entry(clientseq=True)], "open: continuedSessions[0].clientseq must be a non-negative"),
        ([{"id": EARLIER, "serverseq": 1}], "continuedSessions[0].clientseq must be"),
        ([entry(), entry(EARLIER.upper())], f"[1].id names session {EARLIER} a second time"),
        ([entry(SID)], f"open: continuedSessions[0].id is this session's own ({SID})"),
    ],
)
def test_a_malformed_continued_open_disconnects(sessions: Any, info: str) -> None:
    link = opened_link(continuedSessions=sessions)
    disconnected(link, info)
    assert link.close_code == CLOSE_POLICY_VIOLATION
    assert link.configures() == []  # refused before any stream was named


def test_continued_sessions_are_read_into_typed_records_or_a_typed_error() -> None:
    assert read_continued([entry()]) == (ContinuedSession(EARLIER, 7, 12),)
    with pytest.raises(InvalidFieldError, match=r"continuedSessions\[0\]\.id must be a UUID"):
        read_continued([entry(None)])


# ---- positions on a continued session ---------------------------------------------------


def continued_link(open_at_s: int) -> Link:
    """A session continuing EARLIER whose client opens it at position `open_at_s`."""
    link = Link({"audiohook-session-id": SID})
    link.position = open_at_s * RATE
    link.open(continuedSessions=[entry()])
    return link


@pytest.mark.parametrize("open_at_s", [0, 125])
def test_offsets_on_a_continued_session_count_from_its_opens_position(open_at_s: int) -> None:
    # The client may count positions from zero on the new session or on from the earlier
    # one's: the offsets follow its count, from where its `open` says the audio starts.
    link = continued_link(open_at_s)
    link.audio(stereo_call([(0.4, 1.0)], [], 1.5))
    link.send("close", reason="end")
    assert transcript_offsets(link) == [f"PT{open_at_s}.4S"]
    # The stream's own times start at zero whatever the client's count.
    finals = [e for e in link.events if isinstance(e, Final) and e.transcript.text]
    assert [f.start_ms for f in finals] == [400]


def test_a_pause_on_a_continued_session_is_in_the_clients_count() -> None:
    link = continued_link(125)
    link.audio(stereo_call([(0.2, 0.6)], [], 1.0))
    link.send("paused")
    # The client dropped 2 s from 126 s on; the audio after the pause begins at 128 s.
    link.send("resumed", start="PT126S", discarded="PT2S")
    assert len(link.audio_sent()) == 2 * RATE * (1 + 2)  # the gap filled, not 126 s of it
    link.position += 2 * RATE
    link.audio(stereo_call([(0.5, 1.0)], [], 1.5))
    link.send("close", reason="end")
    assert transcript_offsets(link) == ["PT125.2S", "PT128.5S"]


def test_a_new_sessions_offsets_start_at_zero() -> None:
    # Without continuedSessions nothing changes: offsets count from the session's start.
    link = opened_link()
    link.audio(stereo_call([(0.4, 1.0)], [], 1.5))
    link.send("close", reason="end")
    assert transcript_offsets(link) == ["PT0.4S"]
