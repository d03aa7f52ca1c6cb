"""The ends of a resume piped between workers: frames in order, either side's going told to
the other once, and a flooded end dropped rather than grown without bound."""

from __future__ import annotations

import asyncio

import pytest

from server.host.messages import HangUp, Pipe
from server.live.socket_port import ClientGone
from server.resume.pipes import MAX_PIPED_BYTES, PipePort


async def no_wait() -> None:
    return None


def test_frames_come_out_in_order_and_a_hang_up_ends_the_reads_after_them() -> None:
    async def scenario() -> tuple[list[str | bytes], bool]:
        sent: list[object] = []
        port = PipePort("0.1", "peer", sent.append, no_wait)
        port.received("start")
        port.received(b"\x01\x02")
        port.hung_up(HangUp("0.1"))
        got = [await port.recv(), await port.recv()]
        with pytest.raises(ClientGone):
            await port.recv()
        return got, port.closed

    got, closed = asyncio.run(scenario())
    assert got == ["start", b"\x01\x02"] and closed


def test_the_streams_frames_and_its_close_go_out_once() -> None:
    async def scenario() -> list[object]:
        sent: list[object] = []
        port = PipePort("0.2", "peer", sent.append, no_wait)
        await port.send('{"type":"resumed"}')
        await port.close(1000, None)
        port.abort()  # already hung up: nothing more goes
        with pytest.raises(ClientGone):
            await port.send("late")
        return sent

    assert asyncio.run(scenario()) == [
        Pipe("0.2", '{"type":"resumed"}'),
        HangUp("0.2", 1000, None),
    ]


def test_a_flooded_pipe_is_dropped_and_its_client_told() -> None:
    async def scenario() -> tuple[list[object], bool]:
        sent: list[object] = []
        port = PipePort("0.3", "peer", sent.append, no_wait)
        chunk = b"\0" * (1 << 20)
        for _ in range(MAX_PIPED_BYTES // len(chunk) + 1):
            port.received(chunk)
        return sent, port.closed

    sent, closed = asyncio.run(scenario())
    assert sent == [HangUp("0.3")] and closed
