"""WebRTC's GMM voice-activity detector (`webrtcvad-wheels`) with start/end smoothing."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from streaming.audio.blocks import Reblocker, as_mono_float
from streaming.vad.types import BlockVerdict, VadConfig, VadEvent, VadEventKind, accept_each

FloatArray = npt.NDArray[np.float32]

SAMPLE_RATE = 16_000

#: webrtcvad takes only 10, 20 or 30 ms frames; 30 ms gives the steadiest decisions.
FRAME_MS = 30
FRAME_SAMPLES = FRAME_MS * SAMPLE_RATE // 1000

_INT16_MAX = 32767


@dataclass(frozen=True, slots=True)
class WebrtcSettings:
    """Detector aggressiveness and the smoothing that turns frame decisions into speech."""

    aggressiveness: int = 2
    ring_frames: int = 10
    start_frames: int = 6

    def __post_init__(self) -> None:
        if not 0 <= self.aggressiveness <= 3:
            raise ValueError(f"aggressiveness must be within 0..3; got {self.aggressiveness}")
        if not 1 <= self.start_frames <= self.ring_frames:
            raise ValueError(
                f"start_frames must be within 1..ring_frames ({self.ring_frames}); "
                f"got {self.start_frames}"
            )


class WebrtcVadModel:
    """Factory of WebRTC VAD streams; the detector has no weights to share."""

    name: str = "webrtc"

    def __init__(
        self, aggressiveness: int = 2, *, ring_frames: int = 10, start_frames: int = 6
    ) -> None:
        self.settings = WebrtcSettings(aggressiveness, ring_frames, start_frames)

    def new_stream(self, config: VadConfig) -> WebrtcVadStream:
        """A fresh detector: webrtcvad adapts its noise model per instance."""
        import webrtcvad

        detector = webrtcvad.Vad(self.settings.aggressiveness)
        return WebrtcVadStream(detector, self.settings, config.end_silence_ms)


class WebrtcVadStream:
    """One session's WebRTC VAD: 30 ms frames, a voiced-frame ring to start, silence to end."""

    def __init__(self, detector: Any, settings: WebrtcSettings, end_silence_ms: int) -> None:
        self._detector = detector
        self._start_frames = settings.start_frames
        self._end_frames = math.ceil(end_silence_ms / FRAME_MS)
        # Start sample of each recent frame when voiced, else None.
        self._ring: deque[int | None] = deque(maxlen=settings.ring_frames)
        self._blocks = Reblocker(FRAME_SAMPLES)
        self._processed = 0
        self._in_speech = False
        self._unvoiced_run = 0
        self._voiced_until = 0
        self._closed = False

    def accept(self, samples: npt.ArrayLike) -> list[VadEvent]:
        """Feed float32 16 kHz samples in [-1, 1]; return the boundaries decided so far."""
        if self._closed:
            raise RuntimeError("accept() after flush(): the stream has ended")
        audio = as_mono_float(samples)
        events: list[VadEvent] = []
        for frame in self._blocks.feed(audio):
            event = self._frame(frame)
            if event is not None:
                events.append(event)
        return events

    def accept_blocks(self, blocks: Sequence[np.ndarray]) -> list[BlockVerdict]:
        return accept_each(self, blocks)

    def flush(self) -> list[VadEvent]:
        """End of stream: close open speech at the stream end (a partial frame is not scored)."""
        if self._closed:
            return []
        self._closed = True
        if not self._in_speech:
            return []
        self._in_speech = False
        return [VadEvent(VadEventKind.SPEECH_END, self._processed + self._blocks.pending)]

    def pending_end(self) -> int | None:
        """The end a SPEECH_END would carry if the current unvoiced run lasts."""
        return self._voiced_until if self._in_speech and self._unvoiced_run > 0 else None

    def _frame(self, frame: FloatArray) -> VadEvent | None:
        """Classify one 30 ms frame and advance the start/end hysteresis."""
        begin = self._processed
        self._processed += FRAME_SAMPLES
        pcm = np.clip(np.rint(frame * 32768.0), -_INT16_MAX - 1, _INT16_MAX).astype(np.int16)
        voiced = bool(self._detector.is_speech(pcm.tobytes(), SAMPLE_RATE))
        self._ring.append(begin if voiced else None)
        if voiced:
            self._unvoiced_run = 0
            self._voiced_until = self._processed
        else:
            self._unvoiced_run += 1
        if not self._in_speech:
            starts = [sample for sample in self._ring if sample is not None]
            if len(starts) < self._start_frames:
                return None
            self._in_speech = True
            return VadEvent(VadEventKind.SPEECH_START, starts[0])
        if self._unvoiced_run < self._end_frames:
            return None
        self._in_speech = False
        # Frames before the end must not count toward the next start.
        self._ring.clear()
        return VadEvent(VadEventKind.SPEECH_END, self._voiced_until)
