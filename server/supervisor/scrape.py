"""The supervisor's scrape of one engine process's metrics, through its Unix socket."""

from __future__ import annotations

import asyncio
import logging
import pickle

from engine.remote.unix import Answer, Call, Scrape, encode, read_frame

log = logging.getLogger("sensestream.supervisor")

#: An engine answers a scrape from its loop at once; one that does not is left out.
SCRAPE_DEADLINE_S = 2.0


async def scrape_engine(path: str) -> str | None:
    """The engine's exposition text, or None when it does not answer (restarting)."""
    try:
        async with asyncio.timeout(SCRAPE_DEADLINE_S):
            reader, writer = await asyncio.open_unix_connection(path)
            try:
                writer.write(encode(Call(0, Scrape())))
                answer = await read_frame(reader)
            finally:
                writer.close()
    except (OSError, TimeoutError, asyncio.IncompleteReadError, pickle.UnpicklingError) as exc:
        log.debug("no metrics from the engine at %s: %s", path, exc)
        return None
    if not isinstance(answer, Answer) or not isinstance(answer.value, bytes):
        return None
    return answer.value.decode()
