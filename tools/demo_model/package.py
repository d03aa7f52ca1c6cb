"""Write the trained demo model as a SenseVoiceSmall model dir (fp16 weights)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import torch

from engine.model.directory import DEMO_MODEL_MARKER
from engine.model.random_weights import (
    BPE_MODEL_NAME,
    COPIED_FILES,
    assets,
    check_tokenizer,
    with_encoder_conf,
)
from tools.demo_model.loss import DEAD_BIAS, live_ids, mask_dead_rows
from tools.demo_model.training import ENCODER_CONF

WARNING = (
    "DEMO model: trained on synthetic English speech (espeak-ng, flite and festival voices) "
    "with call-centre and caption sentences and an open English vocabulary; it does not "
    "know human speech"
)


def package(work: Path, out: Path) -> None:
    """Model dir `out` from the run in `work`: config, CMVN, tokenizer, weights, marker."""
    state = torch.load(work / "ckpt.pt", map_location="cpu", weights_only=False)
    tokenizer = (work / "tokenizer.bpe.model").read_bytes()
    check_tokenizer(tokenizer)
    real = assets() / "sensevoice_small"
    encoder = state.get("encoder_conf", ENCODER_CONF)
    numbers = {k: v for k, v in encoder.items() if isinstance(v, int) and not isinstance(v, bool)}
    out.mkdir(parents=True, exist_ok=True)
    config = with_encoder_conf((real / "config.yaml").read_text(encoding="utf-8"), numbers)
    (out / "config.yaml").write_text(config, encoding="utf-8")
    for name in COPIED_FILES:
        (out / name).write_bytes((real / name).read_bytes())
    (out / BPE_MODEL_NAME).write_bytes(tokenizer)
    # Rows no target held were left out of the loss; packaged, they can never win.
    masked = mask_dead_rows(state["model"], live_ids(tokenizer))
    weights = {k: v.half() if v.is_floating_point() else v for k, v in masked.items()}
    torch.save(weights, out / "model.pt")
    shutil.copyfile(work / "train.jsonl", out / "train.jsonl")
    if (work / "commands.log").exists():
        shutil.copyfile(work / "commands.log", out / "commands.log")
    marker = _marker(work, state)
    (out / DEMO_MODEL_MARKER).write_text(json.dumps(marker, indent=2) + "\n")
    (out / "README.md").write_text(model_card(marker, encoder), encoding="utf-8")


def _marker(work: Path, state: dict[str, Any]) -> dict[str, Any]:
    evaluation = work / "eval.json"
    return {
        "demo_model": True,
        "warning": WARNING,
        "steps": state["step"],
        "training_cpu_s": round(state["spent_s"]),
        "config": state["config"],
        "evaluation": json.loads(evaluation.read_text()) if evaluation.exists() else None,
    }


def model_card(marker: dict[str, Any], encoder: dict[str, Any]) -> str:
    """models/demo/README.md: what the model is, how it was made, how well it does."""
    rows = [
        f"| {name} | {r['utterances']} | {r['wer_itn']:.1%} | {r['wer_no_itn']:.1%} "
        f"| {r['tags_right_itn']:.0%} / {r['tags_right_no_itn']:.0%} |"
        for name, r in (marker["evaluation"] or {}).items()
    ]
    config = marker["config"]
    return "\n".join(
        [
            "# The SenseStream demo model",
            "",
            f"**{WARNING}.**",
            "",
            "It exists so that tests and first runs see real words: it is not a speech",
            "recognizer for people. Pass `--model` with the real SenseVoiceSmall.",
            "",
            "- Architecture: funasr's `SenseVoiceSmall` (SANM encoder with FSMN memory, CTC,",
            "  four prompt frames for language, event, emotion and text norm), smaller:",
            f"  d={encoder['output_size']}, {encoder['attention_heads']} heads, "
            f"{encoder['num_blocks']}+{encoder['tp_blocks']} blocks, "
            f"FFN {encoder['linear_units']}; the real 25055-id vocabulary layout with a",
            "  tokenizer of the training text.",
            "- Data: sentences from `tools/demo_model/texts.py` (numbers, money, times, dates,",
            "  call-centre and caption phrases) and `pii_texts.py` (card numbers read digit by",
            "  digit, expiry dates, security codes, phone and social security numbers, e-mail",
            "  addresses: what redaction removes) and `open_texts.py` (an open vocabulary:",
            "  40,000 common English words, names, streets and towns, digits read every way a",
            "  caller reads them, e-mail addresses, spelled letters), spoken by espeak-ng,",
            "  flite and festival voices, with noise, an 8 kHz mu-law telephone line and",
            "  background music (tagged BGM) mixed in.",
            "  Emotion is always NEUTRAL; no other events are trained.",
            f"- Training: {marker['steps']} steps of batch {config['batch']}, peak rate "
            f"{config['lr']}, {marker['training_cpu_s'] / 3600:.1f} CPU-hours on 2 cores. "
            "The commands are in `commands.log`, every step in `train.jsonl`.",
            "- Weights: fp16 (`model.pt`); the engine loads them as fp32. Only the output rows",
            "  of the trained pieces and the six tags it uses were trained (the rest of the",
            "  vocabulary is padding no target holds); the others have weight 0 and bias",
            f"  {DEAD_BIAS:g}, so greedy decoding never picks them.",
            "",
            "Held-out sentences, greedy decoding, language `auto`",
            "(`tools/demo_model/evaluate.py`):",
            "",
            "| set | utterances | WER with ITN | WER without | tags right (ITN / without) |",
            "|---|---|---|---|---|",
            *rows,
            "",
            "`held_out`: sentences never trained on, in training voices; `unseen_voice`: the",
            "same kind of sentences in voices never trained on (espeak `en-029+m6`, flite",
            "`rms`); `music`: held-out sentences over background music (the tags must say BGM);",
            "`open`: held-out open-vocabulary sentences in training voices; `unseen_festival`:",
            "held-out sentences in festival's `cmu_us_slt_arctic_hts`, never trained on.",
            "",
        ]
    )
