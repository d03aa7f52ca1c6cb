"""Genesys' AudioHook suite's transcript-connector cases, with the spans it expects.

Genesys' jest suite (see tools/audiohook_conformance.py) plays 11 s of a two-party call
and checks how many transcripts come back and where (±0.5 s) when the client sends
`update`, `discarded` or `paused` mid-utterance. Here the same cases run on an espeak
remake of its call (tests/callcentre/genesys_call.py), through a real server with the
demo model and the real FSMN VAD, every handshake signed with the client secret by a
signer written from RFC 9421 (tests/callcentre/rfc9421.py), as Genesys signs it.
"""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path

import pytest

from tests.callcentre.audiohook_emulator import AudioHookCall, Pause, TimedMessage, play
from tests.callcentre.genesys_call import CHANNELS, EXPECTED, TOLERANCE_S, make_genesys_call
from tests.server.inprocess import serving

KEY = "genesys-api-key-0123456789"
SECRET = b"a client secret of 32 bytes, ok!"
CONVERSATION = "2f4b7c1e-8a3d-4e5f-9b6a-0c1d2e3f4a5b"
#: Where the suite's client acts: mid-way through the agent's long last utterance.
AT_S = 8.0
#: The suite's spans when that utterance is split there (`transcript_info_longer`).
SPLIT = (*EXPECTED[:4], (6.7, 1.3), (8.0, 1.3))
Spans = list[tuple[float, float]]


@pytest.fixture(scope="module")
def genesys_call(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    return make_genesys_call(tmp_path_factory.mktemp("genesys-call"))


def seconds(duration: str) -> float:
    return float(duration.removeprefix("PT").removesuffix("S"))


async def cases(model: Path, audio: bytes) -> dict[str, Spans]:
    """Each case's transcript spans (offset, duration) in arrival order."""
    secret = base64.b64encode(SECRET).decode()
    scripts = {
        "events": {},
        "update": {"messages": (TimedMessage(AT_S, "update", {"language": "en-US"}),)},
        "discard": {
            "messages": (TimedMessage(AT_S, "discarded", {"start": "PT8S", "discarded": "PT0.5S"}),)
        },
        # The suite pauses for 10 s, sends `paused` twice, and the audio waits.
        "pause": {"pause": Pause(AT_S, 10.0, lost=False, times=2)},
    }
    out: dict[str, Spans] = {}
    async with serving(model, api_keys=KEY, audiohook_client_secret=secret) as (_, url):
        for name, script in scripts.items():
            call = AudioHookCall(
                audio,
                CONVERSATION,
                channels=CHANNELS,
                speed=2.0,
                api_key=KEY,
                client_secret=SECRET,
                **script,  # type: ignore[arg-type]
            )
            run = await play(url.removesuffix("/ws") + "/audiohook", call)
            assert run.problems == [] and run.messages[-1]["type"] == "closed", (name, run)
            out[name] = [(seconds(t["offset"]), seconds(t["duration"])) for t in run.transcripts()]
    return out


def within(got: Spans, want: tuple[tuple[float, float], ...]) -> bool:
    return len(got) == len(want) and all(
        abs(o - wo) <= TOLERANCE_S and abs(d - wd) <= TOLERANCE_S
        for (o, d), (wo, wd) in zip(got, want, strict=True)
    )


def test_update_discard_and_pause_mid_utterance_give_the_suites_spans(
    demo_model: Path, genesys_call: bytes
) -> None:
    got = asyncio.run(asyncio.wait_for(cases(demo_model, genesys_call), 240))
    # Nothing sent mid-call: five utterances, where the reference server finds them.
    assert within(got["events"], EXPECTED), got["events"]
    # `update` and `paused` end the utterance in progress where they fall: six.
    assert within(got["update"], SPLIT), got["update"]
    assert within(got["pause"], SPLIT), got["pause"]
    # A discard the client reports while it goes on sending keeps the utterance whole.
    assert within(got["discard"], EXPECTED), got["discard"]
