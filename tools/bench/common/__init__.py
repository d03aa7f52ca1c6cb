"""What the benchmarks share, once: `cli` (the parser and the common flags), `output` (the
result JSON and the machine it was measured on), `stats` (percentiles and medians),
`rounds` (the order configurations take turns in), `finals` (a live final's latency from
the frame that completed its audio), `plot` (matplotlib to a PNG) and `speech` (the
espeak-ng passage and clips several benchmarks decode)."""
