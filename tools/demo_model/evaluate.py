"""Word error rate and tag accuracy of a model on held-out sentences and unseen voices."""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
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
from tools.demo_model import texts, voices
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


def eval_sets(seed: int = 11, count: int = 60) -> dict[str, list[EvalItem]]:
    """Held-out sentences in training voices, in unseen voices, and over music."""
    rng, front = random.Random(seed), frontend()
    sentences = texts.held_out(seed, count * 2 + count // 2)
    seen = voices.training_voices()

    def item(s: texts.Sentence, voice: voices.Voice, music: bool) -> EvalItem:
        audio = voices.speak(s.spoken, voice)
        if music:
            bed = augmenting.background_music(len(audio), rng)
            audio = augmenting.mix(audio, bed, 8.0)
            audio = audio / max(1e-6, float(np.abs(audio).max())) * 0.5
        return EvalItem(s, front.features(audio.astype(np.float32)), music)

    return {
        "held_out": [item(s, rng.choice(seen), False) for s in sentences[:count]],
        "unseen_voice": [
            item(s, voices.UNSEEN[i % len(voices.UNSEEN)], False)
            for i, s in enumerate(sentences[count : 2 * count])
        ],
        "music": [item(s, rng.choice(seen), True) for s in sentences[2 * count :]],
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
