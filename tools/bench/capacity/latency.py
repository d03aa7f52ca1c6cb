"""Latency from what the clients saw: finals matched to utterances, partial gaps, verdicts."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from tools.bench.capacity.config import Criteria
from tools.bench.capacity.corpus import FRAME_MS
from tools.bench.capacity.load import FinalSeen, StreamLog
from tools.bench.capacity.plan import StreamPlan, Utterance
from tools.bench.common.finals import completing_frame
from tools.bench.common.stats import Percentiles, percentiles


@dataclass(frozen=True, slots=True)
class Latency:
    """The per-run latency picture."""

    final_ms: Percentiles
    final_minus_end_silence_ms: Percentiles  # the configured end-silence subtracted
    vad_end_silence_ms: Percentiles  # measured: the server's decided_ms minus speech end
    final_after_vad_ms: Percentiles  # engine and transport: from sending decided_ms's audio
    first_partial_ms: Percentiles
    partial_interval_ms: Percentiles


@dataclass
class Samples:
    """Latency samples gathered over every stream of a run (milliseconds)."""

    final: list[float] = field(default_factory=list)
    vad_end_silence: list[float] = field(default_factory=list)
    after_vad: list[float] = field(default_factory=list)
    first_partial: list[float] = field(default_factory=list)
    partial_gaps: list[float] = field(default_factory=list)
    send_lag: list[float] = field(default_factory=list)
    matched: int = 0
    extra: int = 0
    unmatched: int = 0
    without_partials: int = 0


def match_finals(
    utterances: Sequence[Utterance], finals: Sequence[FinalSeen]
) -> tuple[dict[int, list[FinalSeen]], int]:
    """Give each final to the utterance its span overlaps most; also count the unmatched."""
    matched: dict[int, list[FinalSeen]] = {}
    unmatched = 0
    for final in finals:
        _, start, end, *_ = final
        best, best_overlap = -1, 0.0
        for index, utt in enumerate(utterances):
            overlap = min(end, utt.end_ms) - max(start, utt.start_ms)
            if overlap > best_overlap:
                best, best_overlap = index, overlap
        if best < 0:
            unmatched += 1
        else:
            matched.setdefault(best, []).append(final)
    return matched, unmatched


def collect_stream(plan: StreamPlan, log: StreamLog, into: Samples) -> None:
    """Add one stream's latencies: finals by time span, partials through the final's utt_id."""
    sent = log.sent_at
    step = FRAME_MS / 1000
    into.send_lag.extend((t - (log.t0 + i * step)) * 1000 for i, t in enumerate(sent))
    partials: dict[int, list[float]] = {}
    for utt_id, arrival in log.partials:
        partials.setdefault(utt_id, []).append(arrival)
    for arrivals in partials.values():
        into.partial_gaps.extend(float(gap) for gap in np.diff(arrivals) * 1000)
    matched, unmatched = match_finals(plan.utterances, log.finals)
    into.unmatched += unmatched
    for index, finals in matched.items():
        utt = plan.utterances[index]
        into.matched += 1
        into.extra += len(finals) - 1
        closing = max(finals, key=lambda f: f[2])
        if utt.last_frame < len(sent):
            into.final.append((closing[3] - sent[utt.last_frame]) * 1000)
        add_vad_split(utt, closing, sent, into)
        firsts = [partials[f[0]][0] for f in finals if f[0] in partials]
        if not firsts:
            into.without_partials += 1
        elif utt.first_frame < len(sent):
            into.first_partial.append((min(firsts) - sent[utt.first_frame]) * 1000)


def add_vad_split(utt: Utterance, final: FinalSeen, sent: Sequence[float], into: Samples) -> None:
    """Split a final's latency at the server's decision point (`decided_ms`), if it gave one."""
    decided = final[4]
    if decided is None:
        return
    # The audio up to decided_ms was complete once the frame ending there had been sent.
    frame = completing_frame(decided, FRAME_MS)
    if frame < len(sent):
        into.vad_end_silence.append(decided - utt.end_ms)
        into.after_vad.append((final[3] - sent[frame]) * 1000)


def latency_of(samples: Samples, end_silence_ms: int) -> Latency:
    return Latency(
        final_ms=percentiles(samples.final),
        final_minus_end_silence_ms=percentiles([v - end_silence_ms for v in samples.final]),
        vad_end_silence_ms=percentiles(samples.vad_end_silence),
        final_after_vad_ms=percentiles(samples.after_vad),
        first_partial_ms=percentiles(samples.first_partial),
        partial_interval_ms=percentiles(samples.partial_gaps),
    )


def judged_final_latency(latency: Latency) -> Percentiles:
    """The final latency the criterion uses: after the measured VAD decision when known,
    else with the configured end-silence subtracted (a server without `decided_ms`)."""
    if latency.final_after_vad_ms.count:
        return latency.final_after_vad_ms
    return latency.final_minus_end_silence_ms


def judge(latency: Latency, errors: int, dropped: int, criteria: Criteria) -> tuple[str, ...]:
    """The criteria a run missed (empty: it passed)."""
    failed = []
    final_p95 = judged_final_latency(latency).p95
    if final_p95 is None:
        failed.append("no final latency measured")
    elif final_p95 > criteria.max_final_latency_ms:
        failed.append(f"final latency p95 {final_p95} ms > {criteria.max_final_latency_ms}")
    gap_p95 = latency.partial_interval_ms.p95
    if gap_p95 is not None and gap_p95 > criteria.max_partial_interval_ms:
        failed.append(f"partial interval p95 {gap_p95} ms > {criteria.max_partial_interval_ms}")
    if errors + dropped > criteria.max_errors:
        failed.append(f"{errors} error(s), {dropped} dropped session(s)")
    return tuple(failed)
