"""A worker that took connections before it was ready holds a client until it is (within
a bound), instead of refusing a client of a host whose other workers already say ready.

Seen in CI: `test_ga_server_vad_transcripts_equal_v1_finals[2-workers-pcm16]` got `503 server
is starting` from worker 0 (which serves early on its first start) after worker 1's
/readyz had said ready.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from server.app import STARTING_HOLD_S, App
from server.host.link import WorkerSeat


@dataclass
class Starting:
    """The parts of an App that `hold_while_starting` reads."""

    seat: WorkerSeat | None
    state: str = "starting"
    _ready: asyncio.Event = field(default_factory=asyncio.Event)


def early_seat() -> WorkerSeat:
    return WorkerSeat(0, "/tmp/control", (3,), serve_early=True)


def test_a_starting_worker_holds_a_client_until_it_is_ready() -> None:
    async def main() -> float:
        app = Starting(early_seat())
        held = asyncio.create_task(App.hold_while_starting(app))  # type: ignore[arg-type]
        await asyncio.sleep(0.2)
        assert not held.done()
        app.state = "ready"
        app._ready.set()
        started = time.perf_counter()
        await asyncio.wait_for(held, 1)
        return time.perf_counter() - started

    assert asyncio.run(main()) < 0.5


def test_a_single_process_or_a_ready_worker_does_not_hold() -> None:
    async def main() -> None:
        for app in (Starting(None), Starting(early_seat(), state="ready")):
            await asyncio.wait_for(App.hold_while_starting(app), 0.5)  # type: ignore[arg-type]

    asyncio.run(main())


def test_the_hold_is_bounded_below_a_clients_handshake_timeout() -> None:
    assert 0 < STARTING_HOLD_S <= 10
