"""Live text at pauses (issue 49): how soon a word is committed, how much of each final was
committed before it, and the final's latency and WER against `commit: off`, in one run.

The speech is like a call's: utterances of 2 to 4 held-out demo sentences, each spoken by
espeak-ng in phrases of `--phrase-words` words (each phrase said alone, its own silence
trimmed: a clause), the clauses joined by `--clause-gap-ms` of silence, utterances
`--utterance-gap-ms` apart, on a faint noise floor. The reference is the sentences
whole. One real server (the demo model) takes the same audio once per arm and round, at
real pace (100 ms frames on the wall clock), with `commit` "pauses" or "off" in the v1
`start`; the arms take turns.

Times are the client's (sensestream.client: time.monotonic, the clock of each frame's send
and each event's arrival), from the send of the frame that completed the audio up to a
point. A word's commit latency runs from its last sample to the first `committed` (else
`final`) event whose audio holds it. Where each spoken word ends is known from the speech
as made (each clause's spoken prefixes said alone), not from the model's token times: the
demo model places its tokens early (up to seconds), which counts words late. The latency
by tokens is reported beside it (`commit_latency_by_tokens_ms`: each word of a final, by
its last token's end, to the `committed` event whose text covers it, the final's text
starting with the committed texts joined). Final latency runs from the utterance's last
speech sample as made to its final.

The command line is scripts/bench_live_text.py.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import shlex
import statistics
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sensestream.client import Event, Outcome, SessionOptions, converse, pcm16, split
from tools.bench.capacity.corpus import default_speech_dir
from tools.bench.capacity.scrape import decoded_by_kind
from tools.bench.common.cli import add_json, add_rounds, add_server_args, parser_for
from tools.bench.common.finals import FRAME_MS, completing_frame, latencies_ms
from tools.bench.common.output import machine, write_json
from tools.bench.common.phrases import phrase_sizes
from tools.bench.common.rounds import alternate
from tools.bench.common.stats import percentiles
from tools.bench.hotwords import wer
from tools.demo_model.texts import held_out
from tools.spawn import ServerSpec, spawn
from tools.speech import SAMPLE_RATE, noise_floor, speak, trim_silence
from tools.stats import read_stats

ARMS = ("pauses", "off")
LONG_UTTERANCE_MS = 3000  # the committed share counts finals longer than this
BARS = {"commit_p50_ms": 1000.0, "commit_p95_ms": 2000.0, "committed_share": 0.60}
WER_SLACK = 0.005  # half a percentage point over whole-utterance decoding
# A word's quiet tail may lie past where the voice detector ends the piece that holds it.
HELD_SLACK_MS = 100


# ---- the speech ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Said:
    """One clause as spoken: the demo model's written form, its trimmed audio, and where
    each spoken word ends in that audio (samples)."""

    text: str
    audio: np.ndarray
    word_ends: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Clause:
    """One clause in the stream: what it says and where it and each of its words end."""

    text: str
    start: int
    end: int
    word_ends: tuple[int, ...]  # stream samples


@dataclass(frozen=True, slots=True)
class Utterance:
    clauses: tuple[Clause, ...]

    @property
    def start_ms(self) -> int:
        return self.clauses[0].start * 1000 // SAMPLE_RATE

    @property
    def end_ms(self) -> int:
        """Where its last speech sample ends, on the stream clock."""
        return self.clauses[-1].end * 1000 // SAMPLE_RATE

    @property
    def text(self) -> str:
        return " ".join(c.text for c in self.clauses if c.text)


@dataclass(frozen=True, slots=True)
class Speech:
    audio: np.ndarray
    utterances: tuple[Utterance, ...]

    @property
    def clauses(self) -> list[Clause]:
        return [c for u in self.utterances for c in u.clauses]

    @property
    def speech_s(self) -> float:
        return sum(c.end - c.start for c in self.clauses) / SAMPLE_RATE

    @property
    def reference(self) -> str:
        return " ".join(u.text for u in self.utterances)

    @property
    def word_ends_ms(self) -> list[int]:
        return [n * 1000 // SAMPLE_RATE for c in self.clauses for n in c.word_ends]


def layout(
    lengths: Sequence[Sequence[int]], lead: int, clause_gap: int, utterance_gap: int
) -> list[list[tuple[int, int]]]:
    """Each clause's (start, end) samples: utterances of clauses of `lengths` samples,
    `clause_gap` apart within an utterance and `utterance_gap` between them, after `lead`."""
    at, out = lead, []
    for utterance in lengths:
        spans = []
        for k, n in enumerate(utterance):
            at += clause_gap if k else 0
            spans.append((at, at + n))
            at += n
        out.append(spans)
        at += utterance_gap
    return out


def monotone_ends(prefix_lengths: Sequence[int], length: int) -> tuple[int, ...]:
    """Word ends from the lengths of the clause's spoken prefixes said alone: never past
    the clause, never before the word before, and the last word ends with the clause."""
    ends, last = [], 0
    for n in prefix_lengths[:-1]:
        last = max(last, min(n, length))
        ends.append(last)
    return (*ends, length) if prefix_lengths else ()


def said(written: str, spoken: str, voice: str, cache: Path) -> Said:
    """A clause spoken, and where each word ends: its prefixes are spoken alone (a prefix
    said alone ends a little slower than within the clause, so a word's end is, if
    anything, placed late and its latency counted short)."""
    audio = trim_silence(speak(spoken, voice, cache_dir=cache))
    words = spoken.split()
    prefixes = [" ".join(words[: k + 1]) for k in range(len(words) - 1)]
    lengths = [trim_silence(speak(t, voice, cache_dir=cache)).size for t in prefixes]
    return Said(written, audio, monotone_ends([*lengths, audio.size], audio.size))


def phrases(written: str, spoken: str, sizes: list[int], voice: str, cache: Path) -> list[Said]:
    """A sentence spoken in phrases of `sizes` words, each said alone (a pause follows
    it). The first phrase carries the sentence's written text, the others none: the
    reference is the sentence whole, however its audio is cut."""
    words, out, at = spoken.split(), [], 0
    for k, n in enumerate(sizes):
        text = " ".join(words[at : at + n])
        out.append(said(written if k == 0 else "", text, voice, cache))
        at += n
    return out


def spoken_clauses(args: argparse.Namespace, gaps: tuple[int, int]) -> list[list[Said]]:
    """Utterances of 2 to 4 held-out sentences, each spoken in phrases of
    `args.phrase_words` words, until the stream laid out with its (clause, utterance)
    `gaps` in samples reaches `args.seconds`."""
    rng = random.Random(args.seed)
    sentences = iter(held_out(args.seed, 400))
    clause_gap, utterance_gap = gaps
    total, out = utterance_gap, []
    while total < args.seconds * SAMPLE_RATE:
        utterance: list[Said] = []
        for _ in range(rng.randint(2, 4)):
            s = next(sentences)
            sizes = phrase_sizes(len(s.spoken.split()), args.phrase_words, rng)
            for c in phrases(s.written, s.spoken, sizes, args.voice, args.speech_cache):
                total += c.audio.size + (clause_gap if utterance else utterance_gap)
                utterance.append(c)
        out.append(utterance)
    return out


def make_speech(args: argparse.Namespace) -> Speech:
    """The stream: the clauses laid out with their gaps, on a -70 dBFS noise floor."""
    ms = SAMPLE_RATE // 1000
    gaps = (args.clause_gap_ms * ms, args.utterance_gap_ms * ms)
    clauses = spoken_clauses(args, gaps)
    spans = layout([[c.audio.size for c in u] for u in clauses], gaps[1], *gaps)
    audio = noise_floor(spans[-1][-1][1] + gaps[1], args.seed)
    utterances = []
    for spoken, placed in zip(clauses, spans, strict=True):
        made = []
        for c, (start, end) in zip(spoken, placed, strict=True):
            audio[start:end] += c.audio
            made.append(Clause(c.text, start, end, tuple(start + n for n in c.word_ends)))
        utterances.append(Utterance(tuple(made)))
    return Speech(audio.astype(np.float32), tuple(utterances))


# ---- what one session saw -----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Word:
    """A final's word: where its text ends in the final's text, and its last token's end."""

    end_char: int
    end_ms: int


def words_of(text: str, tokens: Sequence[Mapping[str, Any]]) -> list[Word]:
    """The final's words from its tokens (a token with a leading space starts one); each
    token is found in `text` after the one before it (a token not found is left out)."""
    words: list[Word] = []
    cursor, starts_word = 0, True
    for token in tokens:
        raw = str(token["text"])
        piece = raw.lstrip(" ")
        starts_word = starts_word or raw != piece or not words
        if not piece:
            continue  # a lone word boundary: the next piece starts the word
        at = text.find(piece, cursor)
        if at < 0:
            continue
        cursor = at + len(piece)
        word = Word(cursor, int(token["end_ms"]))
        if starts_word:
            words.append(word)
        else:
            words[-1] = Word(cursor, max(words[-1].end_ms, word.end_ms))
        starts_word = False
    return words


def commits_by_utt(outcome: Outcome) -> dict[int, list[tuple[int, float]]]:
    """Per utterance, each `committed` event as (committed characters so far, arrival)."""
    out: dict[int, list[tuple[int, float]]] = {}
    for event, arrived in outcome.timed("committed"):
        seen = out.setdefault(int(event["utt_id"]), [])
        chars = (seen[-1][0] if seen else 0) + len(str(event["text"]))
        seen.append((chars, arrived))
    return out


def sent_time(outcome: Outcome, ms: float) -> float | None:
    """When the frame that completed the stream's audio up to `ms` went out (None: never)."""
    frame = completing_frame(ms)
    return outcome.sent_at[frame] if frame < len(outcome.sent_at) else None


def spoken_finals(outcome: Outcome) -> list[tuple[Event, float]]:
    return [(e, t) for e, t in outcome.timed("final") if e.get("text")]


def word_latencies(outcome: Outcome) -> tuple[list[float], list[float]]:
    """Each word's commit latency in ms (its final's arrival if never committed), and the
    same for the committed words alone."""
    commits = commits_by_utt(outcome)
    every, committed = [], []
    for final, arrived in spoken_finals(outcome):
        marks = commits.get(int(final["utt_id"]), [])
        for word in words_of(str(final["text"]), final.get("tokens") or []):
            spoken = sent_time(outcome, word.end_ms)
            if spoken is None:
                continue
            at = next((t for chars, t in marks if chars >= word.end_char), None)
            every.append(1000 * ((arrived if at is None else at) - spoken))
            if at is not None:
                committed.append(1000 * (at - spoken))
    return every, committed


def held_latencies(outcome: Outcome, word_ends_ms: Sequence[int]) -> tuple[list[float], int]:
    """Per spoken word (its end on the stream clock, as made): ms from the send of its last
    sample to the first `committed` or `final` whose audio holds it, and how many of those
    were commits. A word no event holds (the voice detector left it out) is not counted."""
    spans = [
        (int(e["start_ms"]), int(e["end_ms"]) + HELD_SLACK_MS, e["type"] == "committed", t)
        for e, t in zip(outcome.events, outcome.times, strict=True)
        if e["type"] in ("committed", "final")
    ]
    latencies, committed = [], 0
    for end_ms in word_ends_ms:
        spoken = sent_time(outcome, end_ms)
        held = next((s for s in spans if s[0] <= end_ms <= s[1]), None)
        if spoken is None or held is None:
            continue
        latencies.append(1000 * (held[3] - spoken))
        committed += held[2]
    return latencies, committed


def after_cut_ms(outcome: Outcome, silence_ms: int) -> list[float]:
    """Each commit's arrival after the audio that decided its cut (its end plus the commit
    silence) was sent: the decode's share of a commit's latency, not the pause's."""
    out = []
    for event, arrived in outcome.timed("committed"):
        decided = sent_time(outcome, int(event["end_ms"]) + silence_ms)
        if decided is not None:
            out.append(1000 * (arrived - decided))
    return out


def committed_shares(outcome: Outcome) -> list[dict[str, Any]]:
    """For each final longer than LONG_UTTERANCE_MS: the share of its characters committed
    before it, and whether the committed texts joined are where its text starts."""
    commits = commits_by_utt(outcome)
    committed_text: dict[int, str] = {}
    for event in outcome.of("committed"):
        key = int(event["utt_id"])
        committed_text[key] = committed_text.get(key, "") + str(event["text"])
    rows = []
    for final, _ in spoken_finals(outcome):
        key, text = int(final["utt_id"]), str(final["text"])
        span = int(final["end_ms"]) - int(final["start_ms"])
        if span <= LONG_UTTERANCE_MS:
            continue
        chars = commits[key][-1][0] if key in commits else 0
        rows.append(
            {
                "utt_id": key,
                "span_ms": span,
                "share": round(chars / len(text), 3),
                "prefix": text.startswith(committed_text.get(key, "")),
            }
        )
    return rows


def pauses_taken(outcome: Outcome, utterances: Sequence[Utterance]) -> dict[str, int]:
    """How the pauses between an utterance's clauses (as made) were taken: an utterance's
    end placed in it, a commit's cut, or neither (the piece ran on over it)."""
    ends = [int(e["end_ms"]) for e in outcome.of("final")]
    cuts = [int(e["end_ms"]) for e in outcome.of("committed")]
    taken = {"ended_utterance": 0, "committed": 0, "neither": 0}
    for u in utterances:
        for before, after in zip(u.clauses, u.clauses[1:], strict=False):
            low = before.end * 1000 // SAMPLE_RATE - HELD_SLACK_MS
            high = after.start * 1000 // SAMPLE_RATE
            if any(low <= ms <= high for ms in ends):
                taken["ended_utterance"] += 1
            elif any(low <= ms <= high for ms in cuts):
                taken["committed"] += 1
            else:
                taken["neither"] += 1
    return taken


def wait_in_clause_ms(speech: Speech) -> list[float]:
    """Per word, ms from its end to its clause's: what a commit at every pause must wait."""
    return [(c.end - n) * 1000 / SAMPLE_RATE for c in speech.clauses for n in c.word_ends]


def overlap(a: tuple[int, int], b: tuple[int, int]) -> int:
    return max(0, min(a[1], b[1]) - max(a[0], b[0]))


def final_latencies(outcome: Outcome, utterances: Sequence[Utterance]) -> list[float]:
    """Per utterance made, ms from the send of its last speech sample to the arrival of the
    last final that overlaps it most (utterances without one are left out)."""
    last: dict[int, float] = {}
    for final, arrived in spoken_finals(outcome):
        span = (int(final["start_ms"]), int(final["end_ms"]))
        shares = [overlap(span, (u.start_ms, u.end_ms)) for u in utterances]
        if max(shares, default=0) > 0:
            last[shares.index(max(shares))] = arrived
    out = []
    for index, arrived in sorted(last.items()):
        spoken = sent_time(outcome, utterances[index].end_ms)
        if spoken is not None:
            out.append(1000 * (arrived - spoken))
    return out


def hypothesis(outcome: Outcome) -> str:
    return " ".join(str(e["text"]) for e in outcome.of("final") if e.get("text"))


# ---- the runs -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Run:
    """One session of one arm: what it saw and the audio the server decoded meanwhile."""

    arm: str
    round_no: int
    outcome: Outcome
    decoded_s: dict[str, float] | None


def stream(url: str, frames: Sequence[bytes], commit: str) -> Outcome:
    start = {"type": "start", "commit": commit, "pace": "live", "timestamps": True}
    options = SessionOptions(start=start, frame_s=FRAME_MS / 1000, speed=1.0, drain_timeout_s=120)
    return asyncio.run(converse(url, frames, options))


def measure(args: argparse.Namespace, speech: Speech) -> list[Run]:
    """Every arm's sessions, the arms taking turns, after one unmeasured warm-up."""
    frames = split(pcm16(speech.audio), SAMPLE_RATE // 1000 * FRAME_MS * 2)
    options = ("--model", str(args.model), "--log-level", "warning")
    silence = ("--commit-silence-ms", str(args.commit_silence_ms))
    server = spawn(ServerSpec((*options, *silence, *shlex.split(args.server_args))))
    runs = []
    try:
        warm = SessionOptions(start={"type": "start", "pace": "replay"}, drain_timeout_s=120)
        asyncio.run(converse(server.url, frames[:100], warm))
        for round_no, arm in alternate(ARMS, args.rounds):
            before = read_stats(server.http_url)
            outcome = stream(server.url, frames, arm)
            decoded = decoded_by_kind(before, read_stats(server.http_url))
            runs.append(Run(arm, round_no, outcome, decoded))
            print(f"round {round_no} {arm}: {len(outcome.of('final'))} finals", flush=True)
    finally:
        server.stop()
    return runs


# ---- the report ---------------------------------------------------------------------


def per_speech_s(decoded: Sequence[dict[str, float] | None], speech_s: float) -> Any:
    """Audio seconds decoded per second of speech, by request kind and in all."""
    if not decoded or any(d is None for d in decoded):
        return None
    kinds: dict[str, float] = {}
    for d in decoded:
        for kind, seconds in (d or {}).items():
            kinds[kind] = kinds.get(kind, 0.0) + seconds
    total = len(decoded) * speech_s
    out = {kind: round(s / total, 3) for kind, s in sorted(kinds.items())}
    return out | {"all": round(sum(kinds.values()) / total, 3)}


def summarize(runs: Sequence[Run], speech: Speech, silence_ms: int) -> dict[str, Any]:
    """One arm's numbers over its rounds."""
    held: list[float] = []
    by_tokens: list[float] = []
    shares: list[dict[str, Any]] = []
    final_ms: list[float] = []
    vad_final_ms: list[float] = []
    cut_ms: list[float] = []
    pieces_ms: list[float] = []
    taken: dict[str, int] = {}
    committed = 0
    for run in runs:
        latencies, count = held_latencies(run.outcome, speech.word_ends_ms)
        held, committed = held + latencies, committed + count
        by_tokens += word_latencies(run.outcome)[0]
        shares += committed_shares(run.outcome)
        final_ms += final_latencies(run.outcome, speech.utterances)
        vad_final_ms += latencies_ms(run.outcome, "end_ms", spoken_only=True)
        cut_ms += after_cut_ms(run.outcome, silence_ms)
        pieces_ms += [e["end_ms"] - e["start_ms"] for e in run.outcome.of("committed")]
        for how, count in pauses_taken(run.outcome, speech.utterances).items():
            taken[how] = taken.get(how, 0) + count
    share_values = [r["share"] for r in shares]
    return {
        "sessions": len(runs),
        "finals": sum(len(spoken_finals(r.outcome)) for r in runs),
        "committed_events": sum(len(r.outcome.of("committed")) for r in runs),
        "words_spoken": len(held),
        "words_committed_before_final": round(committed / max(len(held), 1), 3),
        "commit_latency_ms": asdict(percentiles(held)),
        "commit_latency_by_tokens_ms": asdict(percentiles(by_tokens)),
        "commit_after_cut_audio_ms": asdict(percentiles(cut_ms)),
        "committed_piece_ms": asdict(percentiles(pieces_ms)),
        "pauses_between_clauses": taken,
        "final_latency_ms": asdict(percentiles(final_ms)),
        "final_latency_from_vad_end_ms": asdict(percentiles(vad_final_ms)),
        "committed_share_mean": round(statistics.fmean(share_values), 3) if shares else None,
        "committed_share_min": min(share_values, default=None),
        "finals_not_starting_with_commits": sum(not r["prefix"] for r in shares),
        "committed_share_per_final": shares,
        "wer": round(wer([speech.reference] * len(runs), [hypothesis(r.outcome) for r in runs]), 4),
        "decoded_per_speech_s": per_speech_s([r.decoded_s for r in runs], speech.speech_s),
    }


def acceptance(arms: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Issue 49's bars, each with its value and whether it passed."""
    on, off = arms["pauses"], arms["off"]
    checks = {
        "commit_latency_p50_ms": (on["commit_latency_ms"]["p50"], BARS["commit_p50_ms"], "<="),
        "commit_latency_p95_ms": (on["commit_latency_ms"]["p95"], BARS["commit_p95_ms"], "<="),
        "committed_share_mean": (on["committed_share_mean"], BARS["committed_share"], ">="),
        "final_latency_p50_falls_ms": (
            on["final_latency_ms"]["p50"],
            off["final_latency_ms"]["p50"],
            "<",
        ),
        "wer_with_commits": (on["wer"], round(off["wer"] + WER_SLACK, 4), "<="),
    }
    return {name: verdict(*check) for name, check in checks.items()}


def verdict(value: float | None, bar: float | None, rule: str) -> dict[str, Any]:
    if value is None or bar is None:
        return {"value": value, "bar": f"{rule} {bar}", "pass": None}
    passed = {"<=": value <= bar, ">=": value >= bar, "<": value < bar}[rule]
    return {"value": value, "bar": f"{rule} {bar}", "pass": passed}


def by_arm(runs: Sequence[Run]) -> Iterator[tuple[str, list[Run]]]:
    for arm in ARMS:
        yield arm, [r for r in runs if r.arm == arm]


def word_range(text: str) -> tuple[int, int]:
    """`LOW,HIGH` words per phrase, 1 <= LOW <= HIGH, or `0,0`."""
    low, _, high = text.partition(",")
    try:
        pair = (int(low), int(high))
    except ValueError as exc:
        raise argparse.ArgumentTypeError("expected LOW,HIGH") from exc
    if pair != (0, 0) and not 1 <= pair[0] <= pair[1]:
        raise argparse.ArgumentTypeError("need 1 <= LOW <= HIGH, or 0,0")
    return pair


def parser() -> argparse.ArgumentParser:
    p = parser_for(__doc__)
    p.add_argument("--model", type=Path, default=Path("models/demo"))
    p.add_argument("--seconds", type=float, default=60.0, help="speech to make, about")
    p.add_argument("--seed", type=int, default=49)
    p.add_argument("--voice", default="en-us")
    p.add_argument(
        "--phrase-words",
        type=word_range,
        default=(3, 6),
        metavar="LOW,HIGH",
        help="words per phrase, each a clause with a pause after it (0,0: whole sentences)",
    )
    p.add_argument("--clause-gap-ms", type=int, default=300)
    p.add_argument("--utterance-gap-ms", type=int, default=1500)
    p.add_argument(
        "--commit-silence-ms",
        type=int,
        default=100,
        help="the server's --commit-silence-ms (passed on; the commit's VAD-measured pause)",
    )
    p.add_argument("--speech-cache", type=Path, default=default_speech_dir())
    add_rounds(p, default=1)
    add_server_args(p)
    add_json(p)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    speech = make_speech(args)
    runs = measure(args, speech)
    arms = {arm: summarize(rs, speech, args.commit_silence_ms) for arm, rs in by_arm(runs)}
    document: dict[str, Any] = {
        "benchmark": "live text: commits at pauses against whole-utterance decoding",
        "settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "speech": {
            "audio_s": round(speech.audio.size / SAMPLE_RATE, 1),
            "speech_s": round(speech.speech_s, 1),
            "utterances": len(speech.utterances),
            "clauses": len(speech.clauses),
            "reference_words": len(speech.reference.split()),
            "spoken_words": len(speech.word_ends_ms),
            "word_to_clause_end_ms": asdict(percentiles(wait_in_clause_ms(speech))),
            "utterance_s": [round((u.end_ms - u.start_ms) / 1000, 2) for u in speech.utterances],
        },
        "arms": arms,
        "acceptance": acceptance(arms),
        "machine": machine("cpus", "platform", "cpu", "python"),
    }
    print(write_json(args.json, document))
    return 0
