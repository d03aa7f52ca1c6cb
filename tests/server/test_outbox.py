"""Outbox: partials coalesce for a lagging client; finals queue up to a bound."""

from __future__ import annotations

import asyncio

import pytest

from engine.types import Transcript
from server.live.outbox import Outbox, OutboxOverflowError
from streaming.events import Ended, Final, Partial


def partial(utt: int, text: str) -> Partial:
    return Partial(utt, 0, 100, text, 0, {})


def final(utt: int) -> Final:
    return Final(utt, 0, 100, Transcript("t", "en", "neutral", "speech", True, "t"))


def test_newer_partial_replaces_an_unsent_one() -> None:
    async def main() -> list:
        box = Outbox()
        box.put(partial(0, "a"))
        box.put(partial(0, "ab"))
        box.put(partial(1, "x"))
        box.put(partial(0, "abc"))
        return [await box.get() for _ in range(len(box))]

    got = asyncio.run(main())
    assert [(e.utt_id, e.text) for e in got] == [(1, "x"), (0, "abc")]


def test_final_removes_its_unsent_partial_and_keeps_order() -> None:
    async def main() -> list:
        box = Outbox()
        box.put(partial(0, "a"))
        box.put(final(0))
        box.put(Ended())
        return [await box.get() for _ in range(len(box))]

    assert [type(e) for e in asyncio.run(main())] == [Final, Ended]


def test_bound_on_pending_finals() -> None:
    box = Outbox(max_pending=3)
    for utt in range(3):
        box.put(final(utt))
    with pytest.raises(OutboxOverflowError):
        box.put(final(3))


def test_get_waits_for_an_event() -> None:
    async def main() -> object:
        box = Outbox()
        waiter = asyncio.create_task(box.get())
        await asyncio.sleep(0)
        assert not waiter.done()
        box.put(Ended())
        return await asyncio.wait_for(waiter, 1)

    assert isinstance(asyncio.run(main()), Ended)


def test_partials_of_different_channels_do_not_replace_each_other() -> None:
    async def main() -> list:
        box = Outbox()
        box.put(Partial(0, 0, 100, "agent", 0, {}, channel=0))
        box.put(Partial(0, 0, 100, "customer", 0, {}, channel=1))
        box.put(Partial(0, 0, 200, "agent again", 0, {}, channel=0))
        return [await box.get() for _ in range(len(box))]

    # Only the same channel's unsent partial is replaced (the newer one queues last).
    assert [(e.channel, e.text) for e in asyncio.run(main())] == [
        (1, "customer"),
        (0, "agent again"),
    ]
