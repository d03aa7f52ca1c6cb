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
from typing import Any

from engine.model.random_weights import BPE_MODEL_NAME
from server.config import cache_home
from tools.demo_model import augment, dataset, evaluate, open_texts, pii_texts, voices
from tools.demo_model.loss import DISTILL_WHERE, live_ids
from tools.demo_model.training import TrainConfig, Trainer

#: Where `data --replay` puts its template and PII shards, drawn with a seed of their own.
REPLAY = "shards-replay"
REPLAY_SEED = 1000


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
    p.add_argument(
        "--open",
        action="store_true",
        help=f"data: {dataset.OPEN_SHARE * 100:.0f}%% of the sentences from the open "
        "vocabulary (tools/demo_model/open_texts.py: English words, names, streets, numbers "
        "read every way, e-mail addresses, spelled letters)",
    )
    p.add_argument(
        "--pieces",
        type=int,
        default=0,
        help="data, when the work dir has no tokenizer yet: add the pieces of a BPE model "
        "of this many pieces learned on open-vocabulary text, so new words take fewer "
        "tokens than letters (a token needs a 60 ms frame)",
    )
    p.add_argument(
        "--replay",
        type=int,
        default=0,
        help="data: also build this many utterances of template and PII sentences alone in "
        "shards-replay/, which train mixes in, so that new vocabulary does not push out "
        "what the model knew (a warm start's held-out WER)",
    )
    p.add_argument(
        "--music-share",
        type=float,
        default=augment.MUSIC_SHARE,
        help="data: the share of utterances over background music (tagged BGM)",
    )
    p.add_argument("--itn-share", type=float, default=0.5)
    p.add_argument("--until", type=int, help="train: stop at this step (schedule: --steps)")
    p.add_argument("--out", type=Path, default=Path("models/demo"))
    p.add_argument(
        "--against",
        type=Path,
        help="evaluate: also measure this packaged model (the shipped models/demo) on the "
        "same sets; package then refuses a model worse than it on the shipped sets",
    )
    p.add_argument(
        "--force", action="store_true", help="package even a model worse than --against's"
    )
    p.add_argument(
        "--teacher",
        type=Path,
        help="train: keep the model's frame posteriors near this packaged model's (learning "
        "without forgetting; it must have the run's tokenizer), weighted by --distill",
    )
    p.add_argument("--distill", type=float, default=1.0, help="train: the teacher's weight")
    p.add_argument(
        "--distill-where",
        choices=DISTILL_WHERE,
        default="all",
        help="train: keep the teacher's posteriors on every utterance, or only where its "
        "greedy decode is already the target (what it gets wrong stays free to learn)",
    )
    p.add_argument(
        "--freeze",
        type=int,
        default=0,
        help="train: keep the first N encoder blocks (from the input) as they are",
    )
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


def tokenizer(work: Path, base: Path | None = None, pieces: int = 0) -> bytes:
    """The run's tokenizer: the `base` model's (a warm start) or one trained on the
    sentences, with `pieces` learned on open-vocabulary text added when it is made, and a
    piece for every character the PII sentences need."""
    path = work / "tokenizer.bpe.model"
    if not path.exists():
        work.mkdir(parents=True, exist_ok=True)
        trained = (
            dataset.train_tokenizer() if base is None else (base / BPE_MODEL_NAME).read_bytes()
        )
        if pieces:
            trained = dataset.extend_pieces(
                trained, open_texts.tokenizer_lines(), pieces, dataset.trained_text()
            )
        path.write_bytes(trained)
    extended = dataset.extend_tokenizer(path.read_bytes(), pii_texts.CHARACTERS)
    if extended != path.read_bytes():
        path.write_bytes(extended)
    return extended


def eval_sets(work: Path) -> dict[str, list[evaluate.EvalItem]]:
    """The run's evaluation sets (`evaluate.gate_sets`), made once and kept in the work dir.

    A new file name, since older work dirs keep the smaller sets as eval-sets.pkl."""
    path = work / "gate-sets.pkl"
    if not path.exists():
        evaluate.save_sets(path, evaluate.gate_sets())
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
        distill=args.distill if args.teacher is not None else 0.0,
        distill_where=args.distill_where,
        frozen_blocks=args.freeze,
    )
    tok = tokenizer(args.work, args.warm_from)
    teacher = None if args.teacher is None else load_teacher(args.teacher, tok, args.specaug)
    trainer = Trainer(args.work, config, live=live_ids(tok), teacher=teacher)
    if args.warm_from is not None and trainer.warm_start(args.warm_from):
        carry_log(args.warm_from, args.work)
    examples, data, dropped = training_examples(args.work, args.clean, tok)
    sets = eval_sets(args.work)
    print(
        json.dumps({"examples": len(examples), "dropped_held": dropped, "resume_at": trainer.step}),
        flush=True,
    )
    trainer.run(
        examples, lambda step: evaluate.evaluate(trainer.model, tok, sets), data, args.until
    )
    return trainer


class UnfitTeacher(Exception):
    """A teacher that cannot guide this run."""


def load_teacher(model_dir: Path, tok: bytes, specaug: bool) -> Any:
    """The packaged model at `model_dir`, whose tokenizer must be the run's (its output
    rows are then the same pieces), for a run without SpecAugment (both hear the same)."""
    if specaug:
        raise UnfitTeacher("a teacher hears the audio unmasked: train without --specaug")
    if (model_dir / BPE_MODEL_NAME).read_bytes() != tok:
        raise UnfitTeacher(f"{model_dir}'s tokenizer is not the run's; a teacher needs the same")
    return evaluate.load_packaged(model_dir)[0]


def training_examples(
    work: Path, clean: bool, tok: bytes
) -> tuple[list[dataset.Example], str, int]:
    """What `train` trains on: the shards (the easy set's with `clean`) and any replay
    shards, less examples saying a held value; their name, and how many were dropped."""
    folders = [work / ("shards-clean" if clean else "shards")]
    if not clean and dataset.shard_paths(work / REPLAY):
        folders.append(work / REPLAY)
    built = [e for folder in folders for e in dataset.all_examples(folder)]
    examples = dataset.without_held(built, tok)
    # A new name starts a new epoch when replay shards join a run.
    return examples, "+".join(f.name for f in folders), len(built) - len(examples)


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
        tok = tokenizer(args.work, args.warm_from, args.pieces)
        folder = args.work / ("shards-clean" if args.clean else "shards")
        mix = dataset.Mix(
            wide=dataset.WIDE_SHARE if args.wide else 0.0,
            pii=dataset.PII_SHARE if args.pii else 0.0,
            open=dataset.OPEN_SHARE if args.open else 0.0,
            music=args.music_share,
        )
        dataset.build(
            folder, args.utterances, args.seed, tok, args.workers, clean=args.clean, mix=mix
        )
        if args.replay:
            replay = dataset.Mix(pii=mix.pii, music=mix.music)
            seed = args.seed + REPLAY_SEED
            dataset.build(args.work / REPLAY, args.replay, seed, tok, args.workers, mix=replay)
        eval_sets(args.work)
    trainer = None
    if args.step in ("train", "all"):
        try:
            trainer = train(args)
        except UnfitTeacher as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
    if args.step in ("evaluate", "all"):
        trainer = trainer or Trainer(args.work, TrainConfig(threads=args.threads))
        run_evaluation(args.work, trainer.model, args.against)
    if args.step in ("package", "all"):
        worse = _worse(args.work)
        if worse and not args.force:
            print(f"error: worse than the model measured beside it: {'; '.join(worse)}",
                  file=sys.stderr)  # fmt: skip
            return 3
        from tools.demo_model.package import package

        package(args.work, args.out)
    return 0


def run_evaluation(work: Path, model: Any, against: Path | None) -> None:
    """eval.json: the run's model on the sets; with `against`, eval-against.json: that
    packaged model on the same sets, measured in the same run."""
    sets = eval_sets(work)
    report = evaluate.evaluate(model, tokenizer(work), sets)
    (work / "eval.json").write_text(json.dumps(report, indent=1))
    print(json.dumps(report, indent=1))
    if against is not None:
        shipped = evaluate.evaluate(*evaluate.load_packaged(against), sets)
        shipped["model"] = str(against)
        (work / "eval-against.json").write_text(json.dumps(shipped, indent=1))
        worse = evaluate.worse_than(report, shipped)
        print(json.dumps({"against": str(against), "worse": worse}, indent=1))


def _worse(work: Path) -> list[str]:
    """How the run's model did worse than the one measured beside it (none measured: [])."""
    against, own = work / "eval-against.json", work / "eval.json"
    if not against.exists() or not own.exists():
        return []
    return evaluate.worse_than(json.loads(own.read_text()), json.loads(against.read_text()))
