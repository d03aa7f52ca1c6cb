"""The supervisor keeps a retiring worker's streams for the workers their clients resume
on, and a resume that overtakes its stream's hand-over waits for it."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from server.host.messages import MOVING, NOT_WAITING, TakeUp
from server.resume.handover import Handover
from streaming.protocols.v1.codec import ResumeRequest
from tests.server.host.test_link import host, run
from tests.server.test_streams import configured

REQUEST = ResumeRequest("rs_token", samples=0, last_utt_id=None)


def handover(session_id: str = "s1") -> Handover:
    return Handover(session_id, "call", "call", None, 16000, 1000, 3, ())


def test_a_resume_that_overtakes_its_streams_hand_over_gets_it_once_it_comes(
    tmp_path: Path,
) -> None:
    async def scenario() -> tuple[object, object]:
        async with host(tmp_path) as (_, (owner, lander)):
            owner.streams.open(configured("call"), "s1", "v1", 0.0)
            await asyncio.sleep(0.05)  # claimed host-wide

            async def moving(port: Any, body: TakeUp) -> str:
                return MOVING  # its worker is settling it at a pause

            owner.link.on_take_up = moving
            port: Any = SimpleNamespace(peer="10.0.0.1")
            resumed = asyncio.create_task(
                lander.link.take_up_elsewhere(port, "call", "s1", REQUEST)
            )
            await asyncio.sleep(0.2)
            kept = await owner.link.hand_over(handover(), 30.0)
            first = await asyncio.wait_for(resumed, 5)
            # Taken: a second resume finds nothing (the owner no longer holds it either).
            owner.streams.close(owner.streams.get("call"), None)  # type: ignore[arg-type]
            await asyncio.sleep(0.05)
            again = await lander.link.take_up_elsewhere(port, "call", "s1", REQUEST)
            return (kept, first), again

    (kept, first), again = run(scenario())
    assert kept is True and first == handover()
    assert again == NOT_WAITING


def test_a_handed_over_stream_goes_only_to_a_resume_of_its_session(tmp_path: Path) -> None:
    async def scenario() -> tuple[object, object]:
        async with host(tmp_path) as (_, (owner, lander)):
            await owner.link.hand_over(handover("s1"), 30.0)
            port: Any = SimpleNamespace(peer="10.0.0.1")
            other = await lander.link.take_up_elsewhere(port, "call", "s2", REQUEST)
            mine = await lander.link.take_up_elsewhere(port, "call", "s1", REQUEST)
            return other, mine

    other, mine = run(scenario())
    assert other == NOT_WAITING and mine == handover("s1")
