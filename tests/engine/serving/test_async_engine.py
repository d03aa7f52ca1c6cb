"""AsyncEngine with the real tiny model: concurrency, isolation, cancellation and faults."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from engine.backends.base import Backend
from engine.backends.registry import BackendOptions, create_backend
from engine.decoding.recognizer import Recognizer
from engine.errors import BackendOutOfMemoryError
from engine.model.directory import load_model_dir
from engine.serving.async_engine import AsyncEngine
from engine.serving.budget import Architecture, CostModel, MemoryBudget
from engine.serving.scheduler import Scheduler, SchedulerConfig
from engine.speakers.encoder import SpeakerEncoder
from engine.types import DecodeOptions, Hotword, InferenceRequest, InferenceResult, RequestKind
from tests.speech import Clip


@pytest.fixture(scope="module")
def recognizer(tiny_model_dir: Path) -> Recognizer:
    model_dir = load_model_dir(tiny_model_dir)
    # fp32: batch-invariant, so batched results must equal direct decoding exactly.
    return Recognizer(model_dir, create_backend(model_dir, BackendOptions(precision="fp32")))


def make_engine(recognizer: Recognizer, max_batch: int = 8) -> AsyncEngine:
    scheduler = Scheduler(
        SchedulerConfig(max_batch=max_batch, max_wait_ms=10),
        [MemoryBudget(2 << 30)],
        CostModel(Architecture(hidden=64, heads=2, ffn=128)),
        recognizer.frontend.num_frames,
    )
    return AsyncEngine([recognizer], scheduler, ["cpu"])


def session_audio(clips: list[Clip], i: int) -> np.ndarray:
    """A different utterance per session: a clip, trimmed by a session-specific amount."""
    clip = clips[i % len(clips)].audio
    return clip[: max(8000, len(clip) - 1600 * (i // len(clips)))]


def direct(recognizer: Recognizer, audio: np.ndarray, options: DecodeOptions) -> str:
    return recognizer.decode([recognizer.prepare(audio, options)])[0].text


async def one_session(
    engine: AsyncEngine, sid: str, audio: np.ndarray, rng: random.Random
) -> tuple[list[InferenceResult], InferenceRequest]:
    channel = engine.open_session(sid)
    options = DecodeOptions(language=rng.choice(["auto", "en", "zh"]), itn=rng.random() < 0.5)
    await asyncio.sleep(rng.random() * 0.05)
    cut = len(audio) // 2
    engine.submit(InferenceRequest(sid, 0, RequestKind.PARTIAL, audio[:cut], options, now()))
    final = InferenceRequest(sid, 0, RequestKind.FINAL, audio, options, now(), request_id=1)
    engine.submit(final)
    results = []
    while True:
        result = await asyncio.wait_for(channel.get(), 60)
        results.append(result)
        if result.ref.kind is RequestKind.FINAL:
            assert result.ref == final.ref
            return results, final


def now() -> float:
    return asyncio.get_running_loop().time()


def test_fifty_concurrent_sessions_get_their_own_direct_transcripts(
    recognizer: Recognizer, speech_clips: list[Clip]
) -> None:
    async def main() -> dict[str, tuple[list[InferenceResult], InferenceRequest]]:
        engine = make_engine(recognizer)
        engine.start()
        rng = random.Random(3)
        tasks = {
            f"s{i}": asyncio.create_task(
                one_session(engine, f"s{i}", session_audio(speech_clips, i), rng)
            )
            for i in range(50)
        }
        done = {sid: await task for sid, task in tasks.items()}
        await engine.close(timeout=10)
        return done

    results = asyncio.run(main())
    assert len(results) == 50
    for sid, (session_results, request) in results.items():
        for result in session_results:
            assert result.ref.session_id == sid
            assert result.ok, result.error_message
        final = session_results[-1]
        expected = direct(recognizer, request.audio, request.options)
        assert final.transcript is not None and final.transcript.text == expected


def test_batches_really_form_under_concurrency(
    recognizer: Recognizer, speech_clips: list[Clip]
) -> None:
    async def main() -> AsyncEngine:
        engine = make_engine(recognizer, max_batch=8)
        engine.start()
        channels = [engine.open_session(f"s{i}") for i in range(16)]
        for i in range(16):
            audio = speech_clips[i % 4].audio
            engine.submit(
                InferenceRequest(f"s{i}", 0, RequestKind.FINAL, audio, DecodeOptions(), now())
            )
        for channel in channels:
            await asyncio.wait_for(channel.get(), 60)
        await engine.close(timeout=10)
        return engine

    engine = asyncio.run(main())
    assert engine.scheduler.stats.batches < 16  # some requests shared a batch
    text = metrics_text(engine)
    assert 'engine_requests_total{kind="final",outcome="ok"} 16.0' in text
    seconds = sum(len(speech_clips[i % 4].audio) for i in range(16)) / 16000
    line = next(x for x in text.splitlines() if x.startswith("engine_decoded_audio_seconds_total"))
    assert 'kind="final"' in line and float(line.split()[-1]) == pytest.approx(seconds)


def metrics_text(engine: AsyncEngine) -> str:
    from prometheus_client import generate_latest

    return generate_latest(engine.metrics.registry).decode()


def test_cancel_drops_queued_work_and_later_results(recognizer: Recognizer) -> None:
    async def main() -> tuple[int, bool]:
        engine = make_engine(recognizer)
        channel = engine.open_session("gone")
        audio = np.zeros(16000, np.float32)
        for utt in range(5):
            engine.submit(
                InferenceRequest("gone", utt, RequestKind.FINAL, audio, DecodeOptions(), now())
            )
        cancelled = engine.cancel("gone")  # before the dispatcher ever ran
        engine.start()
        await engine.close(timeout=10)
        return cancelled, channel.empty()

    cancelled, empty = asyncio.run(main())
    assert cancelled == 5 and empty


class FlakyBackend:
    """Wraps a real backend; fails the batches that contain a marked session."""

    def __init__(self, inner: object) -> None:
        self.inner = inner
        self.name = "flaky"

    def run(self, feats: list[np.ndarray], options: list[DecodeOptions]) -> list[np.ndarray]:
        if any(o.language == "ko" for o in options):
            raise RuntimeError("device fault")
        return self.inner.run(feats, options)  # type: ignore[attr-defined]


def test_backend_fault_fails_only_that_batch_and_health_recovers(
    recognizer: Recognizer, speech_clips: list[Clip]
) -> None:
    flaky = Recognizer(recognizer.model_dir, FlakyBackend(recognizer.backend))

    async def main() -> tuple[InferenceResult, bool, InferenceResult, bool]:
        engine = make_engine(flaky, max_batch=1)
        engine.start()
        channel = engine.open_session("a")
        audio = speech_clips[1].audio
        bad = DecodeOptions(language="ko")
        engine.submit(InferenceRequest("a", 0, RequestKind.FINAL, audio, bad, now()))
        failed = await asyncio.wait_for(channel.get(), 30)
        unhealthy = engine.healthy
        engine.submit(InferenceRequest("a", 1, RequestKind.FINAL, audio, DecodeOptions(), now()))
        good = await asyncio.wait_for(channel.get(), 30)
        recovered = engine.healthy
        await engine.close(timeout=10)
        return failed, unhealthy, good, recovered

    failed, unhealthy, good, healthy = asyncio.run(main())
    assert not failed.ok and failed.error_code == "backend_error"
    assert "device fault" in (failed.error_message or "")
    assert unhealthy is False
    assert good.ok and healthy


def test_bad_audio_in_a_batch_fails_only_that_request(recognizer: Recognizer) -> None:
    async def main() -> list[InferenceResult]:
        engine = make_engine(recognizer)
        engine.start()
        channel = engine.open_session("a")
        nan = np.full(16000, np.nan, np.float32)
        fine = np.zeros(16000, np.float32)
        engine.submit(InferenceRequest("a", 0, RequestKind.FINAL, nan, DecodeOptions(), now()))
        engine.submit(InferenceRequest("a", 1, RequestKind.FINAL, fine, DecodeOptions(), now()))
        results = [await asyncio.wait_for(channel.get(), 30) for _ in range(2)]
        await engine.close(timeout=10)
        return results

    results = {r.ref.utterance_id: r for r in asyncio.run(main())}
    assert results[0].error_code == "bad_audio"
    assert results[1].ok


def test_hotwords_the_model_cannot_write_fail_only_that_request(recognizer: Recognizer) -> None:
    async def main() -> list[InferenceResult]:
        engine = make_engine(recognizer)
        engine.start()
        channel = engine.open_session("a")
        audio = np.zeros(16000, np.float32)
        unwritable = DecodeOptions(hotwords=(Hotword("\u2603 snowman"),))
        writable = DecodeOptions(hotwords=(Hotword("hello world"),))
        for i, options in enumerate((unwritable, writable, DecodeOptions())):
            engine.submit(InferenceRequest("a", i, RequestKind.FINAL, audio, options, now()))
        results = [await asyncio.wait_for(channel.get(), 30) for _ in range(3)]
        await engine.close(timeout=10)
        return results

    results = {r.ref.utterance_id: r for r in asyncio.run(main())}
    assert results[0].error_code == "unsupported_hotword"
    assert "snowman" in (results[0].error_message or "")
    assert results[1].ok and results[2].ok


class RunsOutOfMemoryAboveTwo:
    """The real backend on a device that holds at most two utterances at a time."""

    def __init__(self, inner: Backend) -> None:
        self.inner = inner
        self.name = inner.name
        self.sizes: list[int] = []

    def run(self, feats: Sequence[np.ndarray], options: Sequence[DecodeOptions]) -> list:
        self.sizes.append(len(feats))
        if len(feats) > 2:
            raise BackendOutOfMemoryError(f"{len(feats)} utterances do not fit")
        return self.inner.run(feats, options)


def test_an_out_of_memory_batch_is_split_until_it_fits_and_every_request_answered(
    recognizer: Recognizer, speech_clips: list[Clip]
) -> None:
    small_device = Recognizer(recognizer.model_dir, RunsOutOfMemoryAboveTwo(recognizer.backend))
    audios = [session_audio(speech_clips, i) for i in range(8)]

    splits: list[float] = []

    async def main() -> list[InferenceResult]:
        engine = make_engine(small_device, max_batch=8)
        channels = [engine.open_session(f"s{i}") for i in range(len(audios))]
        for i, audio in enumerate(audios):  # all queued before the engine takes a batch
            engine.submit(
                InferenceRequest(f"s{i}", 0, RequestKind.FINAL, audio, DecodeOptions(), now())
            )
        engine.start()
        try:
            return [await asyncio.wait_for(c.get(), 60) for c in channels]
        finally:
            await engine.close(timeout=10)
            registry = engine.metrics.registry
            for outcome in ("split", "failed"):
                name = "engine_out_of_memory_batches_total"
                splits.append(registry.get_sample_value(name, {"outcome": outcome}) or 0.0)

    results = asyncio.run(main())
    assert all(r.error_code is None for r in results), [r.error_message for r in results]
    for audio, result in zip(audios, results, strict=True):
        assert result.transcript is not None
        assert result.transcript.text == direct(recognizer, audio, DecodeOptions())
    sizes = small_device.backend.sizes  # type: ignore[attr-defined]
    assert sizes[0] == 8 and max(sizes[1:]) <= 4 and 8 in sizes  # split, then split again
    assert sum(s for s in sizes if s <= 2) == 8  # each request ran once, in a batch that fit
    # Every batch over two split once (operators see it in engine_out_of_memory_batches).
    assert splits == [sum(1 for s in sizes if s > 2), 0.0]


def speaker_results(recognizer: Recognizer, audios: list[np.ndarray]) -> list[InferenceResult]:
    """Two requests a clip, one asking who spoke and one not, in one batch."""

    async def main() -> list[InferenceResult]:
        engine = make_engine(recognizer)
        engine.start()
        channel = engine.open_session("a")
        for i, audio in enumerate(audios):
            for asked in (True, False):
                options = DecodeOptions(speaker=asked)
                request_id = 2 * i + (0 if asked else 1)
                engine.submit(
                    InferenceRequest(
                        "a", i, RequestKind.FINAL, audio, options, now(), request_id=request_id
                    )
                )
        results = [await asyncio.wait_for(channel.get(), 60) for _ in range(2 * len(audios))]
        await engine.close(timeout=10)
        return sorted(results, key=lambda r: r.ref.request_id)

    return asyncio.run(main())


def test_requests_that_ask_who_spoke_get_their_speakers_embedding(
    recognizer: Recognizer, speech_clips: list[Clip]
) -> None:
    encoder = SpeakerEncoder()
    with_speakers = Recognizer(recognizer.model_dir, recognizer.backend, encoder)
    audios = [c.audio for c in speech_clips[:3]]
    results = speaker_results(with_speakers, audios)
    assert all(r.ok for r in results)
    expected = encoder.embed(audios)
    for i in range(len(audios)):
        asked, plain = results[2 * i], results[2 * i + 1]
        assert asked.speaker is not None and plain.speaker is None
        np.testing.assert_allclose(asked.speaker, expected[i], atol=1e-5)
        assert asked.transcript == plain.transcript


def test_without_a_speaker_encoder_only_the_requests_that_ask_fail(
    recognizer: Recognizer, speech_clips: list[Clip]
) -> None:
    results = speaker_results(recognizer, [speech_clips[0].audio])
    asked, plain = results
    assert asked.error_code == "backend_unavailable" and "speaker encoder" in (
        asked.error_message or ""
    )
    assert plain.ok and plain.speaker is None


class BrokenEncoder:
    """A speaker encoder that fails as a library might (not an engine error)."""

    def embed(self, utterances: Sequence[np.ndarray]) -> np.ndarray:
        raise RuntimeError("CUDA error: an illegal memory access was encountered")


def test_a_failing_speaker_encoder_fails_only_the_requests_that_asked(
    recognizer: Recognizer, speech_clips: list[Clip]
) -> None:
    broken = Recognizer(recognizer.model_dir, recognizer.backend, BrokenEncoder())
    asked, plain = speaker_results(broken, [speech_clips[0].audio])
    assert asked.error_code == "backend_unavailable"
    assert "speaker encoder failed" in (asked.error_message or "")
    assert plain.ok and plain.transcript is not None
