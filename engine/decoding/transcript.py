"""Turn per-frame CTC argmax ids into a timed, tagged Transcript."""

from __future__ import annotations

import numpy.typing as npt

from engine.decoding.confidence import Scores
from engine.decoding.ctc import CtcTokens, greedy_collapse
from engine.decoding.rich_text import render_rich_text
from engine.model.tags import TagKind, TagTable
from engine.model.tokenizer import WORD_BOUNDARY, Tokenizer
from engine.types import FRAME_MS, Token, Transcript

#: Encoder frames taken by the four prompts (language, event, emotion, text norm) before speech.
PROMPT_FRAMES = 4


def decode_transcript(
    frame_ids: npt.ArrayLike,
    tokenizer: Tokenizer,
    tags: TagTable,
    duration_ms: int,
    requested_itn: bool,
) -> Transcript:
    """Greedy-decode one utterance's frame ids into text, tags, timed tokens and rich text."""
    return transcript_of(greedy_collapse(frame_ids), tokenizer, tags, duration_ms, requested_itn)


def transcript_of(
    ctc: CtcTokens,
    tokenizer: Tokenizer,
    tags: TagTable,
    duration_ms: int,
    requested_itn: bool,
    *,
    scores: Scores | None = None,
) -> Transcript:
    """Decoded tokens (greedy or searched) as text, tags, timed tokens and rich text; with
    `scores`, each token's log-probability and the chance of no speech."""
    if duration_ms < 0:
        raise ValueError(f"duration_ms must be >= 0; got {duration_ms}")
    summary = tags.summarise(ctc.ids, requested_itn)
    text_ids = [token_id for token_id in ctc.ids if not tags.is_tag(token_id)]
    rich_ids = [token_id for token_id in ctc.ids if tags.kind(token_id) is not TagKind.OTHER]
    return Transcript(
        text=tokenizer.decode(text_ids).strip(),
        lang=summary.lang,
        emotion=summary.emotion,
        event=summary.event,
        itn=summary.itn,
        # The tagged string as funasr's model would hand it to its postprocessor, less
        # reserved tags that funasr would print verbatim.
        rich_text=render_rich_text(tokenizer.decode(rich_ids)),
        tokens=timed_tokens(ctc, tokenizer, tags, duration_ms, scores),
        no_speech_prob=None if scores is None else scores.no_speech_prob,
    )


def timed_tokens(
    ctc: CtcTokens,
    tokenizer: Tokenizer,
    tags: TagTable,
    duration_ms: int,
    scores: Scores | None = None,
) -> tuple[Token, ...]:
    """Text tokens (no tags, no control pieces) with their spans on the utterance clock."""
    tokens: list[Token] = []
    logprobs = scores.logprobs if scores is not None else (None,) * len(ctc.ids)
    spans = zip(ctc.ids, ctc.first_frame, ctc.last_frame, logprobs, strict=True)
    for token_id, first, last, logprob in spans:
        if tags.is_tag(token_id) or tokenizer.is_control(token_id):
            continue
        tokens.append(
            Token(
                id=token_id,
                text=tokenizer.piece(token_id).replace(WORD_BOUNDARY, " "),
                start_ms=frame_to_ms(first, duration_ms),
                # A run's end is the end of its last frame.
                end_ms=frame_to_ms(last + 1, duration_ms),
                logprob=logprob,
            )
        )
    return tuple(tokens)


def frame_to_ms(frame: int, duration_ms: int) -> int:
    """Start time of an encoder frame on the speech clock, clamped into [0, duration_ms]."""
    # Clamped because prompt frames lie before speech and the last frame may overrun the audio.
    return min(max((frame - PROMPT_FRAMES) * FRAME_MS, 0), duration_ms)
