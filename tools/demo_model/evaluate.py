"""Word error rate and tag accuracy of a model on held-out sentences and unseen voices."""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jiwer
import numpy as np
import torch

from engine.decoding.transcript import decode_transcript
from engine.model.network import CtcArgmax
from engine.model.prompts import LANGUAGE_INDEX, WITH_ITN_INDEX, WITHOUT_ITN_INDEX
from engine.model.tags import TagTable
from engine.model.tokenizer import Tokenizer
from tools.demo_model import augment as augmenting
from tools.demo_model import open_texts, texts, voices
from tools.demo_model.dataset import Targets, frontend


def normalize(text: str) -> str:
    """Lowercase words for WER: punctuation at word edges dropped, so "$4.50." is "$4.50"."""
    stripped = (re.sub(r"^[^\w$]+|[^\w%]+$", "", word) for word in text.lower().split())
    return " ".join(word for word in stripped if word)


def wer(references: Sequence[str], hypotheses: Sequence[str]) -> float:
    """Corpus word error rate of normalized texts (an empty hypothesis counts every word)."""
    refs = [normalize(r) for r in references]
    hyps = [normalize(h) for h in hypotheses]
    return float(jiwer.wer(refs, hyps))


@dataclass(frozen=True, slots=True)
class EvalItem:
    sentence: texts.Sentence
    feats: np.ndarray
    music: bool


#: The sets a shipped model was measured on, which a new one must do no worse on.
SHIPPED_SETS = ("held_out", "unseen_voice", "music")
#: Utterances in each shipped set when a candidate is judged (`gate_sets`): at 60 (30 over
#: music) one word was half a point, so the slack below could not tell a worse model from
#: a lucky draw; at 240 (about 1,600 words) half a point is about eight words.
GATE_SIZE = 240
#: How much higher a WER may be and still count as no worse: half a point, what a single
#: decode may swing by.
WER_SLACK = 0.005


ItemMaker = Callable[[texts.Sentence, voices.Voice, bool], EvalItem]


def _item_maker(rng: random.Random) -> ItemMaker:
    """Features of a sentence in a voice, over music drawn from `rng` when asked."""
    front = frontend()

    def item(s: texts.Sentence, voice: voices.Voice, music: bool) -> EvalItem:
        audio = voices.speak(s.voiced, voice)
        if music:
            bed = augmenting.background_music(len(audio), rng)
            audio = augmenting.mix(audio, bed, 8.0)
            audio = audio / max(1e-6, float(np.abs(audio).max())) * 0.5
        return EvalItem(s, front.features(audio.astype(np.float32)), music)

    return item


def eval_sets(seed: int = 11, count: int = 60) -> dict[str, list[EvalItem]]:
    """Held-out sentences in training voices, in unseen voices, and over music; then
    held-out open-vocabulary sentences (`open_texts`) in training voices, and held-out
    sentences in festival's unseen voice. The first three are drawn exactly as before
    the last two existed, so their numbers compare with older models'."""
    rng = random.Random(seed)
    item = _item_maker(rng)
    sentences = texts.held_out(seed, count * 2 + count // 2)
    seen = voices.evaluation_voices()
    return {
        "held_out": [item(s, rng.choice(seen), False) for s in sentences[:count]],
        "unseen_voice": [
            item(s, voices.UNSEEN[i % len(voices.UNSEEN)], False)
            for i, s in enumerate(sentences[count : 2 * count])
        ],
        "music": [item(s, rng.choice(seen), True) for s in sentences[2 * count :]],
        **_open_sets(seed, count, item),
    }


def gate_sets(seed: int = 11, count: int = 60, size: int = GATE_SIZE) -> dict[str, list[EvalItem]]:
    """`eval_sets`, each shipped set grown to `size` utterances: its own first, then more
    held-out sentences drawn after them, so no sentence repeats and the first numbers
    stay a part of the new ones."""
    sets = eval_sets(seed, count)
    rng = random.Random(seed + 2)
    item = _item_maker(rng)
    seen = voices.evaluation_voices()
    first = sum(len(sets[name]) for name in SHIPPED_SETS)  # the held-out sentences drawn
    owed = {name: size - len(sets[name]) for name in SHIPPED_SETS}
    fresh = iter(texts.held_out(seed, first + sum(owed.values()))[first:])
    more = {name: [next(fresh) for _ in range(n)] for name, n in owed.items()}
    unseen = voices.UNSEEN
    sets["held_out"] += [item(s, rng.choice(seen), False) for s in more["held_out"]]
    sets["unseen_voice"] += [
        item(s, unseen[(count + i) % len(unseen)], False)
        for i, s in enumerate(more["unseen_voice"])
    ]
    sets["music"] += [item(s, rng.choice(seen), True) for s in more["music"]]
    return sets


def _open_sets(seed: int, count: int, item: ItemMaker) -> dict[str, list[EvalItem]]:
    rng = random.Random(seed + 1)
    seen = voices.evaluation_voices()
    wide = open_texts.held_out(open_texts.Lexicon.load(), seed, count)
    festival = texts.held_out(seed + 1, count // 2)
    return {
        "open": [item(s, rng.choice(seen), False) for s in wide],
        "unseen_festival": [item(s, voices.UNSEEN_FESTIVAL, False) for s in festival],
    }


Tags = tuple[str, str, str, bool]  # language, emotion, event, itn: as the engine reports them


class Decoder:
    """The engine's own greedy decoding (prompts, CTC collapse, tag parsing) of a model in
    training: language `auto`, ITN on or off."""

    def __init__(self, model: torch.nn.Module, tokenizer: bytes) -> None:
        self.net = CtcArgmax(model).eval()
        self.tokenizer = Tokenizer.from_serialized(tokenizer)
        self.tags = TagTable.from_tokenizer(self.tokenizer)

    @torch.inference_mode()
    def decode(self, feats: np.ndarray, itn: bool) -> tuple[Tags, str]:
        """The tags and the text."""
        speech = torch.from_numpy(feats.astype(np.float32))[None]
        language = torch.tensor([LANGUAGE_INDEX["auto"]], dtype=torch.int32)
        textnorm = torch.tensor([WITH_ITN_INDEX if itn else WITHOUT_ITN_INDEX], dtype=torch.int32)
        ids, lengths = self.net(speech, torch.tensor([len(feats)]), language, textnorm)
        return self._transcribe(ids[0, : int(lengths[0])].numpy(), itn)

    def expected(self, target: np.ndarray, itn: bool) -> Tags:
        """The tags a target's tag prefix stands for."""
        return self._transcribe(np.asarray(target[:4]), itn)[0]

    def _transcribe(self, frame_ids: np.ndarray, itn: bool) -> tuple[Tags, str]:
        t = decode_transcript(frame_ids, self.tokenizer, self.tags, 0, itn)
        return (t.lang, t.emotion, t.event, t.itn), t.text


def evaluate(
    model: torch.nn.Module, tokenizer: bytes, sets: dict[str, list[EvalItem]]
) -> dict[str, Any]:
    """WER with and without ITN per set, and how often all four tags are right."""
    decoder, targets, report = Decoder(model, tokenizer), Targets(tokenizer), {}
    for name, items in sets.items():
        row: dict[str, Any] = {"utterances": len(items)}
        for itn in (True, False):
            refs, hyps, right = [], [], 0
            for item in items:
                tags, text = decoder.decode(item.feats, itn)
                target = targets.ids("", itn=itn, music=item.music)
                right += tags == decoder.expected(target, itn)
                refs.append(item.sentence.written if itn else item.sentence.spoken)
                hyps.append(text)
            key = "itn" if itn else "no_itn"
            row[f"wer_{key}"] = round(wer(refs, hyps), 4)
            row[f"tags_right_{key}"] = round(right / len(items), 4)
        report[name] = row
    return report


def save_sets(path: Path, sets: dict[str, list[EvalItem]]) -> None:
    import pickle

    path.write_bytes(pickle.dumps(sets))


def load_sets(path: Path) -> dict[str, list[EvalItem]]:
    import pickle

    loaded: dict[str, list[EvalItem]] = pickle.loads(path.read_bytes())
    return loaded


def load_packaged(model_dir: Path) -> tuple[torch.nn.Module, bytes]:
    """A packaged demo model (models/demo) and its tokenizer, ready to evaluate."""
    from engine.model.random_weights import BPE_MODEL_NAME
    from tools.demo_model.training import build_model

    weights = torch.load(model_dir / "model.pt", map_location="cpu", weights_only=True)
    model = build_model()
    model.load_state_dict({k: v.float() for k, v in weights.items()})
    return model.eval(), (model_dir / BPE_MODEL_NAME).read_bytes()


def worse_than(report: dict[str, Any], shipped: dict[str, Any]) -> list[str]:
    """How `report` is worse than `shipped` on the shipped sets (empty: no worse)."""
    out = []
    for name in SHIPPED_SETS:
        new, old = report[name], shipped[name]
        for key in ("itn", "no_itn"):
            wer_new, wer_old = new[f"wer_{key}"], old[f"wer_{key}"]
            if wer_new > wer_old + WER_SLACK:
                out.append(f"{name} WER {key} {wer_new:.2%} > {wer_old:.2%}")
            tags_new, tags_old = new[f"tags_right_{key}"], old[f"tags_right_{key}"]
            if tags_new < tags_old:
                out.append(f"{name} tags {key} {tags_new:.0%} < {tags_old:.0%}")
    return out
