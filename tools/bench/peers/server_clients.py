"""Whole-utterance clients for the two servers: ours over FunASR's protocol, sherpa-onnx's own.

Each client decodes one clip at a time and returns the text; a load runs many of them.
"""

from __future__ import annotations

import json
import struct
from types import TracebackType
from typing import Protocol

import numpy as np
import websockets

SAMPLE_RATE = 16000
#: Both servers take frames far larger; 64 KiB keeps each one well inside their limits.
FRAME_BYTES = 64 * 1024


class UtteranceClient(Protocol):
    """One connection's worth of client: decodes clips one after another."""

    async def __aenter__(self) -> UtteranceClient: ...

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None: ...

    async def decode(self, clip: np.ndarray) -> str: ...


def _frames(data: bytes) -> list[bytes]:
    return [data[i : i + FRAME_BYTES] for i in range(0, len(data), FRAME_BYTES)]


class FunasrOfflineClient:
    """Our server's `/funasr` route in offline mode: one stream, so one connection, per clip
    (as FunASR's own offline clients do)."""

    def __init__(self, url: str) -> None:
        self._url = url

    async def __aenter__(self) -> FunasrOfflineClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    async def decode(self, clip: np.ndarray) -> str:
        pcm = (np.clip(clip, -1.0, 1.0) * 32767.0).astype("<i2").tobytes()
        start = {
            "mode": "offline",
            "wav_name": "clip",
            "wav_format": "pcm",
            "audio_fs": SAMPLE_RATE,
            "is_speaking": True,
        }
        texts: list[str] = []
        async with websockets.connect(self._url, max_size=None) as ws:
            await ws.send(json.dumps(start))
            for frame in _frames(pcm):
                await ws.send(frame)
            await ws.send(json.dumps({"is_speaking": False}))
            async for message in ws:
                reply = json.loads(message)
                if "error" in reply:
                    raise RuntimeError(f"server error: {reply['error']}")
                texts.append(str(reply.get("text", "")))
                if reply.get("is_final"):
                    break
        return " ".join(t for t in texts if t)


class SherpaClient:
    """sherpa-onnx's `non_streaming_server.py`: a persistent connection; per clip an 8-byte
    header (int32 sample rate, int32 byte count, little-endian), float32 samples, one text
    reply; "Done" before closing."""

    def __init__(self, url: str) -> None:
        self._url = url
        self._ws: websockets.ClientConnection | None = None

    async def __aenter__(self) -> SherpaClient:
        self._ws = await websockets.connect(self._url, max_size=None)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._ws is not None:
            await self._ws.send("Done")
            await self._ws.close()

    async def decode(self, clip: np.ndarray) -> str:
        if self._ws is None:
            raise RuntimeError("decode() outside `async with`")
        samples = np.ascontiguousarray(clip, "<f4").tobytes()
        await self._ws.send(struct.pack("<ii", SAMPLE_RATE, len(samples)))
        for frame in _frames(samples):
            await self._ws.send(frame)
        reply = await self._ws.recv()
        text = reply if isinstance(reply, str) else reply.decode("utf-8")
        return "" if text == "<EMPTY>" else text
