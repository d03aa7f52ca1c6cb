"""OpenAI Realtime server-side objects: the session object (GA and beta) and SenseVoice's extras."""

from __future__ import annotations

from typing import Any

from streaming.events import Final
from streaming.protocols.json_text import tag_fields
from streaming.protocols.openai.session import (
    BETA_FORMATS,
    GA_FORMATS,
    NoiseReduction,
    RealtimeSettings,
    Transcription,
    VadSettings,
)


def _transcription_out(t: Transcription, served_model: str) -> dict[str, Any]:
    out: dict[str, Any] = {
        "model": t.model or served_model,
        "language": None if t.language == "auto" else t.language,
        "prompt": t.prompt,
    }
    if t.keywords:
        out["keywords"] = list(t.keywords)
    return out


def _turn_out(vad: VadSettings | None) -> dict[str, Any] | None:
    if vad is None:
        return None
    # null durations mean the server's own settings (--preroll-ms, --end-silence-ms).
    out: dict[str, Any] = {
        "type": vad.type,
        "threshold": vad.threshold,
        "prefix_padding_ms": vad.prefix_padding_ms,
        "silence_duration_ms": vad.silence_duration_ms,
    }
    if vad.eagerness is not None:
        out["eagerness"] = vad.eagerness
    return out


def _noise_out(noise: NoiseReduction | None) -> dict[str, Any] | None:
    if noise is None:
        return None
    return {"type": noise.type, "strength": noise.strength}


def render_ga(s: RealtimeSettings, session_id: str, served_model: str) -> dict[str, Any]:
    """The GA session object (`RealtimeTranscriptionSessionCreateRequest` plus ids)."""
    kind = next(k for k, v in GA_FORMATS.items() if v == s.encoding)
    fmt: dict[str, Any] = {"type": kind}
    if s.encoding == "pcm_s16le":
        fmt["rate"] = s.sample_rate
    audio_in = {
        "format": fmt,
        "noise_reduction": _noise_out(s.noise_reduction),
        "transcription": _transcription_out(s.transcription, served_model),
        "turn_detection": _turn_out(s.turn_detection),
    }
    return {
        "type": "transcription",
        "object": "realtime.transcription_session",
        "id": session_id,
        "expires_at": 0,
        "audio": {"input": audio_in},
        "include": list(s.include) or None,
    }


def render_beta(s: RealtimeSettings, session_id: str, served_model: str) -> dict[str, Any]:
    """The beta `TranscriptionSession` object (without `client_secret`, as over WebSocket)."""
    return {
        "id": session_id,
        "object": "realtime.transcription_session",
        "expires_at": 0,
        "modalities": ["text"],
        "input_audio_format": next(k for k, v in BETA_FORMATS.items() if v == s.encoding),
        "input_audio_transcription": _transcription_out(s.transcription, served_model),
        "turn_detection": _turn_out(s.turn_detection),
        "input_audio_noise_reduction": _noise_out(s.noise_reduction),
        "include": list(s.include),
    }


def sensevoice_fields(event: Final) -> dict[str, Any]:
    """SenseVoice's extras, under one field SDKs ignore; token times on the stream's clock."""
    t = event.transcript
    out: dict[str, Any] = {
        "start_ms": event.start_ms,
        "end_ms": event.end_ms,
        "language": t.lang,
        "rich_text": t.rich_text,
        "itn": t.itn,
    }
    return out | tag_fields(event)
