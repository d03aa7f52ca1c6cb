"""Greedy CTC collapse of per-frame argmax ids, keeping each token's frame span."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt


@dataclass(frozen=True, slots=True)
class CtcTokens:
    """Emitted token ids with the first and last encoder frame of each token's run."""

    ids: tuple[int, ...]
    first_frame: tuple[int, ...]
    last_frame: tuple[int, ...]


EMPTY_CTC_TOKENS = CtcTokens(ids=(), first_frame=(), last_frame=())


def greedy_collapse(frame_ids: npt.ArrayLike, blank_id: int = 0) -> CtcTokens:
    """Collapse runs of equal ids and drop blanks, recording each kept run's frame span."""
    ids = np.asarray(frame_ids)
    if ids.ndim != 1:
        raise ValueError(f"frame_ids must be one-dimensional; got shape {ids.shape}")
    if ids.size == 0:
        return EMPTY_CTC_TOKENS
    if not np.issubdtype(ids.dtype, np.integer):
        raise ValueError(f"frame_ids must hold integers; got dtype {ids.dtype}")
    # A run starts wherever the id differs from the previous frame's id.
    is_start = np.empty(ids.size, dtype=bool)
    is_start[0] = True
    np.not_equal(ids[1:], ids[:-1], out=is_start[1:])
    starts = np.flatnonzero(is_start)
    ends = np.append(starts[1:] - 1, ids.size - 1)
    run_ids = ids[starts]
    keep = run_ids != blank_id
    return CtcTokens(
        ids=tuple(int(i) for i in run_ids[keep].tolist()),
        first_frame=tuple(int(f) for f in starts[keep].tolist()),
        last_frame=tuple(int(f) for f in ends[keep].tolist()),
    )
