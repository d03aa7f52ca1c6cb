"""Hotword biasing on the demo model: phrase recall, control WER, false insertions and the
decode time of a final, greedy against biased (two boosts, two beam widths), in one run.

The biased set is demo template sentences whose name, city, team or thing is a value the
model never heard (Martin, Austin, finance, laptop, ...), spoken by espeak-ng; its hotword
is that value as the model writes it with ITN. Candidates greedy already gets right are
dropped (and counted). The control set is held-out demo sentences with none of the phrases,
decoded with the whole hotword list active. Every sentence carries the whole list too.

Greedy and the recognizer's own beam (`engine.decoding.recognizer.BEAM`) decode through
`Recognizer.decode`; other beams decode directly (`run_scored`, then `prefix_beam_search`
as `Recognizer._tokens` does), and at the recognizer's beam both paths are run to show they
agree. `search_ms` times the search alone on the same frames.

The command line is scripts/bench_hotwords.py.
"""

from __future__ import annotations

import itertools
import json
import random
import re
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from engine.backends.base import ScoredFrames, ScoringBackend
from engine.backends.onnx import OnnxBackend
from engine.backends.registry import BackendOptions, create_backend
from engine.decoding.context_graph import ContextGraph
from engine.decoding.ctc import greedy_collapse
from engine.decoding.hotwords import hotword_text
from engine.decoding.recognizer import BEAM, Recognizer, Utterance, biased_tokens
from engine.decoding.transcript import transcript_of
from engine.model.directory import load_model_dir
from engine.model.prompts import PROMPT_FRAMES
from engine.types import DEFAULT_HOTWORD_BOOST, DecodeOptions, Hotword
from tools.bench.capacity.corpus import default_speech_dir
from tools.bench.common.cli import add_json, parser_for
from tools.bench.common.output import machine, write_json
from tools.demo_model.texts import SLOTS, TEMPLATES, held_out, spoken_words
from tools.demo_model.wide_words import HOTWORD_TEST_VALUES
from tools.speech import load, synthesize

#: Slot values the demo model never heard (tools/demo_model/texts.py has the ones it did;
#: its wide vocabulary, tools/demo_model/wide_words.py, keeps these out).
UNSEEN = HOTWORD_TEST_VALUES

# The acceptance bars (issue 39, item 4).
RECALL_FLOOR = 0.8
GREEDY_RECALL_CEILING = 0.3  # the recall bar applies where greedy finds fewer than this
WER_SLACK = 0.005  # half a percentage point over greedy
FALSE_INSERTION_CEILING = 0.02
TIME_RATIO_CEILING = 1.5

#: How long the scored graph's export may take (the demo model's takes seconds).
SCORED_WAIT_S = 300.0


@dataclass(frozen=True, slots=True)
class Spoken:
    """A test sentence: written reference, spoken form, its hotword (None: control), voice."""

    written: str
    spoken: str
    phrase: str | None
    voice: str


@dataclass(frozen=True, slots=True)
class Item:
    """A sentence with its features ready (greedy options: biased runs swap the options)."""

    sentence: Spoken
    utterance: Utterance


@dataclass(frozen=True, slots=True)
class Condition:
    """One way of decoding: greedy (`boost` None) or biased at `boost` with `beam`."""

    name: str
    boost: float | None
    beam: int

    @property
    def via_recognizer(self) -> bool:
        """Decoded through `Recognizer.decode` (greedy, or the recognizer's own beam)."""
        return self.boost is None or self.beam == BEAM


@dataclass(frozen=True, slots=True)
class Outcome:
    """One sentence under one condition: the text and the timings of its final."""

    text: str
    decode_s: float
    search_s: float
    model_s: float  # the network alone: the plain graph for greedy, the scored one biased
    direct_text: str | None = None  # the direct path's text, where it is not the main one
    direct_s: float | None = None


@dataclass(frozen=True, slots=True)
class Bench:
    """The recognizer, its scoring backend, and the options of every condition."""

    recognizer: Recognizer
    scoring: ScoringBackend
    language: str
    phrases: tuple[str, ...]
    repeats: int  # back-to-back decodes per timing, the fastest kept

    def options(self, boost: float | None) -> DecodeOptions:
        """Greedy options, or the whole hotword list at `boost`."""
        hotwords = () if boost is None else tuple(Hotword(p, boost) for p in self.phrases)
        return DecodeOptions(self.language, itn=True, hotwords=hotwords)

    def graph(self, boost: float) -> ContextGraph:
        """The compiled hotword list at `boost` (cached by the recognizer's compiler)."""
        options = self.options(boost)
        return self.recognizer.hotwords.graph(options.hotwords, options.itn)


def contains(text: str, phrase: str) -> bool:
    """`phrase` as whole words in `text`, case-insensitive ("Lisa" is not in "Lisbon")."""
    return re.search(rf"(?<!\w){re.escape(phrase)}(?!\w)", text, re.IGNORECASE) is not None


def normalize(text: str) -> str:
    """Lowercase words, edge punctuation dropped: tools/demo_model/evaluate.py's rule,
    copied because that module loads torch."""
    stripped = (re.sub(r"^[^\w$]+|[^\w%]+$", "", word) for word in text.lower().split())
    return " ".join(word for word in stripped if word)


def wer(references: Sequence[str], hypotheses: Sequence[str]) -> float:
    """Corpus word error rate: word edits over reference words, both normalised."""
    from rapidfuzz.distance import Levenshtein

    pairs = [
        (normalize(r).split(), normalize(h).split())
        for r, h in zip(references, hypotheses, strict=True)
    ]
    words = sum(len(r) for r, _ in pairs)
    return sum(Levenshtein.distance(r, h) for r, h in pairs) / max(words, 1)


def unseen_values(count: int | None) -> list[tuple[str, str]]:
    """(slot, value) pairs taking the slots in turn, so a few still mix the kinds."""
    columns = [[(slot, v) for v in values] for slot, values in UNSEEN.items()]
    mixed = [p for row in itertools.zip_longest(*columns) for p in row if p is not None]
    return mixed[:count]


def biased_sentences(count: int | None, voices: Sequence[str], seed: int) -> list[Spoken]:
    """One template sentence per unseen value, its other slots filled with known values."""
    rng = random.Random(seed)
    out = []
    for i, (slot, value) in enumerate(unseen_values(count)):
        template = rng.choice([t for t in TEMPLATES if f"{{{slot}}}" in t])
        fills = {name: SLOTS[name](rng) for name in re.findall(r"{(\w+)}", template)}
        fills[slot] = (value, value.lower())
        written = template.format(**{k: w for k, (w, _) in fills.items()})
        spoken = spoken_words(template.format(**{k: s for k, (_, s) in fills.items()}))
        out.append(Spoken(written, spoken, value, voices[i % len(voices)]))
    return out


def control_sentences(
    count: int, phrases: Sequence[str], voices: Sequence[str], seed: int
) -> tuple[list[Spoken], int]:
    """Held-out demo sentences without any phrase, and how many were left out for one."""
    chosen = [s for s in held_out(seed, count) if not any(contains(s.written, p) for p in phrases)]
    spoken = [
        Spoken(s.written, s.spoken, None, voices[i % len(voices)]) for i, s in enumerate(chosen)
    ]
    return spoken, count - len(chosen)


@contextmanager
def linked_model(model: Path) -> Iterator[Path]:
    """A temporary folder of links to the model's files: an ONNX export made for the run
    lands there, never in the model folder (as tests/conftest.py's `demo_model` does)."""
    with tempfile.TemporaryDirectory(prefix="hotwords-model-") as tmp:
        view = Path(tmp)
        for item in model.resolve().iterdir():
            if item.is_file():
                (view / item.name).symlink_to(item.resolve())
        yield view


def open_bench(model: Path, args: Any, phrases: Sequence[str]) -> Bench:
    """The recognizer on the default CPU backend, its hotword list checked up front."""
    model_dir = load_model_dir(model)
    options = BackendOptions("onnx", args.precision, threads=args.threads)
    backend = create_backend(model_dir, options)
    if not isinstance(backend, ScoringBackend):
        raise SystemExit(f"the {type(backend).__name__} cannot score frames for hotwords")
    # ONNX Runtime makes its scored graph on a thread of its own: measure once it is open.
    if isinstance(backend, OnnxBackend) and not backend.wait_for_scoring(SCORED_WAIT_S):
        raise SystemExit("the scored graph for hotwords could not be made (see the log)")
    recognizer = Recognizer(model_dir, backend)
    # A phrase the tokenizer cannot spell is refused here (HotwordError), not mid-run.
    recognizer.hotwords.check([Hotword(p) for p in phrases])
    return Bench(recognizer, backend, args.language, tuple(phrases), args.repeats)


def prepare(bench: Bench, sentences: Sequence[Spoken], cache: Path) -> list[Item]:
    """Speak (cached by tools.speech) and compute features for every sentence."""
    options = bench.options(None)
    return [
        Item(s, bench.recognizer.prepare(load(synthesize(s.spoken, s.voice, cache)), options))
        for s in sentences
    ]


def scored(bench: Bench, item: Item, options: DecodeOptions) -> ScoredFrames:
    """The scored graph's output for one item (the hotwords do not change it)."""
    feats = bench.recognizer.features_of(item.utterance)
    return bench.scoring.run_scored([feats], [options], audio=False)[0]


def decode_direct(bench: Bench, item: Item, boost: float, beam: int) -> tuple[str, float]:
    """A final decoded with the search called directly: its text and wall time."""
    options = bench.options(boost)
    recognizer = bench.recognizer
    t0 = time.perf_counter()
    output = scored(bench, item, options)
    # The graph looked up from the request's hotwords, as the recognizer does per decode.
    graph = recognizer.hotwords.graph(options.hotwords, options.itn)
    tokens = biased_tokens(output, graph, beam)
    text = transcript_of(
        tokens, recognizer.tokenizer, recognizer.tags, item.utterance.duration_ms, options.itn
    ).text
    return text, time.perf_counter() - t0


def decode_recognizer(bench: Bench, item: Item, boost: float | None) -> tuple[str, float]:
    """A final decoded by `Recognizer.decode`: its text and wall time."""
    utterance = replace(item.utterance, options=bench.options(boost))
    t0 = time.perf_counter()
    text = bench.recognizer.decode([utterance])[0].text
    return text, time.perf_counter() - t0


def search_time(bench: Bench, output: ScoredFrames, condition: Condition) -> float:
    """Seconds of the token search alone: greedy collapse, or the biased beam search."""
    graph = None if condition.boost is None else bench.graph(condition.boost)
    t0 = time.perf_counter()
    if graph is None:
        greedy_collapse(output.ids)
    else:
        biased_tokens(output, graph, condition.beam)
    return time.perf_counter() - t0


def fastest(
    decode: Callable[..., tuple[str, float]], repeats: int, *args: Any
) -> tuple[str, float]:
    """The text and the fastest of `repeats` back-to-back decodes: the host's noise only
    ever adds time, and the text never changes."""
    runs = [decode(*args) for _ in range(repeats)]
    return runs[0][0], min(seconds for _, seconds in runs)


def fastest_s(timed: Callable[..., float], repeats: int, *args: Any) -> float:
    return min(timed(*args) for _ in range(repeats))


def model_time(bench: Bench, item: Item, with_scores: bool) -> float:
    """Seconds of the network alone: the plain graph greedy reads, or the scored one."""
    feats = bench.recognizer.features_of(item.utterance)
    options = bench.options(None)
    t0 = time.perf_counter()
    if with_scores:
        bench.scoring.run_scored([feats], [options], audio=False)
    else:
        bench.recognizer.backend.run([feats], [options])
    return time.perf_counter() - t0


def decode_condition(
    bench: Bench, item: Item, condition: Condition, search_s: float, model_s: float
) -> Outcome:
    """One item's final under one condition, and at the recognizer's beam the direct path's
    too, to show the two agree."""
    boost, beam, repeats = condition.boost, condition.beam, bench.repeats
    if condition.via_recognizer:
        text, decode_s = fastest(decode_recognizer, repeats, bench, item, boost)
    else:
        text, decode_s = fastest(decode_direct, repeats, bench, item, boost, beam)
    if boost is None or not condition.via_recognizer:
        return Outcome(text, decode_s, search_s, model_s)
    direct_text, direct_s = fastest(decode_direct, repeats, bench, item, boost, beam)
    return Outcome(text, decode_s, search_s, model_s, direct_text, direct_s)


def run_item(
    bench: Bench, item: Item, conditions: Sequence[Condition], turn: int
) -> dict[str, Outcome]:
    """Every condition on one item, starting at a different one per item so no condition
    always runs first (warmest or coldest caches)."""
    output = scored(bench, item, bench.options(None))
    model_s = {
        scores: fastest_s(model_time, bench.repeats, bench, item, scores)
        for scores in (False, True)
    }
    order = [*conditions[turn % len(conditions) :], *conditions[: turn % len(conditions)]]
    outcomes = {}
    for c in order:
        search_s = fastest_s(search_time, bench.repeats, bench, output, c)
        outcomes[c.name] = decode_condition(bench, item, c, search_s, model_s[c.boost is not None])
    return {c.name: outcomes[c.name] for c in conditions}


def phrase_in_topk(bench: Bench, item: Item) -> bool:
    """Whether the phrase's pieces appear, in order on later and later frames, among the
    frames' candidates: the most any biasing could make the search emit."""
    phrase = item.sentence.phrase
    if phrase is None:
        return False
    wanted = bench.recognizer.tokenizer.encode(hotword_text(phrase, itn=True))
    output = scored(bench, item, bench.options(None))
    found = 0
    for candidates in output.topk_ids[PROMPT_FRAMES:].tolist():
        if found < len(wanted) and wanted[found] in candidates:
            found += 1
    return found == len(wanted)


def split_greedy(bench: Bench, items: Sequence[Item]) -> tuple[list[Item], list[dict[str, Any]]]:
    """The candidates greedy gets wrong, and rows for those it already gets right."""
    kept, dropped = [], []
    for item in items:
        text, _ = decode_recognizer(bench, item, None)
        phrase = item.sentence.phrase or ""
        if contains(text, phrase):
            dropped.append({"text": item.sentence.written, "phrase": phrase, "greedy": text})
        else:
            kept.append(item)
    return kept, dropped


def conditions_for(boosts: Sequence[float], beams: Sequence[int]) -> list[Condition]:
    """Greedy, then every (beam, boost) pair."""
    biased = [Condition(f"boost{b:g}-beam{k}", b, k) for k in beams for b in boosts]
    return [Condition("greedy", None, 0), *biased]


def wrong_phrase(text: str, item: Item, phrases: Sequence[str]) -> bool:
    """Whether `text` holds a phrase of the list other than the sentence's own."""
    return any(contains(text, p) for p in phrases if p != item.sentence.phrase)


def share(flags: Sequence[bool]) -> float | None:
    """The share of true flags; None for none at all."""
    return round(sum(flags) / len(flags), 4) if flags else None


def median_ms(seconds: Sequence[float | None]) -> float | None:
    values = [s for s in seconds if s is not None]
    return round(statistics.median(values) * 1000, 3) if values else None


def summarize(
    condition: Condition,
    biased: Sequence[tuple[Item, dict[str, Outcome]]],
    control: Sequence[tuple[Item, dict[str, Outcome]]],
    phrases: Sequence[str],
) -> dict[str, Any]:
    """One condition's metrics over both sets (timings over every sentence)."""
    name = condition.name
    every = [o[name] for _, o in (*biased, *control)]
    direct = [o for o in every if o.direct_text is not None]
    refs = [i.sentence.written for i, _ in control]
    hyps = [o[name].text for _, o in control]
    return {
        "name": name,
        "boost": condition.boost,
        "beam": condition.beam if condition.boost is not None else None,
        "decoded_by": "recognizer" if condition.via_recognizer else "direct search",
        "recall": share([contains(o[name].text, i.sentence.phrase or "") for i, o in biased]),
        # Biasing towards the list can also write another sentence's phrase.
        "wrong_phrase": share([wrong_phrase(o[name].text, i, phrases) for i, o in biased]),
        "control_wer": round(wer(refs, hyps), 4) if control else None,
        "false_insertions": share([any(contains(h, p) for p in phrases) for h in hyps]),
        "decode_ms": median_ms([o.decode_s for o in every]),
        "search_ms": median_ms([o.search_s for o in every]),
        "model_ms": median_ms([o.model_s for o in every]),
        "direct_decode_ms": median_ms([o.direct_s for o in direct]),
        "direct_agrees": share([o.direct_text == o.text for o in direct]),
    }


def checks(row: dict[str, Any], greedy: dict[str, Any]) -> dict[str, bool | None]:
    """The acceptance bars for one biased condition (None: not applicable or not measured)."""

    def at_most(value: float | None, bar: float | None) -> bool | None:
        return None if value is None or bar is None else value <= bar

    greedy_recall = greedy["recall"]
    recall_applies = greedy_recall is not None and greedy_recall < GREEDY_RECALL_CEILING
    recall = row["recall"]
    wer_bar = None if greedy["control_wer"] is None else greedy["control_wer"] + WER_SLACK
    fi = row["false_insertions"]
    time_bar = None if greedy["decode_ms"] is None else greedy["decode_ms"] * TIME_RATIO_CEILING
    return {
        "recall_at_least_0.8": recall >= RECALL_FLOOR
        if recall_applies and recall is not None
        else None,
        "control_wer_within_0.5_points": at_most(row["control_wer"], wer_bar),
        "false_insertions_under_2pct": None if fi is None else fi < FALSE_INSERTION_CEILING,
        "decode_within_1.5x_greedy": at_most(row["decode_ms"], time_bar)
        if row["beam"] == BEAM
        else None,
    }


def sentence_rows(
    results: Sequence[tuple[Item, dict[str, Outcome]]], reach: Sequence[bool] | None
) -> list[dict[str, Any]]:
    """Per sentence: reference, phrase, voice, and each condition's text."""
    rows = []
    for k, (item, outcomes) in enumerate(results):
        row: dict[str, Any] = {"text": item.sentence.written, "voice": item.sentence.voice}
        if item.sentence.phrase is not None:
            row["phrase"] = item.sentence.phrase
        if reach is not None:
            row["phrase_in_topk"] = reach[k]
        row["outputs"] = {name: o.text for name, o in outcomes.items()}
        rows.append(row)
    return rows


def warm_up(bench: Bench, item: Item, conditions: Sequence[Condition]) -> None:
    """One decode per path, so the timed ones find both ONNX sessions open and warm."""
    run_item(bench, item, conditions, 0)


def parse_args(argv: Sequence[str] | None) -> Any:
    parser = parser_for(__doc__)
    parser.add_argument("--model", type=Path, default=Path("models/demo"))
    parser.add_argument("--precision", default="int8")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--language", default="auto")
    total = sum(len(values) for values in UNSEEN.values())
    parser.add_argument(
        "--phrases", type=int, default=None, help=f"unseen values used (all: {total})"
    )
    parser.add_argument("--control", type=int, default=40, help="held-out control sentences")
    parser.add_argument("--boosts", default="2,4")
    parser.add_argument("--beams", default="4,8")
    parser.add_argument("--voices", default="en-us,en-gb", help="espeak-ng voices, in turn")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--repeats", type=int, default=5, help="decodes per timing (fastest)")
    parser.add_argument("--speech-cache", type=Path, default=None, help="synthesised speech")
    add_json(parser, required=True)
    return parser.parse_args(argv)


@dataclass(frozen=True, slots=True)
class Plan:
    """What one run decodes: the sentences, the hotword list and the conditions."""

    candidates: list[Spoken]
    phrases: list[str]
    control: list[Spoken]
    control_dropped: int
    boosts: list[float]
    beams: list[int]
    conditions: list[Condition]


@dataclass(frozen=True, slots=True)
class Measured:
    """What one run found: per-sentence outcomes, the dropped candidates, the top-K width."""

    biased: list[tuple[Item, dict[str, Outcome]]]
    control: list[tuple[Item, dict[str, Outcome]]]
    reach: list[bool]
    dropped: list[dict[str, Any]]
    topk: int


def plan(args: Any) -> Plan:
    """The sentences and conditions the command line asks for."""
    voices = args.voices.split(",")
    boosts = [float(b) for b in args.boosts.split(",")]
    beams = [int(k) for k in args.beams.split(",")]
    candidates = biased_sentences(args.phrases, voices, args.seed)
    phrases = [s.phrase for s in candidates if s.phrase is not None]
    control, control_dropped = control_sentences(args.control, phrases, voices, args.seed)
    conditions = conditions_for(boosts, beams)
    return Plan(candidates, phrases, control, control_dropped, boosts, beams, conditions)


def measure(args: Any, todo: Plan) -> Measured:
    """Speak, filter and decode everything, on a linked view of the model."""
    cache = args.speech_cache or default_speech_dir()
    with linked_model(args.model) as view:
        bench = open_bench(view, args, todo.phrases)
        kept, dropped = split_greedy(bench, prepare(bench, todo.candidates, cache))
        control = prepare(bench, todo.control, cache)
        items = [*kept, *control]
        warm_up(bench, items[0], todo.conditions)
        reach = [phrase_in_topk(bench, item) for item in kept]
        outcomes = [run_item(bench, item, todo.conditions, k) for k, item in enumerate(items)]
        topk = int(scored(bench, items[0], bench.options(None)).topk_ids.shape[1])
    return Measured(
        list(zip(kept, outcomes[: len(kept)], strict=True)),
        list(zip(control, outcomes[len(kept) :], strict=True)),
        reach,
        dropped,
        topk,
    )


def report(args: Any, todo: Plan, found: Measured, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The result document."""
    config = {
        "model": str(args.model), "backend": "onnx", "precision": args.precision,
        "threads": args.threads, "language": args.language, "itn": True, "repeats": args.repeats,
        "voices": args.voices.split(","), "boosts": todo.boosts, "beams": todo.beams,
        "recognizer_beam": BEAM, "topk": found.topk, "seed": args.seed,
        "hotwords": todo.phrases, "hotwords_per_sentence": "all",
    }  # fmt: skip
    return {
        "config": config,
        "machine": machine("cpus", "platform", "cpu", "python"),
        "biased_set": {
            "candidates": len(todo.candidates),
            "dropped_greedy_right": len(found.dropped),
            "kept": len(found.biased),
            "phrase_in_topk": share(found.reach),
        },
        "control_set": {
            "sentences": len(todo.control),
            "dropped_holding_a_phrase": todo.control_dropped,
        },
        "conditions": rows,
        "acceptance": acceptance(rows),
        "biased": sentence_rows(found.biased, found.reach),
        "control": sentence_rows(found.control, None),
        "dropped": found.dropped,
    }


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    todo = plan(args)
    found = measure(args, todo)
    rows = [summarize(c, found.biased, found.control, todo.phrases) for c in todo.conditions]
    for row in rows[1:]:
        row["checks"] = checks(row, rows[0])
    for row in rows:
        print(json.dumps(row), flush=True)
    document = report(args, todo, found, rows)
    document["run_s"] = round(time.perf_counter() - started, 1)
    write_json(args.json, document, indent=1)
    return 0


def acceptance(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The default request's checks (the default boost, else the first biased one, at the
    recognizer's beam) and whether none of them failed."""
    at_beam = [r for r in rows if r["boost"] is not None and r["beam"] == BEAM]
    row = next((r for r in at_beam if r["boost"] == DEFAULT_HOTWORD_BOOST), None)
    row = row or next(iter(at_beam), None)
    if row is None:
        return {"condition": None, "checks": {}, "passed": None}
    bars = row["checks"]
    return {
        "condition": row["name"],
        "checks": bars,
        "passed": all(v is not False for v in bars.values()),
    }
