"""Session: the sans-I/O per-client core. Neutral commands and results in; requests and events out.

A protocol codec turns its client's messages into commands (`streaming.commands`) and the
events here (`streaming.events`) into its messages; the server feeds `handle` and
`receive_result`, then drains `requests_to_submit()` into the engine and `events_to_send()`
through the codec onto the socket. Time is passed in as `now` (seconds); nothing here
blocks or reads a clock.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial

import numpy as np

from engine.types import (
    SAMPLE_RATE,
    DecodeOptions,
    Hotword,
    InferenceRequest,
    InferenceResult,
    RequestKind,
    RequestRef,
    Transcript,
)
from streaming.audio.decoder import AudioDecoder, AudioFormat
from streaming.audio.ring_buffer import RingBuffer
from streaming.commands import (
    Audio,
    Clear,
    Command,
    Commit,
    Configure,
    Cut,
    HotwordRefusal,
    Mark,
    Stop,
    StreamOptions,
    merged_hotwords,
    writes_any,
)
from streaming.errors import (
    EmptyCommitError,
    ProtocolError,
    StateError,
    UnsupportedHotwordError,
)
from streaming.events import (
    Cleared,
    Committed,
    Configured,
    Ended,
    ErrorEvent,
    Failed,
    Final,
    Marked,
    Partial,
    SessionEvent,
    SpeechStarted,
    SpeechStopped,
    StopCause,
)
from streaming.limits import RateMeter, SessionLimits
from streaming.partials.policy import PartialPolicy
from streaming.partials.window import PartialWindow
from streaming.pieces.cuts import quietest_cut
from streaming.pieces.joining import appended
from streaming.pieces.policy import CommitPolicy
from streaming.pieces.track import PieceTrack
from streaming.pins import Pins
from streaming.redaction.events import EventRedactor
from streaming.redaction.policies import Redaction
from streaming.redaction.stream import SpokenContext
from streaming.segmenter import Segmenter, SegmenterConfig, SegmentEvent, SegmentEventKind
from streaming.speakers.labels import StreamSpeakers, Voice
from streaming.speakers.online import SpeakerPolicy
from streaming.vad.jobs import VadJob, VadStep
from streaming.vad.types import VadConfig, VadEvent, VadModel


@dataclass(frozen=True, slots=True)
class SessionConfig:
    """Server-side settings for every session (clients choose only `Configure` fields)."""

    vad: VadConfig = field(default_factory=VadConfig)
    segmenter: SegmenterConfig = field(default_factory=SegmenterConfig)
    partials: PartialPolicy = field(default_factory=PartialPolicy)
    block_ms: int = 100
    buffer_margin_ms: int = 10_000
    limits: SessionLimits = field(default_factory=SessionLimits)
    model_name: str = ""
    test_model: bool = False
    demo_model: bool = False
    # Decode the utterance once the VAD has heard this much of a pause, before its
    # end-silence runs out; when the pause lasts, that decode is the final. 0 turns it off.
    early_final_ms: int = 200
    # Text committed at the pauses inside an utterance, each piece decoded once
    # (`streaming.pieces`); "off": the final decodes the whole utterance.
    commits: CommitPolicy = field(default_factory=CommitPolicy)
    # Whole files: their finals queue as background work, after every live request.
    background: bool = False
    # The server runs the VAD off its event loop (`streaming.vad.jobs`): audio only fills
    # the ring until `take_vad_job()` hands its whole blocks out.
    defer_vad: bool = False
    # Backpressure: the client's next frame waits while this many of its finals are in
    # the engine, so a fast sender's utterances queue a few at a time beside live ones.
    max_owed_finals: int = 4
    # A deferred VAD job's most blocks: the VAD thread is shared by audio seconds, so a
    # fast sender's backlog takes turns with live streams' blocks instead of going first.
    max_job_blocks: int = 10
    # The server's hotwords (`--hotwords-file`), favoured after each session's own.
    hotwords: tuple[Hotword, ...] = ()
    # What this connection's credential fixes (a client secret's pins): set per connection.
    pinned: Pins = field(default_factory=Pins)
    # What every stream redacts (`--redact`); a stream may add policies, never remove one.
    redaction: Redaction = field(default_factory=Redaction)
    # Why the model cannot write some of a stream's hotwords (None: it can write them all);
    # the server asks the engine's tokenizer. Refused at start, not at the first decode.
    hotword_refusal: HotwordRefusal = field(default=writes_any)
    # Label who spoke in every stream that does not say (`--diarize`), and how; keep the
    # voices labelled (`kept_voices`), for a file's speakers clustered at its end.
    diarize: bool = False
    speakers: SpeakerPolicy = field(default_factory=SpeakerPolicy)
    keep_voices: bool = False
    # Token, word and final confidence on every stream that does not say (`--confidence`).
    confidence: bool = True

    def __post_init__(self) -> None:
        if self.early_final_ms < 0:
            raise ValueError("early_final_ms must be >= 0")
        if self.buffer_margin_ms < 2 * self.block_ms:
            raise ValueError("buffer_margin_ms must hold at least two blocks")
        if self.max_owed_finals < 1 or self.max_job_blocks < 1:
            raise ValueError("max_owed_finals and max_job_blocks must be >= 1")

    @property
    def block_samples(self) -> int:
        return self.block_ms * SAMPLE_RATE // 1000

    @property
    def margin_samples(self) -> int:
        """Audio the ring holds beyond the longest utterance: room for audio not yet judged."""
        return self.buffer_margin_ms * SAMPLE_RATE // 1000

    @property
    def buffer_samples(self) -> int:
        seg = self.segmenter
        total_ms = seg.max_segment_ms + seg.preroll_ms + self.buffer_margin_ms
        return total_ms * SAMPLE_RATE // 1000


def _same(request: RequestRef, other: InferenceRequest | None) -> bool:
    """The same request, whether or not the answer carries the very object we sent."""
    return other is not None and request.request_id == other.request_id


# A partial's stable prefix promises text its final will contain. The final decodes the
# whole utterance afresh and nothing ties it to an earlier decode, so only the final can
# settle text: a partial promises none. (Composing the final on the partials' text would
# settle sooner, but then the same audio gave different finals as partials ran or not.)
SETTLED_CHARS = 0


def samples_to_ms(samples: int) -> int:
    return samples * 1000 // SAMPLE_RATE


# A fresh VAD started this far before speech finds the start the stream's own VAD found
# (measured on the FSMN VAD: 0.6 s before always did, 0.45 s not)...
SETTLE_LEAD_MS = 800
# ...and it opens an utterance up to 0.45 s after the start it reports (pre-roll and
# detection), so in a pause, speech may have begun that long before what was judged.
SETTLE_MS = SETTLE_LEAD_MS + 450


def empty_transcript(itn: bool) -> Transcript:
    return Transcript("", "unknown", "unknown", "unknown", itn, "")


@dataclass
class _Utterance:
    """Book-keeping for one open or finalising utterance."""

    start: int
    last_partial: int
    window: PartialWindow
    partial_end: int = 0  # stream end of the audio behind the partial on show
    final_requested: bool = False
    decided: int | None = None  # stream samples received when the VAD closed it
    final_request: InferenceRequest | None = None  # the decode whose answer is the final
    early: InferenceRequest | None = None  # a decode of [start, the pending end)
    early_result: InferenceResult | None = None
    pieces: PieceTrack | None = None  # with commits at pauses: its pieces so far
    voices: dict[int, Voice] = field(default_factory=dict)  # by request id (diarization)


class Session:
    """One client's stream: audio decoding, buffering, VAD, utterances and results."""

    def __init__(
        self,
        session_id: str,
        config: SessionConfig,
        vad_model: VadModel,
        spoken: SpokenContext | None = None,
    ) -> None:
        self.session_id = session_id
        self._config = config
        self._vad_model = vad_model
        self._options = StreamOptions()
        self._audio: AudioFormat | None = None  # set by the first Configure
        self._decoder: AudioDecoder | None = None
        self._meter = RateMeter(config.limits.max_rate, 0.0, config.limits.max_session_s)
        self._ring = RingBuffer(config.buffer_samples)
        self._vad = vad_model.new_stream(config.vad)
        self._segmenter = Segmenter(config.segmenter)
        self._fed = 0  # samples handed to the VAD, in whole blocks until end of stream
        self._utts: dict[int, _Utterance] = {}
        self._owed: dict[int, SessionEvent | None] = {}  # utt -> final once it has arrived
        self._events: list[SessionEvent] = []
        self._requests: list[InferenceRequest] = []
        self._request_ids = 0  # the last id given; results are matched by id
        self._stopped = False
        self._end_sent = False
        self._dropped_utt: int | None = None  # left unfinished by `hand_over`
        self._stream_id = session_id  # a client may name it in its first Configure
        self._webhook_url: str | None = None
        self._vad_job: VadJob | None = None  # handed out, its verdicts not yet back
        # Commands that came while a VAD job was out, applied in order once it is back.
        self._deferred: deque[Callable[[float], None]] = deque()
        self._pending_end: int | None = None  # the detector's, after the last block
        # Decoded audio the ring has no room for yet (the VAD is behind): at most what one
        # frame held, as the client is not read again until it is gone (`accepting`).
        self._held: deque[np.ndarray] = deque()
        # Redacts the finals and partials before they leave (None: nothing to redact).
        self._redactor: EventRedactor | None = None
        # Who spoke, with diarization (made by the first Configure that asks for it).
        self._speakers: StreamSpeakers | None = None
        # What was said last, read by redaction: the stream's, shared by its channels.
        self._spoken = spoken if spoken is not None else SpokenContext()

    # ---- inputs -------------------------------------------------------------------

    def handle(self, command: Command, now: float) -> None:
        """Apply one client command; raises ProtocolError for one the stream cannot take.

        While a VAD job is out, audio still fills the ring; any other command waits, in
        order, until `apply_vad` (then `resume`) so that it sees every verdict before it.
        """
        # Audio may go into the ring while a job is out; nothing may overtake a deferral.
        ring_only = isinstance(command, Audio) and not self._deferred
        if self._deferred or (self._vad_job is not None and not ring_only):
            self._deferred.append(partial(self._handle_now, command))
            return
        self._handle_now(command, now)

    def _handle_now(self, command: Command, now: float) -> None:
        self._release_due(now)
        if isinstance(command, Mark):
            if not self._end_sent:  # answered even once stopped, until `Ended`
                self._events.append(Marked(command.token))
            return
        if self._stopped:
            raise StateError(f"{_name(command)} after stop")
        match command:
            case Audio():
                if command.channel is not None:
                    raise StateError("this stream mixes its channels: audio has no channel")
                self._receive_audio(command.data, now)
            case Configure():
                self._configure(command)
            case Commit():
                self._commit(now, required=True)
            case Cut():
                self._commit(now, required=False)
            case Clear():
                self._clear(now)
            case Stop():
                self._end_of_stream_now(now)

    def receive_result(self, result: InferenceResult, now: float) -> None:
        """Take the engine's answer for one of this session's requests."""
        self._release_due(now)
        req = result.ref
        utt = self._utts.get(req.utterance_id)
        if utt is None:
            return  # its final has gone out (or it was cleared): nothing to add
        # A voice too odd to embed (audio of huge or denormal values) labels nothing.
        if result.speaker is not None and np.isfinite(result.speaker).all():
            end = req.start_sample + req.num_samples
            utt.voices[req.request_id] = Voice(req.start_sample, end, result.speaker)
        if utt.pieces is not None and utt.pieces.owns(req.request_id):
            self._piece_answered(req, utt, result, now)
            return
        if not _same(req, utt.final_request):
            if _same(req, utt.early):
                utt.early_result = result  # the pause may yet last: keep it for the decision
            # A partial, or an early decode that is not (yet) the final, shows as a partial.
            showable = not utt.final_requested and self._options.partials
            if showable and result.transcript is not None:
                self._emit_partial(req, utt, result.transcript)
            return
        if req.utterance_id not in self._owed:
            return
        if result.transcript is not None:
            end = req.start_sample + req.num_samples
            final = self._final_event(req.utterance_id, req.start_sample, end, result.transcript)
            self._owed[req.utterance_id] = final
        else:
            start_ms = samples_to_ms(req.start_sample)
            end_ms = samples_to_ms(req.start_sample + req.num_samples)
            message = f"utterance {req.utterance_id} could not be decoded: {result.error_message}"
            code = result.error_code or "decode_failed"
            self._owed[req.utterance_id] = Failed(req.utterance_id, start_ms, end_ms, code, message)
        self._deliver_finals(now)

    def end_of_stream(self, now: float) -> None:
        """No more audio: decide on the tail and close the open utterance as a final."""
        self._after_vad(self._end_of_stream_now, now)

    def _after_vad(self, act: Callable[[float], None], now: float) -> None:
        """`act` now, or once the VAD job out (and the commands waiting on it) is done."""
        if self._waiting_for_vad:
            self._deferred.append(act)
        else:
            act(now)

    def _end_of_stream_now(self, now: float) -> None:
        if self._stopped:
            return
        self._stopped = True
        self._flush_audio(now, final=True)
        for event in self._segmenter.finish(self._fed):
            self._on_segment(event, now, StopCause.END_OF_STREAM)
        self._deliver_finals(now)

    def hand_over(self, now: float) -> None:
        """No more audio here, as the stream goes on at another worker: as `end_of_stream`,
        but an utterance still open is dropped unfinished (`dropped_utt`), to be heard
        whole there; one with committed text ends here (its pieces were promised)."""
        self._after_vad(self._hand_over_now, now)

    def _hand_over_now(self, now: float) -> None:
        if self._stopped:
            return
        self._flush_audio(now, final=False)
        utt_id = self._segmenter.open_utt_id
        utt = None if utt_id is None else self._utts.get(utt_id)
        promised = utt is not None and utt.pieces is not None and utt.pieces.committed_text
        if utt_id is None or utt is None or promised:
            self._end_of_stream_now(now)
            return
        self._stopped = True
        self._segmenter.clear(self._fed)  # whatever it would reopen is not heard here
        del self._utts[utt_id]  # answers still on their way are ignored
        self._dropped_utt = utt_id
        self._deliver_finals(now)

    @property
    def dropped_utt(self) -> int | None:
        """The utterance `hand_over` left unfinished, for the next worker to number."""
        return self._dropped_utt

    def abort(self, error: ProtocolError, now: float) -> None:
        """Report a client error, stop taking input, and still deliver the finals owed."""
        if self._end_sent:
            return  # `end` is out and the socket is closing; nothing more is said
        self._events.append(ErrorEvent(error.code, error.message))
        # The client's commands after a fatal error are never read inline either.
        self._deferred.clear()
        self.end_of_stream(now)

    def reject(self, error: ProtocolError) -> None:
        """Report a client error that the protocol lets the stream survive."""
        if not self._end_sent:
            self._events.append(ErrorEvent(error.code, error.message))

    # ---- the VAD off the event loop (`SessionConfig.defer_vad`) --------------------

    def take_vad_job(self) -> VadJob | None:
        """The whole blocks not yet judged, for the detector (None: nothing, or one is out)."""
        if not self._config.defer_vad or self._vad_job is not None:
            return None
        if not self._options.turns.vad or self._stopped:
            return None
        block = self._config.block_samples
        whole = min((self._ring.end - self._fed) // block, self._config.max_job_blocks)
        if whole == 0:
            return None
        ends = range(self._fed + block, self._fed + (whole + 1) * block, block)
        blocks = tuple((end, self._ring.read(end - block, end)) for end in ends)
        self._vad_job = VadJob(self._vad, blocks, self._vad_model)
        return self._vad_job

    def apply_vad(self, job: VadJob, steps: tuple[VadStep, ...], now: float) -> None:
        """Take a job's verdicts: utterances, partials and finals follow as if inline."""
        if job is not self._vad_job:
            return
        self._vad_job = None
        for step in steps:
            self._apply_step(step, now, final=False)
        self._take_held(now, inline=False)  # the judged blocks made room

    @property
    def _waiting_for_vad(self) -> bool:
        """A job is out, or commands still wait for one that came back."""
        return self._vad_job is not None or bool(self._deferred)

    @property
    def in_pause(self) -> bool:
        """No utterance is open and the VAD has judged the audio taken (none waits for
        it): a cut here splits no speech the VAD has heard."""
        return self._segmenter.open_utt_id is None and self._vad_job is None and not self._deferred

    @property
    def judged_ms(self) -> int:
        """How much of the stream the VAD has judged."""
        return samples_to_ms(self._fed)

    @property
    def settled_ms(self) -> int:
        """Audio before this is settled: a VAD started here hears what this one heard
        (`SETTLE_LEAD_MS` before the open utterance's start; in a pause, `SETTLE_MS`
        before what has been judged)."""
        start = self._segmenter.open_start
        if start is not None:
            return max(0, samples_to_ms(start) - SETTLE_LEAD_MS)
        return max(0, samples_to_ms(self._fed) - SETTLE_MS)

    @property
    def has_deferred(self) -> bool:
        """Commands wait for `resume`: no VAD job is out and the audio before them has been
        judged (all but a partial block), so applying them runs no VAD on the caller."""
        if self._vad_job is not None or not self._deferred:
            return False
        return not self._held and self._ring.end - self._fed < self._config.block_samples

    # ---- backpressure ---------------------------------------------------------------

    @property
    def accepting(self) -> bool:
        """Whether the client's next frame may be read now (False: leave it in the socket).

        Not while audio waits for room in the ring or commands wait for the VAD, nor while
        the VAD is half a margin behind or `max_owed_finals` finals are in the engine.
        """
        if self._held or self._deferred:
            return False
        if len(self._owed) >= self._config.max_owed_finals:
            return False
        return self._ring.end - self._fed <= self._config.margin_samples // 2

    @property
    def resume_at(self) -> float:
        """The time before which the client's next frame is not read: its pace's bucket."""
        return self._meter.resume_at

    @property
    def wake_at(self) -> float | None:
        """When the session has something to do with no input (finals redaction holds
        fall due), for a client that sends nothing more; None: nothing."""
        return None if self._redactor is None else self._redactor.due_at

    def tick(self, now: float) -> None:
        """Time passed with no input (`wake_at`): what has fallen due goes out."""
        if not self._end_sent:
            self._release_due(now)

    def resume(self, now: float) -> None:
        """Apply the oldest deferred command; raises what `handle` would have raised."""
        if self.has_deferred:
            self._deferred.popleft()(now)

    # ---- outputs ------------------------------------------------------------------

    def events_to_send(self) -> list[SessionEvent]:
        events, self._events = self._events, []
        return events

    def requests_to_submit(self) -> list[InferenceRequest]:
        requests, self._requests = self._requests, []
        return requests

    @property
    def engine_ids(self) -> tuple[str, ...]:
        """The session ids the engine sees for this stream."""
        return (self.session_id,)

    @property
    def finished(self) -> bool:
        """`Ended` has been queued: every owed final went out and the socket may close."""
        return self._end_sent

    @property
    def stopped(self) -> bool:
        """No more client input is accepted (stop, abort or shutdown)."""
        return self._stopped

    @property
    def configured(self) -> bool:
        return self._audio is not None

    @property
    def owed_finals(self) -> int:
        return len(self._owed)

    @property
    def kept_voices(self) -> list[tuple[int, Voice]]:
        """(utt_id, voice) of every final labelled so far, with `keep_voices`."""
        return [] if self._speakers is None else list(self._speakers.kept)

    @property
    def min_speakers(self) -> int | None:
        """The stream's `min_speakers`, for clustering its voices at its end."""
        return self._options.min_speakers

    @property
    def speaker_policy(self) -> SpeakerPolicy:
        """How this stream tells speakers apart (its `max_speakers` applied)."""
        cap = self._options.max_speakers or self._config.speakers.max_speakers
        return replace(self._config.speakers, max_speakers=cap)

    @property
    def stream_samples(self) -> int:
        return self._ring.end

    # ---- commands -----------------------------------------------------------------

    def check_configure(self, command: Configure) -> None:
        """Raise the StateError `command` would meet, changing nothing (a channel group
        checks every channel before it applies a command to any)."""
        if command.multichannel:
            raise StateError("the channel layout is fixed once the stream has started")
        self._config.pinned.check(command.audio)
        renamed = command.stream_id is not None and command.stream_id != self._stream_id
        rehooked = command.webhook_url is not None and command.webhook_url != self._webhook_url
        if (renamed or rehooked) and self._audio is not None:
            raise StateError("the stream id and webhook are fixed once the stream has started")
        # Format and turn detection shape the audio already buffered; options do not.
        flowing = self._decoder is not None and self._decoder.samples_in > 0
        changed = command.audio != self._audio or command.options.turns != self._options.turns
        recut = command.options.commit not in (None, self._options.commit)
        if flowing and (changed or recut):
            raise StateError(
                "the audio format, turn detection and commit mode are fixed once audio flows"
            )
        hotwords = self._config.pinned.apply(command).options.hotwords
        refused = self._config.hotword_refusal(hotwords)
        if refused is not None:
            raise UnsupportedHotwordError(refused)

    def _configure(self, command: Configure) -> None:
        self.check_configure(command)
        command = self._config.pinned.apply(command)
        # The stream id and webhook come with the first Configure and never change.
        self._stream_id = command.stream_id or self._stream_id
        self._webhook_url = command.webhook_url or self._webhook_url
        if self._decoder is None or self._decoder.samples_in == 0:
            self._start_stream(command)
        self._announce(command)

    def _announce(self, command: Configure) -> None:
        # The effective hotwords (the stream's own, then the server's) are what decoding
        # uses and what `Configured` reports.
        own = command.options.hotwords
        redaction = self._config.redaction.adding(command.options.redact)
        options = replace(
            command.options,
            hotwords=merged_hotwords(own, self._config.hotwords),
            redact=redaction,
            commit=command.options.commit or self._config.commits.mode,
            diarize=_either(command.options.diarize, self._config.diarize),
            confidence=_either(command.options.confidence, self._config.confidence),
        )
        self._options = options
        if options.diarize and self._speakers is None:
            self._speakers = StreamSpeakers(self.speaker_policy, keep=self._config.keep_voices)
        self._redact_with(redaction)
        limits = self._config.limits
        rate = limits.max_replay_rate if command.options.pace == "replay" else limits.max_rate
        self._meter = self._meter.with_rate(rate, limits.burst_s)
        config = self._config
        self._events.append(
            Configured(
                self.session_id,
                command.audio,
                options,
                config.model_name,
                config.test_model,
                stream_id=self._stream_id,
                demo_model=config.demo_model,
                webhook_url=self._webhook_url,
            )
        )

    def _start_stream(self, command: Configure) -> AudioDecoder:
        """Before any audio: the decoder, VAD and segmenter follow the requested settings."""
        self._audio = command.audio
        self._decoder = AudioDecoder(command.audio)
        turns = command.options.turns
        vad = self._config.vad
        if turns.end_silence_ms is not None:
            vad = replace(vad, end_silence_ms=turns.end_silence_ms)
        segmenter = self._config.segmenter
        if turns.preroll_ms is not None:
            segmenter = replace(segmenter, preroll_ms=turns.preroll_ms)
        self._vad = self._vad_model.new_stream(vad)
        self._segmenter = Segmenter(segmenter)
        return self._decoder

    def _receive_audio(self, data: bytes, now: float) -> None:
        decoder = self._decoder
        if decoder is None:  # audio alone means the defaults (16 kHz s16le mono), or the pins
            implied = self._config.pinned.apply(Configure(self._config.pinned.audio))
            decoder = self._start_stream(implied)
            self._announce(implied)
        samples = decoder.decode(data)
        self._meter.admit(len(samples), now)
        self._held.append(samples)
        self._take_held(now, inline=not self._defers_vad)

    @property
    def _commits(self) -> bool:
        """Whether this stream commits text at the pauses inside its utterances."""
        return self._options.commit == "pauses"

    @property
    def _defers_vad(self) -> bool:
        return self._config.defer_vad and self._options.turns.vad and not self._stopped

    def _take_held(self, now: float, inline: bool) -> None:
        """Held audio into the ring as far as it has room, never over audio not yet judged.

        Inline, each piece is judged before the next is written, so a frame of any length
        fits; deferred, what has no room waits for the VAD job that makes it.
        """
        while self._held:
            room = self._config.margin_samples - (self._ring.end - self._fed)
            if room <= 0:
                return
            samples = self._held.popleft()
            if len(samples) > room:
                self._held.appendleft(samples[room:])
                samples = samples[:room]
            self._ring.write(samples)
            if inline:
                self._run_blocks_inline(now)

    def _commit(self, now: float, required: bool) -> None:
        """End the open utterance here; `required`: having none is the client's error."""
        self._flush_audio(now, final=False)
        if self._segmenter.open_utt_id is None:
            if not required:
                return
            raise EmptyCommitError("there is no uncommitted audio to commit")
        for event in self._segmenter.commit(self._fed):
            self._on_segment(event, now, StopCause.COMMIT)
        self._deliver_finals(now)

    def _clear(self, now: float) -> None:
        self._flush_audio(now, final=False)
        dropped, reopened = self._segmenter.clear(self._fed)
        if dropped is not None:
            self._utts.pop(dropped, None)  # answers still on their way are ignored
        self._events.append(Cleared(dropped))
        for event in reopened:
            self._on_segment(event, now, StopCause.VAD)

    # ---- internals ----------------------------------------------------------------

    def _flush_audio(self, now: float, final: bool) -> None:
        """Hand every buffered sample to the VAD, the last partial block included."""
        if final and self._decoder is not None:
            self._held.append(self._decoder.flush())
        self._run_blocks_inline(now)  # whole blocks a deferred VAD has not had yet
        self._take_held(now, inline=True)
        if self._ring.end > self._fed or final:
            self._feed_vad(self._ring.end, now, final=final)

    def _run_blocks_inline(self, now: float) -> None:
        block = self._config.block_samples
        ends = range(self._fed + block, self._ring.end + 1, block)
        if not self._options.turns.vad:
            for until in ends:
                self._apply_step(VadStep(until, (), None), now, final=False)
            return
        self._check_no_vad_job()
        verdicts = self._vad.accept_blocks([self._ring.read(u - block, u) for u in ends])
        for until, verdict in zip(ends, verdicts, strict=True):
            self._apply_step(VadStep(until, verdict.events, verdict.pending_end), now, False)

    def _check_no_vad_job(self) -> None:
        if self._vad_job is not None:
            raise RuntimeError("the VAD was asked inline while a job of its is out")

    def _feed_vad(self, until: int, now: float, final: bool) -> None:
        self._check_no_vad_job()
        events: list[VadEvent] = []
        if self._options.turns.vad:
            events = self._vad.accept(self._ring.read(self._fed, until))
            if final:
                events += self._vad.flush()
        step = VadStep(until, tuple(events), self._vad.pending_end())
        self._apply_step(step, now, final)

    def _apply_step(self, step: VadStep, now: float, final: bool) -> None:
        before, until = self._fed, step.until
        if self._options.turns.vad:
            segments = self._segmenter.block(list(step.events), until, self._ring.start)
        else:
            opened = self._segmenter.open_unless_open(before) if until > before else []
            segments = opened + self._segmenter.block([], until, self._ring.start)
        self._fed = until
        self._pending_end = step.pending_end
        if self._commits:
            self._skip_pause(before)
        for seg in segments:
            self._on_segment(seg, now, StopCause.MAX_LENGTH if seg.forced else StopCause.VAD)
        self._withdraw_obsolete_early()
        if final:
            return
        if self._commits:
            self._maybe_commit(now)
            self._maybe_partial(now)
        elif not self._maybe_early_final(now):
            self._maybe_partial(now)

    def _withdraw_obsolete_early(self) -> None:
        """Drop an early decode not yet handed out whose pause is over or ended elsewhere.

        Audio that arrives faster than real time (a replay, a burst after a stall) runs
        many blocks through the VAD in one call: a pause long enough for an early decode
        is often followed, within the same call, by more speech. That decode can no longer
        be the final, and there is no partial to show from it that a later one would not
        replace, so it never reaches the engine.
        """
        if not self._requests:
            return  # everything made so far has been handed out (live audio, every call)
        for utt in self._utts.values():
            early = utt.early
            if early is None or utt.final_request is early:
                continue
            early_end = early.start_sample + early.num_samples
            pausing = not utt.final_requested and self._pending_end == early_end
            if pausing or not any(r is early for r in self._requests):
                continue
            self._requests.remove(early)
            utt.early = None

    def _on_segment(self, seg: SegmentEvent, now: float, cause: StopCause) -> None:
        if seg.kind is SegmentEventKind.STARTED:
            self._utts[seg.utt_id] = self._new_utterance(seg.start)
            self._events.append(SpeechStarted(seg.utt_id, samples_to_ms(seg.start)))
            return
        utt = self._utts.get(seg.utt_id) or self._new_utterance(seg.start)
        self._utts[seg.utt_id] = utt
        utt.final_requested = True
        utt.decided = self._fed
        self._owed[seg.utt_id] = None
        self._events.append(
            SpeechStopped(seg.utt_id, samples_to_ms(seg.start), samples_to_ms(seg.end), cause)
        )
        if seg.discarded:
            # Too short to be speech: answer the speech_started without a decode.
            empty = empty_transcript(self._options.itn)
            self._owed[seg.utt_id] = self._final_event(seg.utt_id, seg.start, seg.end, empty)
            return
        if utt.pieces is not None:
            self._close_pieces(seg, utt, now)
            return
        if self._early_decode_is_final(utt, seg, now):
            return
        audio = self._ring.read(seg.start, seg.end)
        kind = RequestKind.BACKGROUND if self._config.background else RequestKind.FINAL
        utt.final_request = self._request(seg, kind, audio, now)
        self._requests.append(utt.final_request)

    def _new_utterance(self, start: int) -> _Utterance:
        policy = self._config.partials
        pieces = PieceTrack(start) if self._commits else None
        window = PartialWindow(start, policy.hold_ms, policy.context_ms)
        return _Utterance(start, start, window, pieces=pieces)

    def _close_pieces(self, seg: SegmentEvent, utt: _Utterance, now: float) -> None:
        """The utterance ended: its last piece is decoded (unless it holds too little to,
        or only the pause a commit was cut at), and the final is its pieces' text once
        every one is back."""
        pieces = utt.pieces
        if pieces is None:
            return
        start = pieces.open_start
        if seg.end - start < self._config.commits.window_samples or pieces.paused_at is not None:
            pieces.close(seg.end, None)
        else:
            last = replace(seg, start=start)
            kind = RequestKind.BACKGROUND if self._config.background else RequestKind.FINAL
            utt.final_request = self._request(last, kind, self._ring.read(start, seg.end), now)
            pieces.close(seg.end, utt.final_request.request_id)
            self._requests.append(utt.final_request)
        self._settle_pieces(seg.utt_id, utt, now)

    def _piece_answered(
        self, req: RequestRef, utt: _Utterance, result: InferenceResult, now: float
    ) -> None:
        pieces = utt.pieces
        if pieces is None:
            return
        if result.transcript is None:
            why = f"utterance {req.utterance_id} could not be decoded: {result.error_message}"
            pieces.fail(req.request_id, result.error_code or "decode_failed", why)
        else:
            pieces.answer(req.request_id, result.transcript)
        for commit in pieces.commits():
            # Redaction decides on whole finals (a card read across pauses): with it on,
            # text is promised only by the final.
            if self._redactor is None:
                start, end = samples_to_ms(commit.start), samples_to_ms(commit.end)
                utt_id = req.utterance_id
                self._events.append(Committed(utt_id, start, end, commit.text, commit.tokens))
        self._settle_pieces(req.utterance_id, utt, now)

    def _settle_pieces(self, utt_id: int, utt: _Utterance, now: float) -> None:
        """The final (or failure) owed for a closed utterance whose pieces are all back."""
        pieces = utt.pieces
        if pieces is None or self._owed.get(utt_id, 0) is not None:
            return
        start, end = samples_to_ms(pieces.utt_start), samples_to_ms(pieces.open_start)
        if pieces.failure is not None:
            code, message = pieces.failure
            self._owed[utt_id] = Failed(utt_id, start, end, code, message)
        elif pieces.complete:
            transcript = pieces.transcript(self._options.itn)
            final = self._final_event(utt_id, pieces.utt_start, pieces.open_start, transcript)
            self._owed[utt_id] = final
        else:
            return
        self._deliver_finals(now)

    def _open_with_pieces(self) -> tuple[int, _Utterance, PieceTrack] | None:
        """The open utterance, when it is cut into pieces (`commit: "pauses"`)."""
        utt_id = self._segmenter.open_utt_id
        utt = None if utt_id is None else self._utts.get(utt_id)
        if utt_id is None or utt is None or utt.pieces is None:
            return None
        return utt_id, utt, utt.pieces

    def _maybe_commit(self, now: float) -> None:
        """Commit the open piece at a pause inside the utterance, or at its quietest point
        once it runs past its longest (`CommitPolicy`); its decode is part of the final."""
        open_utt = self._open_with_pieces()
        if open_utt is None:
            return
        utt_id, utt, pieces = open_utt
        cut = self._commit_point(pieces.open_start)
        if cut is None:
            return
        seg = SegmentEvent(SegmentEventKind.STARTED, utt_id, pieces.open_start)
        # A cut in a pause (at its start, or a longest piece's quietest point in it):
        # the next piece waits for the speech after it, and this one is decoded with the
        # pause heard so far after it, as a final is with its end silence.
        pause = self._pending_end
        in_pause = pause is not None and pause <= cut
        tail = min(self._fed, cut + self._config.commits.silence_samples) if in_pause else cut
        request = self._request(seg, RequestKind.FINAL, self._ring.read(seg.start, tail), now)
        pieces.cut(cut, request.request_id, pause if in_pause else None)
        self._requests.append(request)
        # Partials decode the open piece alone from here.
        policy = self._config.partials
        utt.window = PartialWindow(cut, policy.hold_ms, policy.context_ms)
        utt.partial_end = cut

    def _skip_pause(self, block_start: int) -> None:
        """Speech resumed (in the block from `block_start`) inside the pause the open piece
        began at: the piece begins a block and the preroll before that block, not where
        the pause began. A model given a second of quiet ahead of speech may hear words in
        it; the pause's end is the audio's, so every path skips alike."""
        open_utt = self._open_with_pieces()
        if open_utt is None or open_utt[2].paused_at is None:
            return
        _, utt, pieces = open_utt
        if self._pending_end == pieces.paused_at:
            return  # still the same pause
        back = self._config.block_samples + self._config.segmenter.preroll_samples
        pieces.resume(block_start - back)
        policy = self._config.partials
        utt.window = PartialWindow(pieces.open_start, policy.hold_ms, policy.context_ms)

    def _commit_point(self, piece_start: int) -> int | None:
        """Where the open piece (from `piece_start`) is cut now, if anywhere."""
        policy = self._config.commits
        pause = self._pending_end
        paused = pause is not None and self._fed - pause >= policy.silence_samples
        if paused and pause is not None and pause - piece_start >= policy.min_samples:
            return pause
        if self._fed - piece_start < policy.max_samples:
            return None
        if pause is not None and policy.min_samples <= pause - piece_start and pause <= self._fed:
            return pause  # a pause has begun, not yet as long as the commit silence
        # Speech that runs on: its quietest stretch in the open piece's second half.
        begin = piece_start + policy.max_samples // 2
        audio = self._ring.read(begin, self._fed)
        return quietest_cut(audio, begin, policy.window_samples)

    def _early_decode_is_final(self, utt: _Utterance, seg: SegmentEvent, now: float) -> bool:
        """The pause lasted: the early decode of exactly this span becomes the final."""
        early = utt.early
        if early is None or seg.forced or early.start_sample != seg.start:
            return False
        if early.start_sample + early.num_samples != seg.end:
            return False
        utt.final_request = early
        result = utt.early_result
        if result is not None:
            utt.early_result = None
            self.receive_result(result, now)
        return True

    def _maybe_early_final(self, now: float) -> bool:
        """Decode the open utterance up to the VAD's pending end once a pause is long enough.

        Sent with a final's priority; if the pause lasts, its answer is the final and the
        end-silence no longer adds a decode's time to the wait. If speech resumes, its
        answer still shows as a partial.
        """
        utt_id = self._segmenter.open_utt_id
        start = self._segmenter.open_start
        early_ms = self._config.early_final_ms
        if utt_id is None or start is None or early_ms == 0 or not self._options.turns.vad:
            return False
        end = self._pending_end
        utt = self._utts.get(utt_id)
        if end is None or utt is None or end <= start:
            return False
        if self._fed - end < early_ms * SAMPLE_RATE // 1000:
            return False
        if utt.early is not None and utt.early.start_sample + utt.early.num_samples == end:
            return False  # this pause already has its decode
        seg = SegmentEvent(SegmentEventKind.STARTED, utt_id, start)
        utt.early = self._request(seg, RequestKind.EARLY, self._ring.read(start, end), now)
        utt.early_result = None
        utt.last_partial = self._fed
        self._requests.append(utt.early)
        return True

    def _maybe_partial(self, now: float) -> None:
        utt_id = self._segmenter.open_utt_id
        start = self._segmenter.open_start
        if utt_id is None or start is None or not self._toggle("partials"):
            return
        utt = self._utts.get(utt_id)
        if utt is None or not self._config.partials.due(start, utt.last_partial, self._fed):
            return
        if utt.pieces is not None and self._commit_coming(utt.pieces):
            return  # due still: it goes out once speech resumes, if no commit came first
        if self._pending_end is not None and self._pending_end <= utt.last_partial:
            # A pause the last decode already reached: nothing new to caption, so the pause
            # counts as heard and the next partial waits for an interval of fresh audio.
            utt.last_partial = self._fed
            return
        utt.last_partial = self._fed
        begin = utt.window.window_start()
        seg = SegmentEvent(SegmentEventKind.STARTED, utt_id, begin)
        audio = self._ring.read(begin, self._fed)
        self._requests.append(self._request(seg, RequestKind.PARTIAL, audio, now))

    def _commit_coming(self, pieces: PieceTrack) -> bool:
        """Whether a partial of the open piece now would be wasted: a pause has begun
        after enough of it to be cut there (the commit, a moment away, decodes the same
        audio and shows its text for good), or it has been cut and speech has not resumed
        (a partial would decode only the pause's quiet)."""
        if pieces.paused_at is not None:
            return True
        pause = self._pending_end
        return pause is not None and pause - pieces.open_start >= self._config.commits.min_samples

    def _request(
        self, seg: SegmentEvent, kind: RequestKind, audio: np.ndarray, now: float
    ) -> InferenceRequest:
        self._request_ids += 1
        return InferenceRequest(
            self.session_id,
            seg.utt_id,
            kind,
            audio,
            self._decode_options(kind),
            now,
            seg.start,
            request_id=self._request_ids,
            bulk=self._options.pace == "replay",
        )

    def _emit_partial(self, req: RequestRef, utt: _Utterance, t: Transcript) -> None:
        end = req.start_sample + req.num_samples
        if end <= utt.partial_end:
            return  # an early decode answered after a longer partial: keep the newer text
        pieces = utt.pieces
        if pieces is not None and req.start_sample < pieces.open_start:
            return  # it decoded audio a committed piece holds now
        utt.partial_end = end
        text = utt.window.accept(req.start_sample, end, t)
        stable = SETTLED_CHARS
        if pieces is not None and self._redactor is None:
            # The committed text, which the final starts with, then the open piece's.
            stable = len(pieces.committed_text)
            text = appended(pieces.committed_text, text)
        tags = {"lang": t.lang}
        if self._toggle("emotion"):
            tags["emotion"] = t.emotion
        if self._toggle("event"):
            tags["event"] = t.event
        start_ms = samples_to_ms(utt.start)
        shown = Partial(req.utterance_id, start_ms, samples_to_ms(end), text, stable, tags)
        self._events.append(shown if self._redactor is None else self._redactor.partial(shown))

    def _final_event(self, utt_id: int, start: int, stop: int, transcript: Transcript) -> Final:
        show = {name: self._toggle(name) for name in ("emotion", "event", "timestamps")}
        utt = self._utts.get(utt_id)
        decided = None if utt is None or utt.decided is None else samples_to_ms(utt.decided)
        return Final(utt_id, samples_to_ms(start), samples_to_ms(stop), transcript, show, decided)

    def _deliver_finals(self, now: float) -> None:
        # Finals go out in utterance order even when the engine answers out of order.
        for utt_id in sorted(self._owed):
            event = self._owed[utt_id]
            if event is None:
                break
            self._events.extend(self._outgoing(self._with_speakers(utt_id, event), now))
            del self._owed[utt_id]
            self._utts.pop(utt_id, None)
        if self._stopped and not self._owed and not self._end_sent:
            if self._redactor is not None:  # a final held for a card's next part: now
                self._events.extend(self._redactor.release())
            self._events.append(Ended())
            self._end_sent = True

    def _with_speakers(self, utt_id: int, event: SessionEvent) -> SessionEvent:
        """A final labelled with who spoke (with diarization), from its decodes' voices."""
        utt = self._utts.get(utt_id)
        if self._speakers is None or utt is None or not isinstance(event, Final):
            return event
        if utt.pieces is not None:
            ids = utt.pieces.request_ids()
        else:
            ids = [] if utt.final_request is None else [utt.final_request.request_id]
        return self._speakers.labelled(event, [utt.voices[i] for i in ids if i in utt.voices])

    def _outgoing(self, event: SessionEvent, now: float) -> list[SessionEvent]:
        """An owed final or failure as it goes out: redacted, maybe after a held final."""
        if self._redactor is None:
            return [event]
        if isinstance(event, Final):
            return list(self._redactor.final(event, now))
        return [*self._redactor.release(), event]

    def _redact_with(self, redaction: Redaction) -> None:
        """Redact with these policies from now on (a final held by the old ones goes out)."""
        current = self._redactor
        if current is not None and current.redaction == redaction:
            return
        if current is not None:
            self._events.extend(current.release())
        self._redactor = EventRedactor(redaction, self._spoken) if redaction else None

    def release_held(self) -> list[Final]:
        """The finals redaction holds, out now: the client went away mid-stream, and its
        followers and webhooks are still owed what was said."""
        return [] if self._redactor is None else list(self._redactor.release())

    def _release_due(self, now: float) -> None:
        if self._redactor is not None:
            # The speaker may be saying the held card's next part: an open utterance, or
            # one whose final is on its way.
            busy = self._segmenter.open_utt_id is not None or bool(self._owed)
            self._events.extend(self._redactor.due(now, busy))

    def _decode_options(self, kind: RequestKind) -> DecodeOptions:
        options = self._options
        # Who spoke, and how sure the model is, are asked of the decodes a final is made
        # of, never of partials.
        final = kind is not RequestKind.PARTIAL
        return DecodeOptions(
            options.language,
            options.itn,
            options.hotwords,
            speaker=bool(options.diarize) and final,
            confidence=bool(options.confidence) and final,
        )

    def _toggle(self, name: str) -> bool:
        return bool(getattr(self._options, name))


def _either(chosen: bool | None, default: bool) -> bool:
    return default if chosen is None else chosen


def _name(command: Command) -> str:
    return type(command).__name__.lower()
