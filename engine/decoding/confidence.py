"""How sure the model is: each token's log-posterior from the frames it was emitted on,
and the chance that an utterance holds no speech, from the scored graph's candidates."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from engine.backends.base import ScoredFrames
from engine.decoding.ctc import CtcTokens


@dataclass(frozen=True, slots=True)
class Scores:
    """One decode's confidence: a log-probability per CTC token (tags included, in the
    order of its `CtcTokens`) and the chance that the audio held no speech."""

    logprobs: tuple[float, ...]
    no_speech_prob: float


def scores_of(ctc: CtcTokens, frames: ScoredFrames, nospeech_id: int | None) -> Scores:
    """The `Scores` of tokens decoded from `frames`."""
    return Scores(token_logprobs(ctc, frames), no_speech_prob(frames, nospeech_id))


#: The frame whose prompt the model answers with the language (or `<|nospeech|>`).
LANGUAGE_FRAME = 0


def token_logprobs(ctc: CtcTokens, frames: ScoredFrames) -> tuple[float, ...]:
    """Each token's mean log-posterior over the frames of its run (its geometric-mean
    frame posterior), one per `ctc` token.

    Posteriors are renormalised over each frame's K candidates. A token that a biased
    search took from outside a frame's K gets that frame's K-th value, an upper bound.
    """
    ids, values = frames.topk_ids, frames.topk_logprobs
    out: list[float] = []
    for token, first, last in zip(ctc.ids, ctc.first_frame, ctc.last_frame, strict=True):
        span = slice(first, last + 1)
        hit = ids[span] == token
        # Each frame's value for the token, or its K-th (worst) candidate's when absent.
        at = hit.argmax(axis=1)
        found = values[span][np.arange(at.size), at]
        chosen = np.where(hit.any(axis=1), found, values[span][:, -1])
        out.append(float(chosen.mean()))
    return tuple(out)


def no_speech_prob(frames: ScoredFrames, nospeech_id: int | None) -> float:
    """The posterior of `<|nospeech|>` on the language frame (0 when it is not among the
    frame's candidates, or the model has no such tag)."""
    if nospeech_id is None or frames.topk_ids.shape[0] <= LANGUAGE_FRAME:
        return 0.0
    row = frames.topk_ids[LANGUAGE_FRAME] == nospeech_id
    if not row.any():
        return 0.0
    return math.exp(float(frames.topk_logprobs[LANGUAGE_FRAME][row][0]))
