"""What start-up measured (batch curve, chosen batch, cost scale), kept for the next start.

Measuring the batch curve and the memory peak takes seconds on a CPU, and gives the same
answer on the same host for the same model, backend and settings. The key covers all of
those, plus the CPU model and flags and the runtime's version, so any change measures
again. A corrupt or unreadable entry is ignored and measured again, never trusted.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger("sensestream.engine")
FORMAT = 2  # 2: measured with the onnxruntime arena on (its memory peak and speed differ)


@dataclass(frozen=True, slots=True)
class Tuning:
    """The measured part of an engine build."""

    max_batch: int
    curve: tuple[dict[str, float], ...]
    cost_scale: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "max_batch": self.max_batch,
            "curve": list(self.curve),
            "cost_scale": self.cost_scale,
        }


def cpu_identity(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The CPU's model name and feature flags (int8 speed depends on VNNI and AVX-512)."""
    try:
        text = cpuinfo.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return platform.machine()
    fields: dict[str, str] = {}
    for line in text.splitlines():
        name, sep, value = line.partition(":")
        if sep and name.strip() in ("model name", "flags") and name.strip() not in fields:
            fields[name.strip()] = value.strip()
    return f"{fields.get('model name', platform.machine())} | {fields.get('flags', '')}"


def usable_cpus() -> int:
    """CPUs this process may run on (a container's cpuset or affinity, not the host's)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def tuning_key(facts: Mapping[str, Any]) -> str:
    """A stable digest of everything the measurement depends on."""
    blob = json.dumps(facts, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:32]


def weights_fact(path: Path) -> dict[str, Any]:
    """Identifies a weights file without reading it: a changed file measures again."""
    try:
        stat = path.stat()
    except OSError:
        return {"path": str(path)}
    return {"path": str(path.resolve()), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}


def load_tuning(folder: Path, key: str) -> Tuning | None:
    """The stored tuning for `key`, or None when absent or unreadable."""
    path = folder / f"{key}.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("format") != FORMAT:
            return None
        tuning = Tuning(
            max_batch=int(data["max_batch"]),
            curve=tuple(dict(point) for point in data["curve"]),
            cost_scale=float(data["cost_scale"]),
        )
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.warning("ignoring unreadable tuning cache %s: %s", path, exc)
        return None
    if tuning.max_batch < 1 or not tuning.cost_scale > 0:
        return None
    return tuning


def save_tuning(folder: Path, key: str, tuning: Tuning) -> None:
    """Store atomically; a read-only or full disk only costs the next start its seconds."""
    name: str | None = None
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=key, suffix=".tmp", dir=folder)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(tuning.to_dict(), out)
        Path(name).replace(folder / f"{key}.json")
    except OSError as exc:
        log.warning("could not store the tuning cache in %s: %s", folder, exc)
        if name is not None:
            Path(name).unlink(missing_ok=True)
