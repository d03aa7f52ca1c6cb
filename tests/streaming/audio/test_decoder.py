"""AudioDecoder: G.711 tables, exactness, chunk invariance, resampler quality, errors."""

from __future__ import annotations

import hashlib
import itertools
import warnings
from collections.abc import Callable

import numpy as np
import pytest
import soxr
from hypothesis import given, settings
from hypothesis import strategies as st

from streaming.audio.decoder import (
    STANDARD_RATES,
    AudioDecoder,
    AudioFormat,
    alaw_to_linear,
    ulaw_to_linear,
)
from streaming.errors import InvalidAudioError, InvalidFieldError, ProtocolError, StateError

with warnings.catch_warnings():
    # audioop is deprecated (removed in 3.13); it is only the reference for the G.711 tables.
    warnings.simplefilter("ignore", DeprecationWarning)
    try:
        import audioop
    except ImportError:  # Python ≥ 3.13
        audioop = None  # type: ignore[assignment]

ENCODINGS = ("pcm_s16le", "pcm_f32le", "mulaw", "alaw")
RATES = (8000, 16000, 44100, 48000)
FORMATS = [
    AudioFormat(enc, rate, ch) for enc, rate, ch in itertools.product(ENCODINGS, RATES, (1, 2))
]


def fmt_id(fmt: AudioFormat) -> str:
    return f"{fmt.encoding}-{fmt.sample_rate}-{fmt.channels}ch"


def make_audio(fmt: AudioFormat, seconds: float, seed: int = 0) -> bytes:
    """Random (white-noise) audio in `fmt`: it exercises every code and the whole band."""
    rng = np.random.default_rng(seed)
    n = round(seconds * fmt.sample_rate) * fmt.channels
    if fmt.encoding == "pcm_s16le":
        return rng.integers(-32768, 32768, n).astype("<i2").tobytes()
    if fmt.encoding == "pcm_f32le":
        # A little outside [-1, 1] on purpose: such values pass through.
        return rng.uniform(-1.2, 1.2, n).astype("<f4").tobytes()
    return rng.integers(0, 256, n, dtype=np.uint8).tobytes()


def decode_pieces(fmt: AudioFormat, data: bytes, cuts: list[int]) -> np.ndarray:
    """Decode `data` split at byte offsets `cuts`, then flush; return all output."""
    decoder = AudioDecoder(fmt)
    bounds = [0, *cuts, len(data)]
    outs = [decoder.decode(data[a:b]) for a, b in itertools.pairwise(bounds)]
    outs.append(decoder.flush())
    for out in outs:
        assert out.dtype == np.float32 and out.ndim == 1
    joined = np.concatenate(outs)
    assert decoder.samples_out == joined.size
    return joined


def fixed_cuts(total: int, piece: int) -> list[int]:
    return list(range(piece, total, piece))


# --- AudioFormat -------------------------------------------------------------------------


def test_format_defaults_and_frame_size() -> None:
    assert AudioFormat() == AudioFormat("pcm_s16le", 16000, 1)
    assert AudioFormat().bytes_per_frame == 2
    assert AudioFormat("pcm_f32le", 48000, 2).bytes_per_frame == 8
    assert AudioFormat("mulaw", 8000, 1).bytes_per_frame == 1
    assert AudioFormat("alaw", 8000, 2).bytes_per_frame == 2


@pytest.mark.parametrize("rate", STANDARD_RATES)
def test_format_accepts_standard_rates(rate: int) -> None:
    assert AudioFormat(sample_rate=rate).sample_rate == rate


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"encoding": "mp3"}, "encoding"),
        ({"encoding": "PCM_S16LE"}, "encoding"),
        ({"encoding": 1}, "encoding"),
        ({"sample_rate": 12345}, "sample_rate"),
        ({"sample_rate": 7999}, "sample_rate"),
        ({"sample_rate": 48001}, "sample_rate"),
        ({"sample_rate": 96000}, "sample_rate"),
        ({"sample_rate": 16000.0}, "sample_rate"),
        ({"sample_rate": "16000"}, "sample_rate"),
        ({"sample_rate": True}, "sample_rate"),
        ({"channels": 3}, "channels"),
        ({"channels": 0}, "channels"),
        ({"channels": True}, "channels"),
    ],
)
def test_format_rejects_invalid_fields(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidFieldError) as info:
        AudioFormat(**kwargs)  # type: ignore[arg-type]
    assert field in info.value.message
    assert info.value.code == "invalid_field"


def test_format_error_lists_allowed_values() -> None:
    with pytest.raises(InvalidFieldError, match="pcm_s16le, pcm_f32le, mulaw, alaw"):
        AudioFormat(encoding="mp3")
    with pytest.raises(InvalidFieldError, match=r"8000.*44100, 48000"):
        AudioFormat(sample_rate=12345)


# --- G.711 --------------------------------------------------------------------------------


# ITU-T G.711 decoded values (as audioop computed them), written out so the tables stay
# pinned where audioop is gone (Python 3.13): spot values that show each sign and segment,
# and a digest of all 256 little-endian int16 values.
ULAW_SPOTS = {
    0x00: -32124, 0x01: -31100, 0x0F: -16764, 0x10: -15996, 0x3F: -1980, 0x55: -716,
    0x7E: -8, 0x7F: 0, 0x80: 32124, 0x81: 31100, 0xAA: 5372, 0xD5: 716, 0xFE: 8, 0xFF: 0,
}  # fmt: skip
ALAW_SPOTS = {
    0x00: -5504, 0x01: -5248, 0x0F: -6784, 0x10: -2752, 0x3F: -13568, 0x55: -8,
    0x7E: -880, 0x7F: -848, 0x80: 5504, 0x81: 5248, 0xAA: 32256, 0xD5: 8, 0xFE: 880,
    0xFF: 848,
}  # fmt: skip
TABLE_SHA256 = {
    "mulaw": "3dab54339e520bb2c924826e3b72a917a2b612e9fd12fc867500f1d983a75827",
    "alaw": "e04788d110e58ff8c70c93b8480190d973e3b67876b6119abbaec766cc75c174",
}


@pytest.mark.parametrize(
    ("name", "table", "spots"),
    [("mulaw", ulaw_to_linear, ULAW_SPOTS), ("alaw", alaw_to_linear, ALAW_SPOTS)],
)
def test_g711_tables_match_the_standard(
    name: str, table: Callable[[], np.ndarray], spots: dict[int, int]
) -> None:
    values = table()
    assert {code: int(values[code]) for code in spots} == spots
    digest = hashlib.sha256(values.astype("<i2").tobytes()).hexdigest()
    assert digest == TABLE_SHA256[name]


@pytest.mark.skipif(audioop is None, reason="audioop was removed in Python 3.13")
def test_g711_tables_match_audioop() -> None:
    codes = bytes(range(256))
    ulaw = np.frombuffer(audioop.ulaw2lin(codes, 2), dtype="<i2")
    alaw = np.frombuffer(audioop.alaw2lin(codes, 2), dtype="<i2")
    np.testing.assert_array_equal(ulaw_to_linear(), ulaw)
    np.testing.assert_array_equal(alaw_to_linear(), alaw)


@pytest.mark.parametrize(
    ("encoding", "table"), [("mulaw", ulaw_to_linear), ("alaw", alaw_to_linear)]
)
def test_g711_decode_at_16k_is_table_over_32768(encoding: str, table: object) -> None:
    codes = bytes(range(256)) * 3
    out = AudioDecoder(AudioFormat(encoding, 16000, 1)).decode(codes)
    expected = np.tile(table().astype(np.float32) / 32768, 3)  # type: ignore[operator]
    np.testing.assert_array_equal(out, expected)


# --- exactness at 16 kHz ------------------------------------------------------------------


def test_s16_mono_16k_is_exact() -> None:
    fmt = AudioFormat("pcm_s16le", 16000, 1)
    data = make_audio(fmt, 0.5)
    ints = np.frombuffer(data, dtype="<i2")
    out = decode_pieces(fmt, data, fixed_cuts(len(data), 321))
    np.testing.assert_array_equal(out, ints.astype(np.float32) / 32768)
    # Also the extremes: -32768 → -1.0 exactly, 32767 → 32767/32768.
    edge = np.array([-32768, 32767, 0, -1, 1], dtype="<i2")
    edge_out = AudioDecoder(fmt).decode(edge.tobytes())
    assert edge_out.tolist() == [-1.0, 32767 / 32768, 0.0, -1 / 32768, 1 / 32768]


def test_f32_mono_16k_passes_through_exactly() -> None:
    fmt = AudioFormat("pcm_f32le", 16000, 1)
    data = make_audio(fmt, 0.5)
    out = decode_pieces(fmt, data, fixed_cuts(len(data), 999))
    np.testing.assert_array_equal(out, np.frombuffer(data, dtype="<f4"))
    assert np.abs(out).max() > 1.0  # out-of-range values are not clipped


def test_stereo_is_averaged() -> None:
    fmt = AudioFormat("pcm_s16le", 16000, 2)
    frames = np.array([[1000, 3000], [-32768, -32768], [32767, -32768], [5, 6]], dtype="<i2")
    out = AudioDecoder(fmt).decode(frames.tobytes())
    expected = frames.astype(np.float64).mean(axis=1) / 32768
    np.testing.assert_array_equal(out, expected.astype(np.float32))
    f32 = AudioDecoder(AudioFormat("pcm_f32le", 16000, 2))
    out32 = f32.decode(np.array([0.25, 0.75, -1.0, 0.5], dtype="<f4").tobytes())
    assert out32.tolist() == [0.5, -0.25]


# --- chunk-size invariance ----------------------------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS, ids=fmt_id)
def test_chunk_size_invariance(fmt: AudioFormat) -> None:
    data = make_audio(fmt, 1.5)
    reference = decode_pieces(fmt, data, [])
    per_ms = fmt.sample_rate // 1000 * fmt.bytes_per_frame
    pieces = {
        "10ms": 10 * per_ms,
        # +1 byte makes pieces that split samples and frames (odd byte counts).
        "37ms+1": 37 * per_ms + 1,
        "100ms": 100 * per_ms,
        "1s": fmt.sample_rate * fmt.bytes_per_frame,
        "prime": 1009,
    }
    for name, piece in pieces.items():
        out = decode_pieces(fmt, data, fixed_cuts(len(data), piece))
        assert out.size == reference.size, name
        np.testing.assert_array_equal(out, reference, err_msg=name)


@pytest.mark.parametrize(
    "fmt",
    [AudioFormat(enc, 44100, 2) for enc in ENCODINGS] + [AudioFormat("pcm_s16le", 8000, 1)],
    ids=fmt_id,
)
def test_one_byte_pieces(fmt: AudioFormat) -> None:
    data = make_audio(fmt, 0.05)
    reference = decode_pieces(fmt, data, [])
    np.testing.assert_array_equal(decode_pieces(fmt, data, list(range(1, len(data)))), reference)


@settings(max_examples=150, deadline=None)
@given(
    fmt=st.sampled_from(FORMATS),
    seed=st.integers(0, 2**16),
    cut_fractions=st.lists(st.floats(0.0, 1.0), max_size=40),
)
def test_random_split_points(fmt: AudioFormat, seed: int, cut_fractions: list[float]) -> None:
    data = make_audio(fmt, 0.25, seed)
    cuts = sorted(int(f * len(data)) for f in cut_fractions)  # repeats give empty pieces
    reference = decode_pieces(fmt, data, [])
    np.testing.assert_array_equal(decode_pieces(fmt, data, cuts), reference)


@pytest.mark.parametrize("rate", [r for r in STANDARD_RATES if r != 16000])
def test_soxr_stream_itself_is_chunk_invariant(rate: int) -> None:
    """The decoder relies on this: if a soxr upgrade breaks it, re-chunk into fixed blocks."""
    x = np.random.default_rng(rate).standard_normal(rate).astype(np.float32)

    def run(piece: int) -> np.ndarray:
        stream = soxr.ResampleStream(rate, 16000, 1, dtype="float32", quality="HQ")
        outs = [stream.resample_chunk(x[i : i + piece]) for i in range(0, x.size, piece)]
        outs.append(stream.resample_chunk(np.zeros(0, np.float32), last=True))
        return np.concatenate(outs)

    reference = run(x.size)
    for piece in (1, 37, 160, 1600):
        np.testing.assert_array_equal(run(piece), reference, err_msg=f"piece={piece}")


# --- length and counters ------------------------------------------------------------------


@pytest.mark.parametrize("rate", STANDARD_RATES)
@pytest.mark.parametrize("seconds", [0.01, 0.333, 2.0])
def test_output_length_matches_duration(rate: int, seconds: float) -> None:
    fmt = AudioFormat("pcm_s16le", rate, 2)
    data = make_audio(fmt, seconds)
    frames = len(data) // fmt.bytes_per_frame
    decoder = AudioDecoder(fmt)
    total = sum(decoder.decode(data[i : i + 3000]).size for i in range(0, len(data), 3000))
    total += decoder.flush().size
    assert decoder.samples_in == frames
    assert decoder.samples_out == total
    assert abs(total - frames * 16000 / rate) <= 2


# --- resampler quality --------------------------------------------------------------------


def tone(freq: float, rate: int, seconds: float, amplitude: float = 0.5) -> bytes:
    t = np.arange(round(rate * seconds)) / rate
    return (amplitude * np.sin(2 * np.pi * freq * t)).astype("<f4").tobytes()


def spectrum_db(samples: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Kaiser-windowed magnitude spectrum in dB re its peak (window sidelobes ≈ −120 dB)."""
    trimmed = samples[320:-320].astype(np.float64)  # skip 20 ms of start/end transients
    mag = np.abs(np.fft.rfft(trimmed * np.kaiser(trimmed.size, 16)))
    freqs = np.fft.rfftfreq(trimmed.size, 1 / 16000)
    return freqs, 20 * np.log10(np.maximum(mag, 1e-300) / mag.max())


@pytest.mark.parametrize("rate", [44100, 48000, 8000, 22050])
def test_resampled_tone_is_clean(rate: int) -> None:
    decoder = AudioDecoder(AudioFormat("pcm_f32le", rate, 1))
    data = tone(1000, rate, 1.0)
    out = np.concatenate([decoder.decode(data[i : i + 4410]) for i in range(0, len(data), 4410)])
    out = np.concatenate([out, decoder.flush()])
    freqs, db = spectrum_db(out)
    assert abs(freqs[np.argmax(db)] - 1000) < 2
    away = np.abs(freqs - 1000) > 30  # outside the window's main lobe
    assert db[away].max() < -60, f"spur at {freqs[away][np.argmax(db[away])]:.0f} Hz"
    # Gain is preserved: a 0.5 amplitude tone stays ≈ 0.5.
    assert abs(np.abs(out[320:-320]).max() - 0.5) < 0.01


def test_out_of_band_tone_is_not_aliased() -> None:
    """A 12 kHz tone at 44.1 kHz would alias to 4 kHz without an anti-aliasing filter."""
    decoder = AudioDecoder(AudioFormat("pcm_f32le", 44100, 1))
    out = np.concatenate([decoder.decode(tone(12000, 44100, 1.0)), decoder.flush()])
    level = np.sqrt(np.mean(out[320:-320].astype(np.float64) ** 2)) / (0.5 / np.sqrt(2))
    assert 20 * np.log10(max(level, 1e-300)) < -60


# --- carry-over, flush, state -------------------------------------------------------------


def test_partial_frames_carry_over_and_are_dropped_at_flush() -> None:
    decoder = AudioDecoder(AudioFormat("pcm_s16le", 16000, 2))
    frame = np.array([100, 300], dtype="<i2").tobytes()
    assert decoder.decode(frame[:3]).size == 0
    assert decoder.pending_bytes == 3
    assert decoder.samples_in == 0
    out = decoder.decode(frame[3:] + frame[:1])
    assert out.tolist() == [200 / 32768]
    assert decoder.pending_bytes == 1
    assert decoder.dropped_bytes == 0
    assert decoder.flush().size == 0
    assert decoder.dropped_bytes == 1
    assert decoder.samples_in == 1


def test_flush_is_final() -> None:
    decoder = AudioDecoder(AudioFormat("pcm_s16le", 44100, 1))
    decoder.decode(make_audio(decoder.format, 0.1))
    assert decoder.flush().size > 0
    assert decoder.flush().size == 0
    with pytest.raises(StateError):
        decoder.decode(b"\x00\x00")


def test_accepts_bytearray_and_memoryview() -> None:
    fmt = AudioFormat("pcm_s16le", 48000, 1)
    data = make_audio(fmt, 0.1)
    reference = decode_pieces(fmt, data, [])
    decoder = AudioDecoder(fmt)
    ints = np.frombuffer(data, dtype="<i2")
    half = ints.size // 2
    outs = [decoder.decode(bytearray(data[:101])), decoder.decode(memoryview(data)[101 : 2 * half])]
    # A memoryview with a non-byte format is measured in bytes, not items.
    outs.append(decoder.decode(memoryview(ints[half:].tobytes()).cast("h")))
    outs.append(decoder.flush())
    np.testing.assert_array_equal(np.concatenate(outs), reference)


# --- invalid f32 audio --------------------------------------------------------------------


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("rate", [16000, 44100])
def test_non_finite_f32_is_rejected_all_or_nothing(bad: float, rate: int) -> None:
    fmt = AudioFormat("pcm_f32le", rate, 2)
    good = make_audio(fmt, 0.2)
    samples = np.frombuffer(good[:4000], dtype="<f4").copy()
    samples[123] = bad
    poisoned = samples.tobytes()

    decoder = AudioDecoder(fmt)
    outs = [decoder.decode(good[:1001])]  # leaves a partial frame pending
    state = (decoder.pending_bytes, decoder.samples_in, decoder.samples_out)
    with pytest.raises(InvalidAudioError, match="NaN or Inf") as info:
        decoder.decode(poisoned)
    assert isinstance(info.value, ProtocolError)
    assert info.value.code == "invalid_audio"
    # Nothing of the rejected message was consumed: continuing gives the clean output.
    assert (decoder.pending_bytes, decoder.samples_in, decoder.samples_out) == state
    outs += [decoder.decode(good[1001:]), decoder.flush()]
    np.testing.assert_array_equal(np.concatenate(outs), decode_pieces(fmt, good, []))


def test_non_finite_in_a_pending_frame_is_caught_when_completed() -> None:
    decoder = AudioDecoder(AudioFormat("pcm_f32le", 16000, 1))
    nan = np.array([np.nan], dtype="<f4").tobytes()
    assert decoder.decode(nan[:2]).size == 0
    with pytest.raises(InvalidAudioError):
        decoder.decode(nan[2:])
