"""A file's audio as the frames of one stream: mixed to mono, or its channels interleaved."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import soundfile as sf

from engine.errors import AudioError
from engine.features.audio_files import read_audio, resample
from engine.types import SAMPLE_RATE
from sensestream.client import pcm16


class ChannelCountError(Exception):
    """A file whose channels do not fit --multichannel or the --channel-labels given."""

    code = "channel_count"


def read_channels(path: Path) -> np.ndarray:
    """Every channel of a file at 16 kHz, apart: float32 (samples, channels)."""
    try:
        audio, rate = sf.read(str(path), dtype="float32", always_2d=True)
    except (sf.LibsndfileError, RuntimeError, OSError, TypeError) as exc:
        raise AudioError(f"cannot read {path}: {exc}") from exc
    return resample(audio, rate, SAMPLE_RATE)


def check_channels(channels: int, labels: tuple[str, ...]) -> None:
    """Raise ChannelCountError unless a file of `channels` can be streamed unmixed."""
    if channels < 2:
        raise ChannelCountError(
            "--multichannel needs a file of two or more channels; this one is mono"
        )
    if labels and len(labels) != channels:
        raise ChannelCountError(
            f"{len(labels)} channel labels for a file of {channels} channels: give one each"
        )


def load_frames(
    path: Path, chunk_ms: int, multichannel: bool, labels: tuple[str, ...] = ()
) -> tuple[list[bytes], int]:
    """The file as s16le frames of `chunk_ms` each, and how many channels they interleave."""
    if multichannel:
        audio = read_channels(path)
        check_channels(audio.shape[1], labels)
    else:
        audio = read_audio(path)
    step = SAMPLE_RATE * chunk_ms // 1000
    # Rows of a C-ordered (samples, channels) array are interleaved frames as they are.
    frames = [pcm16(audio[i : i + step]) for i in range(0, len(audio), step)]
    return frames, audio.shape[1] if audio.ndim == 2 else 1
