"""Write the trained demo model as a SenseVoiceSmall model dir (fp16 weights)."""

from __future__ import annotations

import json
import shlex
import shutil
import textwrap
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

#: Where a run keeps the benchmarks of its packaged model (`--json` of
#: scripts/bench_redaction.py and bench_hotwords.py, run with `--model` on the package), so
#: packaging again puts their numbers on the card.
BENCHMARKS = "benchmarks"
REDACTION_JSON, HOTWORDS_JSON = "redaction.json", "hotwords.json"

#: The data flags of `data` (or `all`) commands that change what the model can say, and
#: what their sentences are, for the card's data line.
SOURCES = {
    "--pii": "`pii_texts.py` (card numbers read digit by digit, in groups and bare, expiry "
    "dates, security codes, phone and social security numbers, e-mail addresses: what "
    "redaction removes)",
    "--wide": "`wide_words.py` (slot values from a wide list of real and made-up words)",
    "--open": "`open_texts.py` (an open vocabulary: 40,000 common English words, names, "
    "streets and towns, digits read every way a caller reads them, e-mail addresses, "
    "spelled letters)",
}


def data_flags(commands: str) -> frozenset[str]:
    """The `SOURCES` flags that any data-building command in a run's log passed."""
    found = set[str]()
    for line in commands.splitlines():
        if line.startswith("#") or "train_demo_model.py" not in line:
            continue
        words = shlex.split(line.split("train_demo_model.py", 1)[1])
        if words and words[0] in ("data", "all"):
            found.update(w for w in words if w in SOURCES)
    return frozenset(found)


def warning(flags: frozenset[str]) -> str:
    """The card's first line: what the model heard, so nobody takes it for a recognizer."""
    vocabulary = (
        "call-centre and caption sentences and an open English vocabulary"
        if "--open" in flags
        else "a small call-centre and caption vocabulary"
    )
    return (
        "DEMO model: trained on synthetic English speech (espeak-ng, flite and festival "
        f"voices) with {vocabulary}; it does not know human speech"
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
    card = model_card(marker, encoder) + "\n".join(["", *bench_lines(work / BENCHMARKS)])
    (out / "README.md").write_text(card, encoding="utf-8")


def _marker(work: Path, state: dict[str, Any]) -> dict[str, Any]:
    evaluation, commands = work / "eval.json", work / "commands.log"
    flags = data_flags(commands.read_text(encoding="utf-8")) if commands.exists() else frozenset()
    return {
        "demo_model": True,
        "warning": warning(flags),
        "data_flags": sorted(flags),
        "steps": state["step"],
        "training_cpu_s": round(state["spent_s"]),
        "config": state["config"],
        "evaluation": json.loads(evaluation.read_text()) if evaluation.exists() else None,
    }


def data_lines(flags: frozenset[str]) -> list[str]:
    """The card's data bullet, naming only the sentence sources the run's data used."""
    sources = [
        "`tools/demo_model/texts.py` (numbers, money, times, dates, call-centre and "
        "caption phrases)",
        *(text for flag, text in SOURCES.items() if flag in flags),
    ]
    listed = sources[0] if len(sources) == 1 else f"{', '.join(sources[:-1])} and {sources[-1]}"
    text = (
        f"- Data: sentences from {listed}, spoken by espeak-ng, flite and festival voices, "
        "with noise, an 8 kHz mu-law telephone line and background music (tagged BGM) "
        "mixed in."
    )
    return textwrap.wrap(text, width=88, subsequent_indent="  ", break_on_hyphens=False)


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
            f"**{marker['warning']}.**",
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
            *data_lines(frozenset(marker.get("data_flags", ()))),
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


def bench_lines(folder: Path) -> list[str]:
    """The card's benchmark section: redaction per policy and hotwords at the acceptance
    condition, from the JSON the benchmarks wrote into `folder` (none there: no section)."""
    # The benchmark's own bars; imported here, as that module brings the server spawner.
    from tools.bench.redaction import PRECISION_FLOOR, RECALL_FLOOR

    lines = []
    redaction, hotwords = folder / REDACTION_JSON, folder / HOTWORDS_JSON
    if redaction.exists():
        report = json.loads(redaction.read_text())
        lines += [
            f"Redaction (`scripts/bench_redaction.py`, {len(report['sentences'])} sentences, "
            f"voice {report['config']['voice']}; bars: recall {RECALL_FLOOR:.0%}, "
            f"precision {PRECISION_FLOOR:.0%}):",
            "",
            "| policy | sentences | recall | precision | bar met |",
            "|---|---|---|---|---|",
            *(
                f"| {r['policy']} | {r['sentences']} | {r['recall']:.1%} | "
                f"{r['precision']:.1%} | {'yes' if r['passes'] else 'no'} |"
                for r in report["policies"]
            ),
            "",
        ]
    if hotwords.exists():
        report = json.loads(hotwords.read_text())
        name = report["acceptance"]["condition"]
        row = next(c for c in report["conditions"] if c["name"] == name)
        greedy = next(c for c in report["conditions"] if c["name"] == "greedy")
        lines += [
            f"Hotwords (`scripts/bench_hotwords.py`, {name}, on phrases the model never "
            f"heard): recall {row['recall']:.0%} (greedy {greedy['recall']:.0%}), false "
            f"insertions {row['false_insertions']:.1%}, control WER {row['control_wer']:.1%} "
            f"(greedy {greedy['control_wer']:.1%}); "
            f"acceptance {'met' if report['acceptance']['passed'] else 'not met'}.",
            "",
        ]
    return lines
