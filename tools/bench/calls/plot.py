"""The comparison plot: both arms' latency at each load level, side by side."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tools.bench.calls.load import MONO, STEREO
from tools.bench.capacity.config import Criteria
from tools.bench.common.plot import panels

PANELS = (
    (
        "final after the VAD's end-silence",
        (("final_after_vad_ms", "p50"), ("final_after_vad_ms", "p95")),
    ),
    ("partials", (("first_partial_ms", "p95"), ("partial_interval_ms", "p95"))),
)


def plot(levels: Sequence[dict[str, Any]], criteria: Criteria, out: Path) -> None:
    """Grouped bars per level: stereo calls solid, the same load as mono streams hatched."""
    names = [f"{lv['calls']} calls / {lv['channels']} mono" for lv in levels]
    width = 0.2
    bounds = (criteria.max_final_latency_ms, criteria.max_partial_interval_ms)
    with panels(out) as axes:
        for ax, (title, figures), bound in zip(axes, PANELS, bounds, strict=True):
            slot = 0
            for field, stat in figures:
                for arm, hatch in ((STEREO, ""), (MONO, "//")):
                    xs = [i + (slot - 1.5) * width for i in range(len(levels))]
                    ys = [lv[arm][field][stat] or 0 for lv in levels]
                    label = f"{arm} {field.removesuffix('_ms')} {stat}"
                    ax.bar(xs, ys, width, hatch=hatch, label=label, color=f"C{slot // 2}")
                    slot += 1
            ax.axhline(bound, color="grey", linewidth=0.8)
            ax.set_xticks(range(len(levels)), names)
            ax.set(ylabel="ms", title=title)
            ax.grid(alpha=0.3, axis="y")
            ax.legend(fontsize=7)
