"""Recognizer: frontend, backend and decoding put together for whole utterances."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from engine.backends.base import AudioBackend, Backend, ScoredFrames, ScoringBackend
from engine.decoding.beam_search import prefix_beam_search
from engine.decoding.confidence import scores_of
from engine.decoding.context_graph import ContextGraph
from engine.decoding.ctc import CtcTokens, greedy_collapse
from engine.decoding.hotwords import HotwordCompiler
from engine.decoding.transcript import transcript_of
from engine.errors import BackendUnavailableError, EngineError
from engine.features.fbank import Frontend
from engine.model.directory import ModelDir
from engine.model.prompts import PROMPT_FRAMES
from engine.model.tags import TagTable, tag_piece
from engine.model.tokenizer import Tokenizer
from engine.speakers.encoder import Speakers
from engine.types import SAMPLE_RATE, DecodeOptions, Transcript

#: Prefixes kept per frame when hotwords bias the search.
BEAM = 4


@dataclass(frozen=True)
class Utterance:
    """One utterance ready for a batch: its features, or its checked audio when the
    backend computes features on its device."""

    feats: np.ndarray | None
    options: DecodeOptions
    duration_ms: int
    frames: int  # feature frames, whichever of the two is held
    audio: np.ndarray | None = None


class Recognizer:
    """Turns 16 kHz audio into rich transcripts with one shared backend."""

    def __init__(
        self, model_dir: ModelDir, backend: Backend, speakers: Speakers | None = None
    ) -> None:
        self.model_dir = model_dir
        self.backend = backend
        self.speakers = speakers  # on the same device, for requests that ask who spoke
        self.frontend = Frontend.from_model_dir(model_dir.path)
        self.tokenizer = Tokenizer.from_file(model_dir.tokenizer_path)
        self.tags = TagTable.from_tokenizer(self.tokenizer)
        self.hotwords = HotwordCompiler(self.tokenizer)
        self._nospeech_id = self.tokenizer.piece_to_id(tag_piece("nospeech"))
        self._paths_of: Backend | None = None  # the backend `_path_cache` was read from
        self._path_cache: tuple[AudioBackend | None, ScoringBackend | None] = (None, None)

    @property
    def _audio_backend(self) -> AudioBackend | None:
        return self._paths()[0]

    @property
    def _scoring(self) -> ScoringBackend | None:
        return self._paths()[1]

    def _paths(self) -> tuple[AudioBackend | None, ScoringBackend | None]:
        """The backend's audio and scored paths, worked out once per backend: whoever
        replaces `backend` (a test's faulty wrapper) replaces every path through it."""
        backend = self.backend
        if self._paths_of is not backend:
            audio = backend if isinstance(backend, AudioBackend) and backend.takes_audio else None
            scoring = backend if isinstance(backend, ScoringBackend) else None
            self._paths_of, self._path_cache = backend, (audio, scoring)
        return self._path_cache

    @property
    def features_on_device(self) -> bool:
        """True when the backend computes features and `prepare` only checks the audio."""
        return self._audio_backend is not None

    def prepare(self, audio: np.ndarray, options: DecodeOptions) -> Utterance:
        """Compute features (or check the audio for a backend that computes them); raises
        AudioError for audio the model cannot take."""
        duration_ms = len(audio) * 1000 // SAMPLE_RATE
        if options.hotwords:
            self.hotwords.graph(options.hotwords, options.itn)  # refused here, alone
        if self._audio_backend is not None:
            self.frontend.check_audio(audio)
            frames = self.frontend.num_frames(audio.shape[0])
            return Utterance(None, options, duration_ms, frames, audio)
        feats = self.frontend.features(audio)
        return Utterance(feats, options, duration_ms, feats.shape[0])

    def features_of(self, utterance: Utterance) -> np.ndarray:
        """An utterance's features, computed on the CPU if it holds only its audio."""
        if utterance.feats is not None:
            return utterance.feats
        return self.frontend.features(_held(utterance.audio))

    def decode(self, batch: Sequence[Utterance]) -> list[Transcript]:
        """Run one batch through the backend and decode every item."""
        outputs = self._run(batch)
        return [self._transcript(u, out) for out, u in zip(outputs, batch, strict=True)]

    def _transcript(self, utterance: Utterance, output: np.ndarray | ScoredFrames) -> Transcript:
        """One item's transcript, scored when it asked for confidence and the run was."""
        ctc = self._tokens(utterance, output)
        scores = None
        if utterance.options.confidence and isinstance(output, ScoredFrames):
            scores = scores_of(ctc, output, self._nospeech_id)
        itn = utterance.options.itn
        return transcript_of(
            ctc, self.tokenizer, self.tags, utterance.duration_ms, itn, scores=scores
        )

    def speaker_vectors(self, audios: Sequence[np.ndarray]) -> np.ndarray:
        """Each audio's speaker embedding, in one batch; raises BackendUnavailableError
        when this engine has no speaker encoder or its weights are not installed."""
        if self.speakers is None:
            raise BackendUnavailableError("this engine was built without a speaker encoder")
        return self.speakers.embed(audios)

    def _tokens(self, utterance: Utterance, output: np.ndarray | ScoredFrames) -> CtcTokens:
        """Greedy tokens, or with hotwords a biased search over the frames' candidates."""
        if not isinstance(output, ScoredFrames):
            return greedy_collapse(output)
        options = utterance.options
        if not options.hotwords:
            return greedy_collapse(output.ids)
        return biased_tokens(output, self.hotwords.graph(options.hotwords, options.itn), BEAM)

    def transcribe(
        self, audios: Sequence[np.ndarray], options: DecodeOptions, batch_size: int = 8
    ) -> list[Transcript | EngineError]:
        """Decode many utterances in length-sorted batches; bad items get their own error."""
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        results: list[Transcript | EngineError | None] = [None] * len(audios)
        ready: list[tuple[int, Utterance]] = []
        for i, audio in enumerate(audios):
            try:
                ready.append((i, self.prepare(audio, options)))
            except EngineError as exc:
                results[i] = exc
        # Sorting by length keeps padding small; results go back in input order.
        ready.sort(key=lambda item: item[1].frames)
        for start in range(0, len(ready), batch_size):
            chunk = ready[start : start + batch_size]
            try:
                decoded: Sequence[Transcript | EngineError] = self.decode([u for _, u in chunk])
            except EngineError as exc:
                decoded = [exc] * len(chunk)
            for (i, _), result in zip(chunk, decoded, strict=True):
                results[i] = result
        return [r for r in results if r is not None]

    def _run(self, batch: Sequence[Utterance]) -> Sequence[np.ndarray | ScoredFrames]:
        options = [u.options for u in batch]
        scoring = self._scoring
        wants = any(o.hotwords or o.confidence for o in options)
        if scoring is not None and wants and scoring.scoring_ready():
            # One run for the whole batch: the items that asked for neither read the same ids.
            if self._audio_backend is not None:
                audios = [_held(u.audio) for u in batch]
                return scoring.run_scored(audios, options, audio=True)
            return scoring.run_scored([_held(u.feats) for u in batch], options, audio=False)
        if self._audio_backend is not None:
            return self._audio_backend.run_audio([_held(u.audio) for u in batch], options)
        return self.backend.run([_held(u.feats) for u in batch], options)


def biased_tokens(output: ScoredFrames, graph: ContextGraph, beam: int) -> CtcTokens:
    """Tags greedily from the prompt frames, then the biased search over the speech."""
    tags = greedy_collapse(output.ids[:PROMPT_FRAMES])
    speech = prefix_beam_search(
        output.topk_ids[PROMPT_FRAMES:],
        output.topk_logprobs[PROMPT_FRAMES:],
        beam=beam,
        graph=graph,
        frame_offset=PROMPT_FRAMES,
    )
    return CtcTokens(
        tags.ids + speech.ids,
        tags.first_frame + speech.first_frame,
        tags.last_frame + speech.last_frame,
    )


def _held(array: np.ndarray | None) -> np.ndarray:
    if array is None:
        raise ValueError("this utterance was prepared for another recognizer")
    return array
