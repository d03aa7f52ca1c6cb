"""A session under pins (a client secret's): its Configure obeys them, whatever it asks."""

from __future__ import annotations

import pytest

from engine.types import Hotword, RequestKind
from streaming.audio.decoder import AudioFormat
from streaming.commands import Audio, Configure, Stop, StreamOptions
from streaming.core import SessionCore
from streaming.errors import InvalidFieldError
from streaming.events import Configured
from streaming.pins import Pins
from streaming.session import Session, SessionConfig
from tests.speech import to_s16le
from tests.streaming.fakes import EnergyVadModel, tone_bursts

PINS = Pins("en", (Hotword("hello world"),), "pcm_s16le", 8000)
SERVER_WORD = Hotword("sensestream")


def session(pins: Pins = PINS) -> Session:
    config = SessionConfig(pinned=pins, hotwords=(SERVER_WORD,))
    return Session("s1", config, EnergyVadModel())


def configured(s: Session | SessionCore) -> Configured:
    (event,) = [e for e in s.events_to_send() if isinstance(e, Configured)]
    return event


def asking(audio: AudioFormat, language: str = "zh") -> Configure:
    return Configure(audio, StreamOptions(language=language, hotwords=(Hotword("other"),)))


def test_pinned_language_and_hotwords_replace_the_clients_and_are_reported() -> None:
    s = session()
    s.handle(asking(AudioFormat("pcm_s16le", 8000)), 0.0)
    options = configured(s).options
    assert options.language == "en"
    # The pinned hotwords, then the server's own, as for any session's.
    assert options.hotwords == (Hotword("hello world"), SERVER_WORD)


def test_decoding_uses_the_pinned_options() -> None:
    s = session(Pins("en", (Hotword("hello world"),)))
    s.handle(asking(AudioFormat()), 0.0)
    s.handle(Audio(to_s16le(tone_bursts([(0.2, 1.0)], 2.0))), 0.0)
    s.handle(Stop(), 2.0)
    finals = [r for r in s.requests_to_submit() if r.kind is not RequestKind.PARTIAL]
    assert finals
    for request in finals:
        assert request.options.language == "en"
        assert request.options.hotwords == (Hotword("hello world"), SERVER_WORD)


@pytest.mark.parametrize(
    "audio", [AudioFormat("pcm_s16le", 16000), AudioFormat("mulaw", 8000)], ids=["rate", "encoding"]
)
def test_another_audio_format_than_the_pinned_one_is_refused(audio: AudioFormat) -> None:
    s = session()
    with pytest.raises(InvalidFieldError, match="pcm_s16le at 8000 Hz"):
        s.handle(asking(audio), 0.0)
    assert s.events_to_send() == [] and not s.configured


def test_audio_alone_is_taken_in_the_pinned_format_with_the_pinned_options() -> None:
    s = session(Pins(language="en", encoding="mulaw", sample_rate=8000))
    s.handle(Audio(bytes(800)), 0.0)
    event = configured(s)
    assert event.audio == AudioFormat("mulaw", 8000) and event.options.language == "en"


def test_each_channel_of_a_multichannel_stream_is_held_to_the_pinned_format() -> None:
    config = SessionConfig(pinned=PINS)
    core = SessionCore("s1", config, EnergyVadModel())
    stereo = Configure(
        AudioFormat("pcm_s16le", 8000, 2), StreamOptions(language="ja"), ("agent", "caller")
    )
    core.handle(stereo, 0.0)
    event = configured(core)
    assert event.audio == AudioFormat("pcm_s16le", 8000, 2) and event.options.language == "en"
    refused = SessionCore("s2", config, EnergyVadModel())
    with pytest.raises(InvalidFieldError):
        refused.handle(
            Configure(AudioFormat("pcm_s16le", 16000, 2), channel_labels=("a", "b")), 0.0
        )


def test_no_pins_change_nothing() -> None:
    s = session(Pins())
    s.handle(asking(AudioFormat("mulaw", 8000), language="ja"), 0.0)
    event = configured(s)
    assert event.audio == AudioFormat("mulaw", 8000) and event.options.language == "ja"
