"""Device lists: `cpu`, `cuda`, `cuda:N`, or several GPUs as `cuda:0,cuda:1`."""

from __future__ import annotations

import re

_DEVICE = re.compile(r"cpu|cuda(?::[0-9]+)?")


def parse_devices(text: str) -> tuple[str, ...]:
    """Split and check a device list; each GPU gets its own executor and budget."""
    devices = tuple(part.strip() for part in text.split(","))
    bad = [d for d in devices if not _DEVICE.fullmatch(d)]
    if bad or not devices:
        raise ValueError(
            f"device must be cpu, cuda, cuda:N or a list like cuda:0,cuda:1; got {text!r}"
        )
    canonical = tuple("cuda:0" if d == "cuda" else d for d in devices)
    if len(set(canonical)) != len(canonical):
        raise ValueError(f"a device is listed twice in {text!r}")
    if len(devices) > 1 and "cpu" in devices:
        raise ValueError("several devices must all be GPUs; the CPU runs as one device")
    return devices


def device_index(device: str) -> int:
    """The GPU ordinal of `cuda:N` (`cuda` is 0); 0 for the CPU."""
    _, _, index = device.partition(":")
    return int(index or 0)
