"""Client audio in: decoding to 16 kHz float samples, the ring buffer, fixed blocks."""
