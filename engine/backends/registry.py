"""Choose and build a backend from explicit options: the one place defaults are decided."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from engine.backends.base import Backend
from engine.errors import BackendUnavailableError
from engine.model.directory import ONNX_NAMES, ModelDir, onnx_name
from engine.serving.devices import parse_devices

BACKENDS = ("onnx", "torch")
#: What a command line may ask for: `auto` is ONNX Runtime on the CPU and torch on CUDA,
#: the one GPU path measured end to end (onnxruntime-gpu has not run on a GPU host yet).
BACKEND_CHOICES = ("auto", *BACKENDS)
PRECISIONS = ("auto", "fp32", "fp16", "bf16", "int8")
SWITCHES = ("auto", "on", "off")
#: The longest CUDA graph bucket by default, in feature frames: 15 s, the default longest
#: VAD segment (the engine builder sets it from the server's `max_segment_ms`).
DEFAULT_GRAPH_FRAMES = 250
#: The version of each exported graph (plain, scored), stamped beside the export: raise
#: it when the graph the exporter writes changes, so an export made by older code is
#: made again rather than served (a stale scored head once cost biased decoding a third
#: of its speed; version 3 scores the prompt frames too). A stamp without a version is
#: version 1.
GRAPH_VERSIONS = {False: 1, True: 3}


@dataclass(frozen=True, slots=True)
class BackendOptions:
    """Which backend runs the model, where, and at what precision.

    `device` may list several GPUs (`cuda:0,cuda:1`) for the engine builder, which opens
    one backend per device; `create_backend` itself takes one device. `backend="auto"`
    is resolved here, so every reader sees `onnx` or `torch`.
    """

    backend: str = "auto"
    precision: str = "auto"
    device: str = "cpu"
    threads: int | None = None
    tensorrt: bool = False
    # Where a CPU session keeps onnxruntime's optimized graph (None: optimize every start).
    graph_cache: Path | None = None
    # Features (fbank, LFR, CMVN) computed by the backend on its device from raw audio;
    # auto: torch on CUDA (`on` also runs it on the CPU).
    device_features: str = "auto"
    # CUDA graphs of the encoder for small batches; auto: torch on CUDA. `graph_frames` is
    # the longest bucket (feature frames); longer utterances run eagerly.
    cuda_graphs: str = "auto"
    graph_frames: int = DEFAULT_GRAPH_FRAMES
    # Serve the scored graph (each frame's 8 best candidates too) for every decode, so
    # confidence and hotwords are ready at once and ONNX holds the weights once (torch
    # shares them anyway); False: the plain graph, the scored one made when first asked.
    scored: bool = False

    def __post_init__(self) -> None:
        if self.backend not in BACKEND_CHOICES:
            raise ValueError(f"backend must be one of {BACKEND_CHOICES}; got {self.backend!r}")
        if self.backend == "auto":
            on_gpu = parse_devices(self.device)[0].startswith("cuda")
            object.__setattr__(self, "backend", "torch" if on_gpu else "onnx")
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}; got {self.precision!r}")
        for name in ("device_features", "cuda_graphs"):
            if getattr(self, name) not in SWITCHES:
                raise ValueError(f"{name} must be one of {SWITCHES}; got {getattr(self, name)!r}")
        if self.graph_frames < 1:
            raise ValueError(f"graph_frames must be positive; got {self.graph_frames}")
        cuda = parse_devices(self.device)[0].startswith("cuda")
        # Features from audio run on the CPU too (for tests and comparisons); graphs need CUDA.
        if self.device_features == "on" and self.backend != "torch":
            raise ValueError("device-features on needs --backend torch")
        if self.cuda_graphs == "on" and not (self.backend == "torch" and cuda):
            raise ValueError("cuda-graphs on needs --backend torch --device cuda")

    def resolved_precision(self) -> str:
        """`auto` is the fastest measured: int8 ONNX / fp32 torch on CPU, fp16 on CUDA."""
        if self.precision != "auto":
            return self.precision
        if self.device.startswith("cuda"):
            return "fp16"
        return "int8" if self.backend == "onnx" else "fp32"


def create_backend(model_dir: ModelDir, options: BackendOptions) -> Backend:
    """Build the backend; ONNX files are exported on first use and cached."""
    precision = options.resolved_precision()
    if len(parse_devices(options.device)) != 1:
        raise BackendUnavailableError(
            f"one backend runs on one device, not {options.device!r}: the server takes a list"
        )
    if options.backend == "torch":
        from engine.backends.graph_buckets import plan_buckets
        from engine.backends.torch import TorchBackend

        cuda = options.device.startswith("cuda")
        graphs = options.cuda_graphs == "on" or (options.cuda_graphs == "auto" and cuda)
        return TorchBackend(
            model_dir,
            device=options.device,
            precision=precision,
            threads=options.threads,
            device_features=options.device_features == "on"
            or (options.device_features == "auto" and cuda),
            graphs=plan_buckets(options.graph_frames) if graphs else None,
        )
    from engine.backends.onnx import OnnxBackend, select_providers

    select_providers(options.device, precision, options.tensorrt)  # fail before exporting
    return OnnxBackend(
        model_dir,
        device=options.device,
        precision=precision,
        threads=options.threads,
        onnx_path=ensure_onnx(model_dir, precision, scored=options.scored),
        tensorrt=options.tensorrt,
        graph_cache=options.graph_cache,
        # Exported and opened at the first request that asks, unless it is the graph served.
        scored_path=lambda: ensure_onnx(model_dir, precision, scored=True),
        scored=options.scored,
    )


def ensure_onnx(model_dir: ModelDir, precision: str, scored: bool = False) -> Path:
    """Return an up-to-date ONNX file for `precision`, exporting it once if needed
    (`scored`: the graph that also outputs each frame's best candidates, for hotwords).

    The export goes into the model dir when it is writable, else into a per-user cache,
    and a stamp of the source weights marks when it must be redone.
    """
    if precision not in ONNX_NAMES:
        raise BackendUnavailableError(f"no ONNX export for precision {precision!r}")
    name = onnx_name(precision, scored)
    stamp = _weights_stamp(model_dir)
    for folder in (model_dir.path, _cache_dir(model_dir)):
        path = folder / name
        if path.is_file() and _fresh(path, stamp, GRAPH_VERSIONS[scored]):
            return path
    folder = model_dir.path if os.access(model_dir.path, os.W_OK) else _cache_dir(model_dir)
    if not model_dir.weights_path.is_file():
        raise BackendUnavailableError(
            f"no {name} in {model_dir.path} and no model.pt to export it from"
        )
    from engine.backends.onnx_export import export_onnx

    written = export_onnx(
        model_dir, folder, int8=precision == "int8", fp16=precision == "fp16", scored=scored
    )
    write_export_stamps(model_dir, written.values(), scored=scored)
    return written[precision]


def write_export_stamps(
    model_dir: ModelDir, paths: Iterable[Path], *, scored: bool = False
) -> None:
    """Record which weights and graph version each export came from, so a changed
    model.pt, or an exporter that now writes another graph, exports again."""
    stamp = json.dumps({"weights": _weights_stamp(model_dir), "graph": GRAPH_VERSIONS[scored]})
    for path in paths:
        # Replaced, never written through: in a folder of links to a model (a test's or a
        # benchmark's view of it) the stamp would otherwise land on the model's own export.
        sidecar = path.with_suffix(".onnx.json")
        tmp = sidecar.with_name(f".{sidecar.name}.{os.getpid()}.tmp")
        tmp.write_text(stamp)
        tmp.replace(sidecar)


def _weights_stamp(model_dir: ModelDir) -> str | None:
    try:
        st = model_dir.weights_path.stat()
    except FileNotFoundError:
        return None
    return f"{st.st_size}:{st.st_mtime_ns}"


def _fresh(onnx_path: Path, weights: str | None, graph: int) -> bool:
    """Whether an export may be served: made from these weights by an exporter writing
    this graph version, or with no stamp at all (an export shipped or made by hand)."""
    sidecar = onnx_path.with_suffix(".onnx.json")
    try:
        stamp = json.loads(sidecar.read_text())
    except FileNotFoundError:
        return True
    except json.JSONDecodeError:
        return False
    if not isinstance(stamp, dict):
        return False
    same_weights = weights is None or stamp.get("weights") == weights
    return same_weights and stamp.get("graph", 1) == graph


def _cache_dir(model_dir: ModelDir) -> Path:
    root = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    digest = hashlib.sha1(str(model_dir.path).encode()).hexdigest()[:12]
    return root / "sensestream" / "onnx" / f"{model_dir.name}-{digest}"
