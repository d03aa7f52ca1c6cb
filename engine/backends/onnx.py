"""OnnxBackend: the exported encoder+CTC+argmax graph on onnxruntime (CPU, CUDA, TensorRT)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from engine.backends.base import ScoredFrames
from engine.backends.graph_cache import open_with_graph_cache
from engine.errors import BackendOutOfMemoryError, BackendUnavailableError, EngineError
from engine.features.fbank import pad_batch
from engine.model.directory import ModelDir
from engine.model.prompts import prompt_arrays
from engine.serving.devices import device_index
from engine.types import DecodeOptions

CPU_PRECISIONS = ("fp32", "int8")
CUDA_PRECISIONS = ("fp32", "fp16")
OUTPUT_NAMES = ("token_ids", "token_lens")
#: The scored graph's extra outputs: each frame's best ids and log-probabilities.
SCORED_OUTPUT_NAMES = ("topk_ids", "topk_logprobs")
# TensorRT builds one engine per shape profile; these cover 1-64 items of up to 30 s.
TRT_MIN = "speech:1x1x560,speech_lengths:1,language:1,textnorm:1"
TRT_OPT = "speech:8x167x560,speech_lengths:8,language:8,textnorm:8"
TRT_MAX = "speech:64x500x560,speech_lengths:64,language:64,textnorm:64"

Runner = Callable[[dict[str, np.ndarray]], tuple[np.ndarray, np.ndarray]]
log = logging.getLogger("sensestream.engine")


def select_providers(
    device: str, precision: str, tensorrt: bool = False, trt_cache: Path | None = None
) -> list[Any]:
    """Execution providers for `device`, checked against what this onnxruntime offers."""
    import onnxruntime as ort

    available = set(ort.get_available_providers())
    if device == "cpu":
        if precision not in CPU_PRECISIONS:
            raise BackendUnavailableError(
                f"ONNX on the CPU runs {' or '.join(CPU_PRECISIONS)}, not {precision}"
            )
        return ["CPUExecutionProvider"]
    kind, _, _ = device.partition(":")
    if kind != "cuda":
        raise BackendUnavailableError(f"onnx backend runs on cpu or cuda[:N], not {device!r}")
    if "CUDAExecutionProvider" not in available:
        raise BackendUnavailableError(
            "CUDAExecutionProvider is missing: install onnxruntime-gpu (the `gpu` extra)"
        )
    if precision not in CUDA_PRECISIONS:
        # int8 MatMulInteger has no CUDA kernel and silently falls back to the CPU.
        raise BackendUnavailableError(f"ONNX on CUDA runs fp16 or fp32, not {precision}")
    device_id = device_index(device)
    providers: list[Any] = [("CUDAExecutionProvider", cuda_options(device_id))]
    providers.append("CPUExecutionProvider")
    if tensorrt and "TensorrtExecutionProvider" in available:
        trt = tensorrt_options(device_id, precision == "fp16", trt_cache)
        providers.insert(0, ("TensorrtExecutionProvider", trt))
    return providers


def cuda_options(device_id: int) -> dict[str, Any]:
    """CUDA provider options; each one is here for a measured or documented reason."""
    return {
        "device_id": device_id,
        # EXHAUSTIVE (the default) re-tunes convolutions for every new input length.
        "cudnn_conv_algo_search": "HEURISTIC",
        # The default doubles the arena on each growth; our budget already bounds batches,
        # so grow by what is asked and keep the arena near the real peak.
        "arena_extend_strategy": "kSameAsRequested",
    }


def tensorrt_options(device_id: int, fp16: bool, cache: Path | None) -> dict[str, Any]:
    """TensorRT options: one dynamic-shape profile, engines cached across restarts."""
    options: dict[str, Any] = {
        "device_id": device_id,
        "trt_fp16_enable": fp16,
        "trt_profile_min_shapes": TRT_MIN,
        "trt_profile_opt_shapes": TRT_OPT,
        "trt_profile_max_shapes": TRT_MAX,
    }
    if cache is not None:
        options["trt_engine_cache_enable"] = True
        options["trt_engine_cache_path"] = str(cache)
    return options


class OnnxBackend:
    """Runs padded batches through one onnxruntime session.

    On a GPU provider the inputs go through an I/O binding: each is copied once to the
    device as an OrtValue, and the int32 outputs are bound to host memory, so nothing is
    copied twice. `io_binding` forces that path on (or off) anywhere, e.g. on the CPU in
    tests.
    """

    def __init__(
        self,
        model_dir: ModelDir,
        *,
        device: str = "cpu",
        precision: str = "int8",
        threads: int | None = None,
        onnx_path: Path | None = None,
        tensorrt: bool = False,
        io_binding: bool | None = None,
        graph_cache: Path | None = None,
        scored_path: Callable[[], Path] | None = None,
        scored: bool = False,
    ) -> None:
        path = onnx_path or model_dir.onnx_path(precision)
        providers = select_providers(device, precision, tensorrt, path.parent / "trt-cache")
        if not path.is_file():
            raise BackendUnavailableError(
                f"{path} does not exist: run `python scripts/export_onnx.py --model "
                f"{model_dir.path}{_export_flag(precision)}` first"
            )
        on_gpu = device != "cpu"
        # Only a CPU graph is kept: a GPU provider's graph holds its own fused nodes.
        cache = None if on_gpu else graph_cache
        self._session = _open_session(path, providers, threads, cache, arena=not on_gpu)
        self._run_options = _run_options(on_gpu)
        kind = "trt" if _provider_name(providers[0]) == "TensorrtExecutionProvider" else None
        self._label = f"onnx-{precision}-{kind or device.partition(':')[0]}"
        # The graph with each frame's candidates, for hotwords and confidence: `scored`,
        # the graph `onnx_path` names is it (one session serves every decode, the weights
        # held once); else made and opened on a thread of its own when the first request
        # asks (an export of the full model takes most of a minute, which no batch should
        # wait for).
        self._scored = (
            ScoredGraph.opened(self._session, self._label)
            if scored
            else ScoredGraph(
                scored_path,
                lambda p: _open_session(p, providers, threads, None, arena=not on_gpu),
                self._label,
            )
        )
        bind = on_gpu if io_binding is None else io_binding
        self._runner: Runner = (
            BoundRunner(
                self._session, "cuda" if on_gpu else "cpu", device_index(device), self._run_options
            )
            if bind
            else self._run_plain
        )

    @property
    def name(self) -> str:
        return self._label

    @property
    def uses_io_binding(self) -> bool:
        return isinstance(self._runner, BoundRunner)

    def run(
        self, feats: Sequence[np.ndarray], options: Sequence[DecodeOptions]
    ) -> list[np.ndarray]:
        """Decode one padded batch; see `engine.backends.base.Backend.run`."""
        padded, lengths = pad_batch(feats)
        language, textnorm = prompt_arrays(options)
        inputs = {
            "speech": padded,
            "speech_lengths": lengths,
            "language": language,
            "textnorm": textnorm,
        }
        try:
            ids, lens = self._runner(inputs)
        except Exception as exc:
            if _is_out_of_memory(exc):
                raise BackendOutOfMemoryError(f"{self._label}: {exc}") from exc
            raise
        return [np.asarray(ids[i, : int(lens[i])], dtype=np.int32) for i in range(len(feats))]

    def run_scored(
        self, inputs: Sequence[np.ndarray], options: Sequence[DecodeOptions], *, audio: bool
    ) -> list[ScoredFrames]:
        """`run` with each frame's best candidates, from the scored graph."""
        if audio:
            raise RuntimeError(f"{self._label} takes features, not audio")
        padded, lengths = pad_batch(inputs)
        language, textnorm = prompt_arrays(options)
        feeds = {"speech": padded, "speech_lengths": lengths, "language": language}
        feeds["textnorm"] = textnorm
        names = [*OUTPUT_NAMES, *SCORED_OUTPUT_NAMES]
        try:
            ids, lens, top_ids, top_lp = self._scored_session().run(names, feeds, self._run_options)
        except Exception as exc:
            if _is_out_of_memory(exc):
                raise BackendOutOfMemoryError(f"{self._label}: {exc}") from exc
            raise
        return [
            ScoredFrames(
                np.asarray(ids[i, : int(lens[i])], dtype=np.int32),
                np.asarray(top_ids[i, : int(lens[i])], dtype=np.int32),
                np.asarray(top_lp[i, : int(lens[i])], dtype=np.float32),
            )
            for i in range(len(inputs))
        ]

    def scoring_ready(self) -> bool:
        """Whether `run_scored` can run now; the first call starts making the graph."""
        return self._scored.ready()

    def wait_for_scoring(self, timeout: float) -> bool:
        """Start making the scored graph and wait for it (benchmarks, tests, warm-ups)."""
        if self._scored.ready():
            return True
        self._scored.finished.wait(timeout)
        return self._scored.session is not None

    def _scored_session(self) -> Any:
        session = self._scored.session
        if session is None:
            raise BackendUnavailableError(f"{self._label}: the scored graph is not open yet")
        return session

    def _run_plain(self, inputs: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        ids, lens = self._session.run(list(OUTPUT_NAMES), inputs, self._run_options)
        return ids, lens


class ScoredGraph:
    """The scored graph of a backend, made and opened once on a thread of its own."""

    def __init__(
        self, path: Callable[[], Path] | None, open_session: Callable[[Path], Any], label: str
    ) -> None:
        self._path = path
        self._open_session = open_session
        self._label = label
        self.session: Any = None  # set once, by the loading thread
        self.finished = threading.Event()  # the loading thread is done, opened or not
        self._started = False
        self._lock = threading.Lock()

    @classmethod
    def opened(cls, session: Any, label: str) -> ScoredGraph:
        """A scored graph already open: the backend's own session."""
        graph = cls(None, lambda _: session, label)
        graph.session = session
        graph.finished.set()
        return graph

    def ready(self) -> bool:
        """True once open; the first call starts the loading thread."""
        if self.session is not None:
            return True
        with self._lock:
            if not self._started and self._path is not None:
                self._started = True
                threading.Thread(target=self._load, name="scored-graph", daemon=True).start()
        return False

    def _load(self) -> None:
        try:
            self._open()
        finally:
            self.finished.set()

    def _open(self) -> None:
        if self._path is None:
            return
        log.info(
            "%s: making the scored graph for hotwords and confidence (meanwhile they decode "
            "greedily and unscored)",
            self._label,
        )
        try:
            self.session = self._open_session(self._path())
        except (EngineError, OSError, RuntimeError) as exc:
            # Hotwords then stay greedy and finals unscored; the server goes on.
            log.error(
                "%s: no scored graph, hotwords decode greedily, unscored: %s", self._label, exc
            )
            return
        log.info("%s: the scored graph is open: hotwords and confidence from now on", self._label)


class BoundRunner:
    """One run through an I/O binding: inputs placed on `device_type`, outputs on the host."""

    def __init__(
        self, session: Any, device_type: str, device_id: int, run_options: Any = None
    ) -> None:
        self._session = session
        self._device_type = device_type
        self._device_id = device_id
        self._run_options = run_options

    def __call__(self, inputs: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        import onnxruntime as ort

        binding = self._session.io_binding()
        # The OrtValues must outlive the run: the binding holds only their device pointers.
        values = {
            name: ort.OrtValue.ortvalue_from_numpy(array, self._device_type, self._device_id)
            for name, array in inputs.items()
        }
        for name, value in values.items():
            binding.bind_ortvalue_input(name, value)
        for output in self._session.get_outputs():
            # A few int32 ids (and a scored graph's candidates) per frame: onnxruntime
            # copies them straight to host memory. The ids and lengths come first.
            binding.bind_output(output.name, "cpu")
        self._session.run_with_iobinding(binding, self._run_options)
        ids, lens = binding.copy_outputs_to_cpu()[: len(OUTPUT_NAMES)]
        return ids, lens


def _open_session(
    path: Path, providers: list[Any], threads: int | None, graph_cache: Path | None, *, arena: bool
) -> Any:
    import onnxruntime as ort

    def options() -> Any:
        return _session_options(threads, arena)

    if graph_cache is not None:
        return open_with_graph_cache(path, graph_cache, options, providers)
    return ort.InferenceSession(str(path), options(), providers=providers)


def _session_options(threads: int | None, arena: bool) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.inter_op_num_threads = 1
    if threads is not None:
        options.intra_op_num_threads = threads
    options.log_severity_level = 3
    # Without the arena every intermediate is a fresh malloc: glibc then keeps the freed
    # blocks (its dynamic mmap threshold), so a batch of 8 x 12 s peaked at 1.97 GB of RSS
    # against 0.59 GB with the arena, and its first run page-faulted 50% longer. The arena
    # is shrunk after every run (`_run_options`), so it does not keep each batch's peak.
    options.enable_cpu_mem_arena = arena
    return options


def _run_options(on_gpu: bool) -> Any:
    """Per-run settings: on the CPU, hand the arena's free chunks back after each run."""
    import onnxruntime as ort

    options = ort.RunOptions()
    if not on_gpu:
        options.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")
    return options


def _provider_name(provider: Any) -> str:
    return provider[0] if isinstance(provider, tuple) else str(provider)


def _is_out_of_memory(exc: Exception) -> bool:
    text = str(exc).lower()
    return "allocate" in text or "out of memory" in text


def _export_flag(precision: str) -> str:
    return {"int8": " --int8", "fp16": " --fp16"}.get(precision, "")
