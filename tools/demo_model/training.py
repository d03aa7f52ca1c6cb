"""Fit funasr's SenseVoiceSmall (a small encoder) on the shards; checkpoint often, resume.

The loss is funasr's own `SenseVoiceSmall.forward`: cross-entropy on the four tag frames
and CTC on the frames after them, with about 20 % of language prompts replaced by `auto`
inside funasr. SpecAugment (SpecAugLFR, the real config's) is off by default: at this
budget it halved how fast the model learned (memorising 64 clean utterances: CTC loss 26
after 150 steps with it, 15 without), and the audio is already roughened.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from engine.model.directory import DEMO_MODEL_MARKER
from engine.model.network import _sensevoice_class
from tools.demo_model.dataset import Example
from tools.demo_model.loss import LiveVocabLoss, revive_rows

VOCAB_SIZE = 25055
FEATURE_DIM = 560
#: The demo encoder: the real architecture (SANM blocks, FSMN memory), smaller.
ENCODER_CONF: dict[str, Any] = {
    "output_size": 192,
    "attention_heads": 4,
    "linear_units": 768,
    "num_blocks": 6,
    "tp_blocks": 1,
    "dropout_rate": 0.1,
    "positional_dropout_rate": 0.1,
    "attention_dropout_rate": 0.1,
    "input_layer": "pe",
    "pos_enc_class": "SinusoidalPositionEncoder",
    "normalize_before": True,
    "kernel_size": 11,
    "sanm_shfit": 0,
    "selfattention_layer_type": "sanm",
}
SPECAUG_CONF: dict[str, Any] = {
    "apply_time_warp": False,
    "time_warp_window": 5,
    "time_warp_mode": "bicubic",
    "apply_freq_mask": True,
    "freq_mask_width_range": [0, 30],
    "lfr_rate": 6,
    "num_freq_mask": 1,
    "apply_time_mask": True,
    "time_mask_width_range": [0, 12],
    "num_time_mask": 1,
}


@dataclass(frozen=True, slots=True)
class TrainConfig:
    steps: int = 3000
    batch: int = 32
    lr: float = 1e-3
    warmup: int = 300
    decay_from: float = 0.8  # share of `steps` after which the rate falls linearly to 10 %
    itn_share: float = 0.5  # targets with ITN (written form); the rest spoken
    specaug: bool = False
    checkpoint_every: int = 50
    threads: int = 2
    seed: int = 1
    distill: float = 0.0  # weight of the KL term to a teacher's posteriors, when one is given
    distill_where: str = "all"  # which utterances it weighs: loss.DISTILL_WHERE
    frozen_blocks: int = 0  # encoder blocks, from the input, that the run does not train


def build_model(
    encoder_conf: dict[str, Any] | None = None, specaug: bool = False
) -> torch.nn.Module:
    """The demo model for training: small encoder, SpecAugment when asked."""
    return _sensevoice_class()(  # type: ignore[no-any-return]
        specaug="SpecAugLFR" if specaug else None,
        specaug_conf=SPECAUG_CONF,
        encoder="SenseVoiceEncoderSmall",
        encoder_conf=encoder_conf or ENCODER_CONF,
        input_size=FEATURE_DIM,
        vocab_size=VOCAB_SIZE,
        length_normalized_loss=True,
        ignore_id=-1,
    )


def freeze_blocks(model: torch.nn.Module, count: int) -> None:
    """Keep the first `count` encoder blocks, counted from the input, as they are: a
    fine-tune on new sentences then moves only the upper blocks and the output layer."""
    encoder: Any = model.encoder
    blocks = [*encoder.encoders0, *encoder.encoders, *encoder.tp_encoders]
    if not 0 <= count <= len(blocks):
        raise ValueError(f"frozen blocks: 0 to {len(blocks)}, not {count}")
    for block in blocks[:count]:
        block.requires_grad_(False)


def learning_rate(step: int, config: TrainConfig, fresh_at: int = 0) -> float:
    """Warm up (from `fresh_at`, where the optimizer's state began), hold, then fall
    linearly to a tenth over the last part."""
    ramp = min(1.0, (step - fresh_at + 1) / config.warmup)
    decay_start = int(config.steps * config.decay_from)
    if step < decay_start:
        return config.lr * ramp
    left = max(1, config.steps - decay_start)
    return config.lr * ramp * (1 - 0.9 * min(1.0, (step - decay_start) / left))


def batches(examples: Sequence[Example], config: TrainConfig, epoch: int) -> Iterator[list[int]]:
    """Index batches of similar length: shuffled, sorted within pools, batches shuffled."""
    rng = random.Random(config.seed * 7919 + epoch)
    order = list(range(len(examples)))
    rng.shuffle(order)
    pool = config.batch * 32
    out = []
    for start in range(0, len(order), pool):
        chunk = sorted(order[start : start + pool], key=lambda i: len(examples[i].feats))
        out += [chunk[i : i + config.batch] for i in range(0, len(chunk), config.batch)]
    rng.shuffle(out)
    yield from out


def collate(
    examples: Sequence[Example], rng: random.Random, itn_share: float
) -> tuple[torch.Tensor, ...]:
    """Padded features and targets (-1 pads the targets)."""
    frames = max(len(e.feats) for e in examples)
    speech = np.zeros((len(examples), frames, FEATURE_DIM), np.float32)
    targets = [e.written if rng.random() < itn_share else e.spoken for e in examples]
    text = np.full((len(examples), max(map(len, targets))), -1, np.int64)
    for i, (e, t) in enumerate(zip(examples, targets, strict=True)):
        speech[i, : len(e.feats)] = e.feats
        text[i, : len(t)] = t
    return (
        torch.from_numpy(speech),
        torch.tensor([len(e.feats) for e in examples], dtype=torch.int32),
        torch.from_numpy(text),
        torch.tensor([len(t) for t in targets], dtype=torch.int32),
    )


class Trainer:
    """One training run in `work`: `ckpt.pt` to resume from, `train.jsonl` as its log.

    `live`: the output rows a target can hold (`loss.live_ids`); the loss is computed over
    them alone, which is about half the work of funasr's full-vocabulary forward.
    `teacher`: a model whose frame posteriors the loss keeps this one near, with weight
    `config.distill` (it needs `live`, and no SpecAugment, so both see the same audio).
    """

    def __init__(
        self,
        work: Path,
        config: TrainConfig,
        encoder_conf: dict[str, Any] | None = None,
        live: torch.Tensor | None = None,
        teacher: torch.nn.Module | None = None,
    ) -> None:
        if teacher is not None and (live is None or config.specaug):
            raise ValueError("a teacher needs the live-vocabulary loss and no SpecAugment")
        torch.set_num_threads(config.threads)
        self.work, self.config = work, config
        self.encoder_conf = encoder_conf or ENCODER_CONF
        self.model = build_model(self.encoder_conf, config.specaug)
        freeze_blocks(self.model, config.frozen_blocks)
        self.loss = (
            None
            if live is None
            else LiveVocabLoss(live, VOCAB_SIZE, teacher, config.distill, config.distill_where)
        )
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=config.lr, weight_decay=0.01)
        self.step, self.epoch, self.spent_s = 0, 0, 0.0
        self.fresh_at = 0  # the step the optimizer's state began at (a warm start's)
        # The step the current epoch began at, and the data it is an epoch of: a run can
        # move to other data (an easier set first), which starts a new epoch count.
        self.epoch_start: int | None = 0
        self.data = ""
        self._resume()

    def _resume(self) -> None:
        path = self.work / "ckpt.pt"
        if path.exists():
            state = torch.load(path, map_location="cpu", weights_only=False)
            self.model.load_state_dict(state["model"])
            self.optimizer.load_state_dict(state["optimizer"])
            self.step, self.epoch, self.spent_s = state["step"], state["epoch"], state["spent_s"]
            self.epoch_start, self.data = state.get("epoch_start"), state.get("data", "shards")
            self.fresh_at = state.get("fresh_at", 0)
            self._forget_log_after(self.step)

    def _forget_log_after(self, step: int) -> None:
        """Drop log lines of steps the checkpoint does not hold: a run killed between
        checkpoints trained them, and this run trains them again."""
        log = self.work / "train.jsonl"
        if log.exists():
            lines = log.read_text(encoding="utf-8").splitlines(keepends=True)
            kept = [line for line in lines if json.loads(line)["step"] <= step]
            if len(kept) < len(lines):
                log.write_text("".join(kept), encoding="utf-8")

    def warm_start(self, model_dir: Path) -> bool:
        """Begin from a packaged demo model's weights when this work dir has no run yet
        (its optimizer state is gone, so the rate warms up again). True if it did."""
        if self.step:
            return False
        weights = torch.load(model_dir / "model.pt", map_location="cpu", weights_only=True)
        state = {k: v.float() for k, v in weights.items()}
        if self.loss is not None:
            state = revive_rows(state, self.loss.live)
        self.model.load_state_dict(state)
        marker = json.loads((model_dir / DEMO_MODEL_MARKER).read_text())
        self.step = self.fresh_at = int(marker["steps"])
        self.spent_s = float(marker.get("training_cpu_s", 0.0))
        self.epoch, self.epoch_start, self.data = 0, self.step, ""
        return True

    def checkpoint(self) -> None:
        state = {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "step": self.step,
            "epoch": self.epoch,
            "spent_s": self.spent_s,
            "epoch_start": self.epoch_start,
            "data": self.data,
            "fresh_at": self.fresh_at,
            "config": asdict(self.config),
            "encoder_conf": self.encoder_conf,
        }
        partial = self.work / "ckpt.partial.pt"
        torch.save(state, partial)
        partial.replace(self.work / "ckpt.pt")

    def run(
        self,
        examples: Sequence[Example],
        evaluate: Callable[[int], dict[str, Any]],
        data: str = "shards",
        until: int | None = None,
    ) -> None:
        """Train on `examples` (named `data`) until step `until` (default: the schedule's
        end, `config.steps`), checkpointing; `evaluate(step)` every 500 steps."""
        end = self.config.steps if until is None else min(until, self.config.steps)
        rng = random.Random(self.config.seed + self.step)
        if self.epoch_start is None:  # a checkpoint from before epochs were tracked
            self.epoch_start = self.epoch * sum(1 for _ in batches(examples, self.config, 0))
        if data != self.data:
            self.data, self.epoch, self.epoch_start = data, 0, self.step
        while self.step < end:
            skip = self.step - self.epoch_start
            for number, indices in enumerate(batches(examples, self.config, self.epoch)):
                if number < skip:
                    continue  # already trained on in an earlier run of this epoch
                if self.step >= end:
                    break
                self._log(self._train_step([examples[i] for i in indices], rng))
                if self.step % self.config.checkpoint_every == 0:
                    self.checkpoint()
                if self.step % 500 == 0:
                    self._log({"step": self.step, "eval": evaluate(self.step)})
            else:
                self.epoch, self.epoch_start = self.epoch + 1, self.step
        self.checkpoint()

    def _train_step(self, examples: list[Example], rng: random.Random) -> dict[str, Any]:
        started = time.perf_counter()
        lr = learning_rate(self.step, self.config, self.fresh_at)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.model.train()
        speech, speech_lengths, text, text_lengths = collate(examples, rng, self.config.itn_share)
        if self.loss is None:
            # encode() adds the prompt frames to the lengths in place.
            loss, stats, _ = self.model(speech, speech_lengths.clone(), text, text_lengths)
        else:
            loss, stats = self.loss(self.model, speech, speech_lengths, text, text_lengths)
        self.optimizer.zero_grad()
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), 5.0)
        self.optimizer.step()
        self.step += 1
        self.spent_s += time.perf_counter() - started
        return {
            "step": self.step,
            "epoch": self.epoch,
            "lr": round(lr, 6),
            "loss": round(float(loss), 4),
            "loss_ctc": round(float(stats["loss_ctc"]), 4),
            "loss_rich": round(float(stats["loss_rich"]), 4),
            "acc_rich": round(float(stats["acc_rich"]), 4),
            **{key: round(stats[key], 4) for key in ("loss_distill", "distilled") if key in stats},
            "grad_norm": round(float(norm), 3),
            "spent_s": round(self.spent_s, 1),
        }

    def _log(self, record: dict[str, Any]) -> None:
        line = json.dumps(record)
        with (self.work / "train.jsonl").open("a", encoding="utf-8") as log:
            log.write(line + "\n")
        if "eval" in record or record["step"] % 10 == 0:
            print(line, flush=True)
