"""StreamHub: publishing, backlog, slow followers, taken ids, waiting for a stream."""

from __future__ import annotations

import asyncio

import pytest

from engine.types import Transcript
from server.streams.hub import Publisher, StreamHub
from streaming.audio.decoder import AudioFormat
from streaming.commands import StreamOptions
from streaming.errors import StreamIdTakenError
from streaming.events import Configured, Ended, ErrorEvent, Final, Partial, SessionEvent


def configured(stream_id: str = "call") -> Configured:
    fmt = AudioFormat("mulaw", 8000, 2)
    return Configured("s1", fmt, StreamOptions(), "m", True, ("agent", "customer"), stream_id)


def final(i: int, channel: int = 0) -> Final:
    text = Transcript(f"utterance {i}", "en", "neutral", "speech", True, f"utterance {i}")
    return Final(i, i * 1000, i * 1000 + 500, text, channel=channel)


async def take(sub: object, n: int) -> list[SessionEvent]:
    return [await sub.outbox.get() for _ in range(n)]  # type: ignore[attr-defined]


def test_a_follower_gets_the_configuration_and_missed_finals_then_live_events() -> None:
    hub = StreamHub(max_pending=8, max_backlog=3)
    stream = hub.open(configured(), "s1", "v1", 0.0)
    for i in range(5):
        hub.publish(stream, final(i))
    sub = hub.subscribe("call")
    assert sub is not None
    hub.publish(stream, Partial(5, 5000, 5400, "live", 0, channel=1))
    hub.publish(stream, Ended())
    events = asyncio.run(take(sub, 6))
    # The backlog is bounded: the two oldest finals are gone, the rest come in order.
    assert events[0] == configured()
    assert [e.utt_id for e in events[1:4]] == [2, 3, 4]  # type: ignore[union-attr]
    assert isinstance(events[4], Partial) and isinstance(events[5], Ended)
    assert hub.get("call") is None and stream.finals == 5


def test_a_slow_follower_is_dropped_and_the_stream_goes_on() -> None:
    hub = StreamHub(max_pending=4)
    stream = hub.open(configured(), "s1", "v1", 0.0)
    slow, fast = hub.subscribe("call"), hub.subscribe("call")
    assert slow is not None and fast is not None
    for i in range(3):
        hub.publish(stream, final(i))
        asyncio.run(take(fast, 2 if i == 0 else 1))  # the fast one keeps up
    hub.publish(stream, final(3))  # the slow one's fifth event does not fit
    assert slow.dropped.is_set() and not fast.dropped.is_set()
    assert stream.subscribers == [fast]
    hub.publish(stream, final(4))
    assert len(fast.outbox) == 2


def test_a_taken_id_is_refused_until_the_first_stream_ends() -> None:
    hub = StreamHub()
    first = hub.open(configured(), "s1", "v1", 0.0)
    with pytest.raises(StreamIdTakenError):
        hub.open(configured(), "s2", "twilio", 0.0)
    hub.publish(first, Ended())
    assert hub.open(configured(), "s2", "twilio", 0.0).session_id == "s2"


def test_a_stream_lost_without_end_tells_its_followers_why() -> None:
    hub = StreamHub()
    publisher = Publisher(hub, "s1", "v1", 0.0)
    assert publisher.event(configured()) is None
    sub = hub.subscribe("call")
    assert sub is not None
    publisher.close(ErrorEvent("session_closed", "gone"))
    events = asyncio.run(take(sub, 3))
    assert isinstance(events[1], ErrorEvent) and isinstance(events[2], Ended)
    assert len(hub) == 0


def test_a_second_publisher_of_a_live_id_gets_the_error_once() -> None:
    hub = StreamHub()
    Publisher(hub, "s1", "v1", 0.0).event(configured())
    second = Publisher(hub, "s2", "v1", 0.0)
    assert isinstance(second.event(configured()), StreamIdTakenError)
    assert second.event(final(0)) is None  # never listed: its events go nowhere
    assert hub.get("call").session_id == "s1"  # type: ignore[union-attr]


def test_waiting_for_a_stream_wakes_when_it_opens_and_leaves_nothing_behind() -> None:
    async def scenario() -> tuple[bool, bool]:
        hub = StreamHub()
        waiter = asyncio.create_task(hub.wait_for("call", 5.0))
        late = asyncio.create_task(hub.wait_for("never", 0.05))
        await asyncio.sleep(0)
        hub.open(configured(), "s1", "v1", 0.0)
        found = await asyncio.wait_for(waiter, 1.0)
        missing = await late
        return found is not None and missing is None, not hub._opened._events and hub.waiting == 0

    woke, clean = asyncio.run(scenario())
    assert woke and clean
