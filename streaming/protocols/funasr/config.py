"""FunASR runtime client text: config and end-of-input messages, validated.

Clients send one JSON object per text frame: the first configures the stream, later ones
may repeat or change keys, and `{"is_speaking": false}` (or `"is_finished": true`, or
upstream's `"is_end": true`) ends the input. Unknown keys are ignored, as the reference
servers ignore them; known keys with the wrong type are errors. JSON null counts as an
absent key (the Python clients leave unset keys out, and a null carries no choice).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from engine.types import MAX_HOTWORDS, Hotword
from streaming.audio.decoder import STANDARD_RATES
from streaming.commands import CLIENT_LANGUAGES, StreamOptions, hotwords_from
from streaming.errors import InvalidFieldError
from streaming.protocols.caps import check_count
from streaming.protocols.json_text import load_object

MODES = ("online", "offline", "2pass")
WAV_FORMATS = ("pcm", "wav")
#: The C++ servers' default; the Python server says "microphone".
DEFAULT_WAV_NAME = "wav-default-id"
#: FunASR's hotword weights (its clients send 20, 30, ...) to our per-token boost.
FUNASR_WEIGHT_SCALE = 0.1


@dataclass(frozen=True, slots=True)
class FunasrConfig:
    """The stream's settings as the client's config messages left them."""

    mode: str = "2pass"
    wav_name: str = DEFAULT_WAV_NAME
    wav_format: str = "pcm"
    audio_fs: int = 16000
    svs_lang: str = "auto"
    svs_itn: bool = True
    hotwords: tuple[Hotword, ...] = ()

    def options(self) -> StreamOptions:
        """The neutral stream options these settings ask for."""
        # FunASR clients send files as fast as they can read them, so streams are replays
        # (held to the server's replay rate, not to real time).
        return StreamOptions(
            language=self.svs_lang,
            itn=self.svs_itn,
            partials=self.mode != "offline",
            pace="replay",
            hotwords=self.hotwords,
        )


@dataclass(frozen=True, slots=True)
class ClientText:
    """One parsed text frame: the settings it changes, and whether it ends the input."""

    changes: Mapping[str, Any]
    end: bool


def parse_client_text(text: str) -> ClientText:
    """Parse one text frame; raises a typed ProtocolError for a bad one."""
    return read_message(load_object(text))


def read_message(obj: Mapping[str, Any]) -> ClientText:
    """The settings a message object changes, checked, and whether it ends the input."""
    changes: dict[str, Any] = {}
    for key, value in obj.items():
        if value is None:
            continue
        check = _SETTINGS.get(key)
        if check is not None:
            changes[key] = check(key, value)
        elif key in _ACCEPTED:
            _ACCEPTED[key](key, value)
    if "svs_itn" not in changes and obj.get("itn") is not None:
        # FunASR's own clients send `itn` (Paraformer's name); SenseVoice's `svs_itn`,
        # when given too, is the more specific of the two.
        changes["svs_itn"] = _bool("itn", obj["itn"])
    speaking = _optional_bool(obj, "is_speaking")
    finished = _optional_bool(obj, "is_finished")
    ended = _optional_bool(obj, "is_end")
    return ClientText(changes, end=speaking is False or finished is True or ended is True)


def parse_hotwords(value: Any) -> tuple[Hotword, ...]:
    """Hotwords from a JSON-object string of word: weight, a dict, or a plain space or comma
    list (the default boost); FunASR's weights (20, 30, ...) are a tenth of our boost."""
    if isinstance(value, dict):
        return _weighted(value)
    if not isinstance(value, str):
        raise InvalidFieldError(
            "hotwords must be a string: a JSON object of word: weight, or words separated "
            f"by spaces or commas; got {type(value).__name__}"
        )
    try:
        parsed = json.loads(value)
    except (json.JSONDecodeError, RecursionError):
        parsed = None
    if isinstance(parsed, dict):
        return _weighted(parsed)
    # Not a JSON object: the C++ server then reads a plain list of words.
    words = [w for w in (word.strip() for word in re.split(r"[\s,，]+", value)) if w]
    check_count(len(words), MAX_HOTWORDS, "hotwords")  # before a hotword is made
    return hotwords_from(words)


def _weighted(obj: dict[Any, Any]) -> tuple[Hotword, ...]:
    check_count(len(obj), MAX_HOTWORDS, "hotwords")  # before a weight is read
    weights: dict[str, float] = {}
    for word, weight in obj.items():
        if isinstance(weight, bool) or not isinstance(weight, int | float):
            raise InvalidFieldError(
                f"hotword {word!r} needs a number as its weight; got {weight!r}"
            )
        if str(word).strip():
            weights[str(word).strip()] = float(weight)
    return hotwords_from(weights, scale=FUNASR_WEIGHT_SCALE, clamp=True)


def _optional_bool(obj: Mapping[str, Any], key: str) -> bool | None:
    value = obj.get(key)
    return None if value is None else _bool(key, value)


def _wrong_type(expected: str, key: str, value: Any) -> InvalidFieldError:
    return InvalidFieldError(f"{key} must be {expected}; got {type(value).__name__}")


def _bool(key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise _wrong_type("a boolean", key, value)
    return value


def _int(key: str, value: Any) -> int:
    # bool is a subclass of int in Python; JSON true must not pass as 1.
    if not isinstance(value, int) or isinstance(value, bool):
        raise _wrong_type("an integer", key, value)
    return value


def _str(key: str, value: Any) -> str:
    if not isinstance(value, str):
        raise _wrong_type("a string", key, value)
    return value


def _choice(key: str, value: Any, allowed: tuple[str, ...]) -> str:
    choice = _str(key, value).lower()
    if choice not in allowed:
        raise InvalidFieldError(f"{key} must be one of {', '.join(allowed)}; got {value!r}")
    return choice


def _mode(key: str, value: Any) -> str:
    return _choice(key, value, MODES)


def _svs_lang(key: str, value: Any) -> str:
    return _choice(key, value, CLIENT_LANGUAGES)


def _wav_format(key: str, value: Any) -> str:
    fmt = _str(key, value).lower()
    if fmt not in WAV_FORMATS:
        raise InvalidFieldError(
            f"wav_format {value!r} is not supported: send pcm (16-bit little-endian samples) "
            "or wav (16-bit PCM); this server does not decode compressed audio"
        )
    return fmt


def _audio_fs(key: str, value: Any) -> int:
    rate = _int(key, value)
    if rate not in STANDARD_RATES:
        allowed = ", ".join(str(r) for r in STANDARD_RATES)
        raise InvalidFieldError(f"audio_fs must be one of {allowed} (Hz); got {rate}")
    return rate


def _hotwords(key: str, value: Any) -> tuple[Hotword, ...]:
    return parse_hotwords(value)


def _chunk_size(key: str, value: Any) -> list[int]:
    """Three non-negative ints, as a list or an "a,b,c" string (checked, then unused)."""
    parts: list[Any] = value.split(",") if isinstance(value, str) else value
    if isinstance(parts, list) and len(parts) == 3:
        try:
            sizes = [int(p) if isinstance(p, str) else _int(key, p) for p in parts]
        except (ValueError, InvalidFieldError):
            sizes = []
        if len(sizes) == 3 and min(sizes) >= 0:
            return sizes
    raise InvalidFieldError(f"chunk_size must be three integers like [5, 10, 5]; got {value!r}")


Check = Callable[[str, Any], Any]

#: Keys that set a `FunasrConfig` field of the same name.
_SETTINGS: Mapping[str, Check] = {
    "mode": _mode,
    "wav_name": _str,
    "wav_format": _wav_format,
    "audio_fs": _audio_fs,
    "svs_lang": _svs_lang,
    "svs_itn": _bool,
    "hotwords": _hotwords,
}

#: Keys checked for their type but unused: they tune FunASR's own streaming models (this
# server re-decodes instead). `itn` is read in `read_message`, as `svs_itn`'s other name.
_ACCEPTED: Mapping[str, Check] = {
    "chunk_size": _chunk_size,
    "chunk_interval": _int,
    "encoder_chunk_look_back": _int,
    "decoder_chunk_look_back": _int,
    "itn": _bool,
}
