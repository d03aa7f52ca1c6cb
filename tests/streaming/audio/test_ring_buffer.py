"""RingBuffer: exact reads by absolute index, wrap-around, and typed overwrite errors."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streaming.audio.ring_buffer import RingBuffer
from streaming.errors import AudioOverwrittenError


def test_reads_exact_samples_across_wrap() -> None:
    ring = RingBuffer(10)
    source = np.arange(25, dtype=np.float32)
    for chunk in np.split(source, [3, 7, 15, 16, 24]):
        ring.write(chunk)
    assert ring.end == 25 and ring.start == 15
    np.testing.assert_array_equal(ring.read(15, 25), source[15:25])
    np.testing.assert_array_equal(ring.read(18, 22), source[18:22])
    assert ring.read(20, 20).shape == (0,)


def test_overwritten_audio_raises_typed_error() -> None:
    ring = RingBuffer(8)
    ring.write(np.arange(20, dtype=np.float32))
    with pytest.raises(AudioOverwrittenError):
        ring.read(11, 14)
    np.testing.assert_array_equal(ring.read(12, 20), np.arange(12, 20, dtype=np.float32))


def test_reading_the_future_or_backwards_is_an_error() -> None:
    ring = RingBuffer(8)
    ring.write(np.ones(4, np.float32))
    with pytest.raises(ValueError):
        ring.read(2, 5)
    with pytest.raises(ValueError):
        ring.read(3, 2)


def test_write_larger_than_capacity_keeps_newest() -> None:
    ring = RingBuffer(5)
    ring.write(np.arange(3, dtype=np.float32))
    ring.write(np.arange(3, 15, dtype=np.float32))
    assert ring.end == 15
    np.testing.assert_array_equal(ring.read(10, 15), np.arange(10, 15, dtype=np.float32))


@settings(max_examples=200, deadline=None)
@given(
    capacity=st.integers(1, 64),
    cuts=st.lists(st.integers(0, 200), max_size=20),
    total=st.integers(0, 200),
    data=st.data(),
)
def test_any_chunking_reads_back_the_source(
    capacity: int, cuts: list[int], total: int, data: st.DataObject
) -> None:
    source = np.random.default_rng(total).standard_normal(total).astype(np.float32)
    ring = RingBuffer(capacity)
    for chunk in np.split(source, sorted(c for c in cuts if c <= total)):
        ring.write(chunk)
    assert ring.end == total
    begin = data.draw(st.integers(ring.start, total))
    end = data.draw(st.integers(begin, total))
    np.testing.assert_array_equal(ring.read(begin, end), source[begin:end])
