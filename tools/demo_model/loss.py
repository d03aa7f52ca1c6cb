"""SenseVoice's training loss over the pieces that can occur, not all 25,055.

The demo tokenizer has about 700 trained pieces; the rest of SenseVoice's vocabulary is
padding (fillers and other languages' tags) that no target ever holds. funasr's own
`SenseVoiceSmall.forward` projects every frame onto all 25,055 rows, which is most of a
training step's work at this encoder size. Here the output layer is sliced to the live
rows: the same CTC and tag cross-entropy as funasr's (sum over the batch / batch size;
tag loss per token), as if the dead rows' logits were minus infinity. `mask_dead_rows`
makes that true of the packaged weights, so decoding over the full vocabulary agrees.
"""

from __future__ import annotations

from typing import Any

import sentencepiece as spm
import torch
import torch.nn.functional as F

from engine.model.random_weights import FILLER_SCORE
from tools.demo_model.dataset import TAG_PIECES

#: The logit bias of a dead row in the packaged model: far below any live logit, and
#: representable in fp16.
DEAD_BIAS = -1.0e4


def live_ids(tokenizer: bytes) -> torch.Tensor:
    """Sorted ids a target can hold: the trained pieces (blank 0 among them) and the tags.

    `engine.model.random_weights.pad_tokenizer` puts the trained pieces first, then fillers scored
    at or below FILLER_SCORE (which no encoding picks), then SenseVoice's special range."""
    sp = spm.SentencePieceProcessor(model_proto=tokenizer)
    size = sp.get_piece_size()
    trained = next((i for i in range(size) if sp.get_score(i) <= FILLER_SCORE), size)
    tags = [sp.piece_to_id(piece) for piece in TAG_PIECES]
    return torch.tensor(sorted(set(range(trained)) | set(tags)), dtype=torch.long)


#: Where a teacher's posteriors are kept: on every utterance, or only on those whose
#: target the teacher already decodes (greedy), so that what it gets wrong is free to learn.
DISTILL_WHERE = ("all", "right")


class LiveVocabLoss:
    """CTC + tag cross-entropy with the output layer restricted to `live` rows; with a
    `teacher`, plus `distill` times the KL divergence of the model's frame posteriors from
    the teacher's (learning without forgetting: a fine-tune kept near the model it began
    from wherever its new targets do not pull it away), over the utterances `where` says."""

    def __init__(
        self,
        live: torch.Tensor,
        vocab_size: int,
        teacher: torch.nn.Module | None = None,
        distill: float = 0.0,
        where: str = "all",
    ) -> None:
        if where not in DISTILL_WHERE:
            raise ValueError(f"distill where: one of {DISTILL_WHERE}, not {where!r}")
        self.live = live
        index = torch.full((vocab_size,), -1, dtype=torch.long)
        index[live] = torch.arange(len(live))
        self._index = index
        # funasr's model, typed as loosely as the `model` each call is given.
        self.teacher: Any = None if teacher is None else teacher.eval().requires_grad_(False)
        self.distill = distill
        self.where = where

    def __call__(
        self,
        model: Any,
        speech: torch.Tensor,
        speech_lengths: torch.Tensor,
        text: torch.Tensor,
        text_lengths: torch.Tensor,
    ) -> tuple[torch.Tensor, dict[str, float]]:
        # encode() draws which language prompts become `auto`: the teacher draws the same.
        prompts = torch.get_rng_state()
        # encode() adds the four prompt frames to the lengths in place.
        out, out_lens = model.encode(speech, speech_lengths.clone(), text)
        linear = model.ctc.ctc_lo
        weight, bias = linear.weight[self.live], linear.bias[self.live]
        targets = self._local(text)
        hidden = F.dropout(out[:, 4:], p=model.ctc.dropout_rate, training=model.training)
        logits = F.linear(hidden, weight, bias)
        ctc = self._ctc(logits, out_lens - 4, targets[:, 4:], text_lengths - 4)
        tag_logits = F.linear(out[:, :4], weight, bias)
        rich = F.cross_entropy(tag_logits.reshape(-1, len(self.live)), targets[:, :4].reshape(-1))
        accuracy = (tag_logits.argmax(-1) == targets[:, :4]).float().mean()
        stats = {"loss_ctc": ctc.item(), "loss_rich": rich.item(), "acc_rich": accuracy.item()}
        if self.teacher is None:
            return ctc + rich, stats
        wanted, lengths = self._teacher_posteriors(prompts, (speech, speech_lengths, text))
        kept = self._kept(wanted, lengths, targets[:, 4:])
        distill = (self._divergence(wanted, lengths, logits) * kept).sum() / logits.size(0)
        stats["loss_distill"] = distill.item()
        stats["distilled"] = float(kept.mean())
        return ctc + rich + self.distill * distill, stats

    def _teacher_posteriors(
        self, prompts: torch.Tensor, batch: tuple[torch.Tensor, torch.Tensor, torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The teacher's log posteriors over the live rows for the text frames, and their
        counts, from the same `auto` prompt draws as the model's (`prompts`, the RNG state)."""
        speech, speech_lengths, text = batch
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            torch.set_rng_state(prompts)
            out, out_lens = self.teacher.encode(speech, speech_lengths.clone(), text)
            linear = self.teacher.ctc.ctc_lo
            wanted = F.linear(out[:, 4:], linear.weight[self.live], linear.bias[self.live])
        return wanted.log_softmax(-1), out_lens - 4

    @staticmethod
    def _divergence(
        wanted: torch.Tensor, lengths: torch.Tensor, logits: torch.Tensor
    ) -> torch.Tensor:
        """KL(teacher || model) over the live rows, summed over each utterance's frames."""
        per_frame = (wanted.exp() * (wanted - logits.log_softmax(-1))).sum(-1)
        frames = torch.arange(per_frame.size(1))[None] < lengths[:, None]
        summed: torch.Tensor = (per_frame * frames).sum(-1)
        return summed

    def _kept(
        self, wanted: torch.Tensor, lengths: torch.Tensor, targets: torch.Tensor
    ) -> torch.Tensor:
        """1 for each utterance the teacher's posteriors are kept on, else 0 (`targets`:
        the text pieces as live rows, -1 padded)."""
        if self.where == "all":
            return torch.ones(len(wanted))
        best = wanted.argmax(-1)
        right = []
        for i, n in enumerate(lengths.tolist()):
            path = torch.unique_consecutive(best[i, :n])
            said = path[path != 0]  # the blank is live row 0
            right.append(torch.equal(said, targets[i][targets[i] >= 0]))
        return torch.tensor(right, dtype=torch.float32)

    def _local(self, text: torch.Tensor) -> torch.Tensor:
        mapped = torch.where(text >= 0, self._index[text.clamp(min=0)], text)
        if bool(((text >= 0) & (mapped < 0)).any()):
            raise ValueError("a target holds a piece outside the live vocabulary")
        return mapped

    @staticmethod
    def _ctc(
        logits: torch.Tensor, lengths: torch.Tensor, targets: torch.Tensor, counts: torch.Tensor
    ) -> torch.Tensor:
        """funasr's CTC: summed over the batch, divided by its size."""
        log_probs = logits.log_softmax(-1).transpose(0, 1)
        flat = torch.cat([targets[i, :n] for i, n in enumerate(counts.tolist())])
        loss = F.ctc_loss(log_probs, flat, lengths, counts, reduction="none")
        return loss.sum() / logits.size(0)


def mask_dead_rows(state: dict[str, torch.Tensor], live: torch.Tensor) -> dict[str, torch.Tensor]:
    """The state with every output row outside `live` unable to win: weight 0, bias low."""
    weight, bias = state["ctc.ctc_lo.weight"].clone(), state["ctc.ctc_lo.bias"].clone()
    dead = torch.ones(len(bias), dtype=torch.bool)
    dead[live] = False
    weight[dead], bias[dead] = 0.0, DEAD_BIAS
    return {**state, "ctc.ctc_lo.weight": weight, "ctc.ctc_lo.bias": bias}


def revive_rows(state: dict[str, torch.Tensor], live: torch.Tensor) -> dict[str, torch.Tensor]:
    """The state with the `live` output rows that a packaged model masked as dead (pieces
    added to the tokenizer since) set like the trained rows, so that they can learn: from
    a bias of DEAD_BIAS no gradient would bring them back in any number of steps."""
    weight, bias = state["ctc.ctc_lo.weight"].clone(), state["ctc.ctc_lo.bias"].clone()
    dead = bias[live] <= DEAD_BIAS / 2
    rows, trained = live[dead], live[~dead]
    if len(rows) == 0 or len(trained) == 0:
        return state
    generator = torch.Generator().manual_seed(len(rows))
    noise = torch.randn(len(rows), weight.size(1), generator=generator)
    weight[rows] = noise * weight[trained].std()
    bias[rows] = bias[trained].mean()
    return {**state, "ctc.ctc_lo.weight": weight, "ctc.ctc_lo.bias": bias}
