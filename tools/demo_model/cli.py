"""`scripts/train_demo_model.py`: data, training, evaluation and packaging, each resumable.

`all` runs the steps in order; each step skips what its work dir already holds, so the
same command continues a run that an earlier session (or Ctrl-C) stopped.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from engine.model.random_weights import BPE_MODEL_NAME
from server.config import cache_home
from tools.demo_model import dataset, evaluate, pii_texts, voices
from tools.demo_model.loss import live_ids
from tools.demo_model.training import TrainConfig, Trainer


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="scripts/train_demo_model.py", description=__doc__)
    p.add_argument("step", choices=["data", "train", "evaluate", "package", "all"])
    p.add_argument("--work", type=Path, default=cache_home(os.environ) / "demo-train")
    p.add_argument("--utterances", type=int, default=10000)
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--specaug", action="store_true", help="SpecAugment (slows learning)")
    p.add_argument(
        "--clean",
        action="store_true",
        help="data: an easy set (single sentences, few voices, no noise) in shards-clean/; "
        "train: train on it (a curriculum's first part)",
    )
    p.add_argument(
        "--wide",
        action="store_true",
        help="data: half the sentences take slot values from a wide vocabulary of real and "
        "made-up words (tools/demo_model/wide_words.py), so the model learns to spell",
    )
    p.add_argument(
        "--pii",
        action="store_true",
        help=f"data: {dataset.PII_SHARE * 100:.0f}%% of the sentences say card numbers, "
        "expiry dates, security codes, phone and social security numbers or e-mail "
        "addresses (tools/demo_model/pii_texts.py), so redaction has them to find",
    )
    p.add_argument("--itn-share", type=float, default=0.5)
    p.add_argument("--until", type=int, help="train: stop at this step (schedule: --steps)")
    p.add_argument("--out", type=Path, default=Path("models/demo"))
    p.add_argument(
        "--from",
        dest="warm_from",
        type=Path,
        help="train: when the work dir has no checkpoint, begin from this packaged demo "
        "model (models/demo) and its training log, so a run continues on a new machine",
    )
    return p


def _record_command(work: Path, argv: list[str]) -> None:
    """Every invocation, so the packaged model can say exactly how it was made."""
    work.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    line = " ".join(["python scripts/train_demo_model.py", *map(shlex.quote, argv)])
    with (work / "commands.log").open("a", encoding="utf-8") as log:
        log.write(f"{stamp} {line}\n")


def tokenizer(work: Path, base: Path | None = None) -> bytes:
    """The run's tokenizer: the `base` model's (a warm start) or one trained on the
    sentences, with a piece for every character the PII sentences need."""
    path = work / "tokenizer.bpe.model"
    if not path.exists():
        work.mkdir(parents=True, exist_ok=True)
        trained = (
            dataset.train_tokenizer() if base is None else (base / BPE_MODEL_NAME).read_bytes()
        )
        path.write_bytes(trained)
    extended = dataset.extend_tokenizer(path.read_bytes(), pii_texts.CHARACTERS)
    if extended != path.read_bytes():
        path.write_bytes(extended)
    return extended


def eval_sets(work: Path) -> dict[str, list[evaluate.EvalItem]]:
    path = work / "eval-sets.pkl"
    if not path.exists():
        evaluate.save_sets(path, evaluate.eval_sets())
    return evaluate.load_sets(path)


def carry_log(model_dir: Path, work: Path) -> None:
    """The packaged model's training log and commands, so the new run's log is whole."""
    for name in ("train.jsonl", "commands.log"):
        earlier = (model_dir / name).read_text(encoding="utf-8")
        here = work / name
        later = here.read_text(encoding="utf-8") if here.exists() else ""
        if not later.startswith(earlier):
            here.write_text(earlier + later, encoding="utf-8")


def train(args: argparse.Namespace) -> Trainer:
    config = TrainConfig(
        steps=args.steps,
        batch=args.batch,
        lr=args.lr,
        threads=args.threads,
        seed=args.seed,
        specaug=args.specaug,
        itn_share=args.itn_share,
    )
    tok = tokenizer(args.work, args.warm_from)
    trainer = Trainer(args.work, config, live=live_ids(tok))
    if args.warm_from is not None and trainer.warm_start(args.warm_from):
        carry_log(args.warm_from, args.work)
    data = "shards-clean" if args.clean else "shards"
    examples = list(dataset.all_examples(args.work / data))
    sets = eval_sets(args.work)
    print(json.dumps({"examples": len(examples), "resume_at": trainer.step}), flush=True)
    trainer.run(
        examples, lambda step: evaluate.evaluate(trainer.model, tok, sets), data, args.until
    )
    return trainer


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.step != "package":
        try:
            voices.check_engines()
        except voices.MissingSpeechEngine as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
    _record_command(args.work, sys.argv[1:] if argv is None else list(argv))
    if args.step in ("data", "all"):
        tok = tokenizer(args.work, args.warm_from)
        folder = args.work / ("shards-clean" if args.clean else "shards")
        mix = dataset.Mix(
            wide=dataset.WIDE_SHARE if args.wide else 0.0,
            pii=dataset.PII_SHARE if args.pii else 0.0,
        )
        dataset.build(
            folder, args.utterances, args.seed, tok, args.workers, clean=args.clean, mix=mix
        )
        eval_sets(args.work)
    trainer = None
    if args.step in ("train", "all"):
        trainer = train(args)
    if args.step in ("evaluate", "all"):
        trainer = trainer or Trainer(args.work, TrainConfig(threads=args.threads))
        report = evaluate.evaluate(trainer.model, tokenizer(args.work), eval_sets(args.work))
        (args.work / "eval.json").write_text(json.dumps(report, indent=1))
        print(json.dumps(report, indent=1))
    if args.step in ("package", "all"):
        from tools.demo_model.package import package

        package(args.work, args.out)
    return 0
