"""The result document: the machine it was measured on, and the JSON file it goes to."""

from __future__ import annotations

import json
import platform
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from engine.serving.tuning_cache import cpu_identity, usable_cpus

#: What `machine` can say, one definition each.
MACHINE_FIELDS: dict[str, Callable[[], Any]] = {
    "cpus": usable_cpus,  # the CPUs this process may run on (a container's, not the host's)
    "platform": platform.platform,
    "cpu": cpu_identity,  # model and flags: AVX-512/VNNI hosts run int8 3-4x faster
    "python": platform.python_version,
}


def machine(*fields: str) -> dict[str, Any]:
    """The named facts about this machine (of MACHINE_FIELDS), in the order asked."""
    return {name: MACHINE_FIELDS[name]() for name in fields}


def write_json(path: Path | None, document: Mapping[str, Any], *, indent: int = 1) -> str:
    """`document` as JSON text, written with a final newline to `path` (its folder made
    first) unless `path` is None; the text is returned for printing."""
    text = json.dumps(document, indent=indent, ensure_ascii=False)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n", encoding="utf-8")
    return text
