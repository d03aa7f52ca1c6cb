"""Prompt-embedding indices for SenseVoiceSmall's language and text-normalisation queries."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType

import numpy as np

from engine.types import DecodeOptions

# Rows of the model's prompt-embedding table, fixed by the published architecture
# (funasr's SenseVoiceSmall.lid_dict and textnorm_dict).
LANGUAGE_INDEX: Mapping[str, int] = MappingProxyType(
    {"auto": 0, "zh": 3, "en": 4, "yue": 7, "ja": 11, "ko": 12, "nospeech": 13}
)
WITH_ITN_INDEX = 14
WITHOUT_ITN_INDEX = 15

#: Prompt frames the encoder sees before the speech: language, event, emotion, text-norm.
PROMPT_FRAMES = 4


def prompt_arrays(options: Sequence[DecodeOptions]) -> tuple[np.ndarray, np.ndarray]:
    """Per-item language and text-norm indices as int32 arrays."""
    language = np.fromiter((LANGUAGE_INDEX[o.language] for o in options), np.int32, len(options))
    textnorm = np.fromiter(
        (WITH_ITN_INDEX if o.itn else WITHOUT_ITN_INDEX for o in options), np.int32, len(options)
    )
    return language, textnorm
