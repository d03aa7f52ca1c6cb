"""Plots to a PNG file with matplotlib, without a display."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def need_matplotlib(plot: Path | None) -> None:
    """Fail before the runs, not after them, when a plot is asked for and cannot be made."""
    if plot is not None:
        import matplotlib  # noqa: F401


@contextmanager
def panels(out: Path, count: int = 2, size: tuple[float, float] = (12, 4.5)) -> Iterator[Any]:
    """The axes of `count` plots side by side; the figure is saved to `out` when the block
    ends."""
    import matplotlib

    matplotlib.use("Agg")  # no display: the plot only goes to a file
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, count, figsize=size)
    try:
        yield axes
        fig.tight_layout()
        fig.savefig(out, dpi=120)
    finally:
        plt.close(fig)
