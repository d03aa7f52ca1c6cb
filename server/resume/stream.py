"""One v1 stream's side of resuming: what its connection keeps so that a client whose
socket dropped can take the stream up on a new one, with every final exactly once.

Sans-I/O: the connection calls it as frames go out and come in. It keeps the finals (and
the errors that take a failed utterance's place) most recently handed to the socket, as
any of them may have been lost with it; acknowledges the audio taken, about once a
second; and, on a resume, checks where the client's resent audio begins and trims what
the stream already has.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from server.resume.handover import Handover
from streaming.errors import ResumeRefusedError
from streaming.events import Acked, Configured, Failed, Final, Resumed, SessionEvent
from streaming.protocols.v1.codec import ResumeRequest, V1Codec

#: Finals kept for a resuming client: more than a grace period's worth of utterances.
REPLAY_FINALS = 256
#: Audio acknowledged about this often (seconds of the stream's audio).
ACK_EVERY_S = 1.0
#: Acknowledgements stay at least this far behind the audio taken (and never pass what
#: the session has settled, `Session.settled_ms`), so the client still holds what a
#: hand-over goes back to.
ACK_BEHIND_S = 0.5


class Resumption:
    """A resumable stream's replay log, acknowledgements and resent-audio trim."""

    def __init__(self, codec: V1Codec, token_for: Callable[[str], str]) -> None:
        self.codec = codec
        self._token_for = token_for
        codec.resume_token_for = token_for
        self.stream_id = ""  # known once configured
        self.resumable = False  # configured
        self.channels = 0  # a multichannel stream's (its finals count per channel), else 0
        self._sent: deque[Final | Failed] = deque(maxlen=REPLAY_FINALS)
        self._acked = 0
        self._skip_bytes = 0  # of the resent audio, what the stream already has
        self._next_utt_id = 0  # past every utterance the client was told of
        self._decided_ms = 0  # where the last final (or failure) handed out ends

    def adopted(self, handover: Handover) -> None:
        """This stream goes on from one another worker handed over."""
        self.stream_id = handover.stream_id
        self._sent.extend(handover.finals)
        self._next_utt_id = handover.next_utt_id
        self._acked = handover.samples
        self._decided_ms = handover.clock_ms

    def handover_ms(self, sample_rate: int) -> int:
        """Where a hand-over now would go on from: the last final's end, or the last ack
        when that is later (the client holds nothing before it)."""
        return max(self._decided_ms, self._acked * 1000 // sample_rate)

    def handover(
        self, session_id: str, key: str, sample_rate: int, reopen: int | None = None
    ) -> Handover:
        """The stream as this worker leaves it (every final owed handed out first), to go
        on from `handover_ms`: the next worker's VAD hears the whole pause (or the whole
        utterance this one dropped unfinished, `reopen`, numbered as it was) again."""
        decided = self._decided_ms * sample_rate // 1000
        samples = min(self.codec.samples_taken, max(self._acked, decided))
        return Handover(
            session_id,
            key,
            self.stream_id,
            self.codec.start_text,
            samples,
            samples * 1000 // sample_rate,
            self._next_utt_id if reopen is None else reopen,
            tuple(self._sent),
        )

    def configured(self, event: Configured) -> None:
        self.stream_id = event.stream_id
        self.resumable = True
        self.channels = len(event.channel_labels)

    def handed(self, event: SessionEvent) -> None:
        """An event is being written to the socket (which may drop it unread)."""
        if isinstance(event, Final | Failed):
            self._sent.append(event)
            self._decided_ms = max(self._decided_ms, event.end_ms)
        utt_id = getattr(event, "utt_id", None)
        if isinstance(utt_id, int):
            self._next_utt_id = max(self._next_utt_id, utt_id + 1)

    def ack(self, sample_rate: int, settled_ms: int | None = None) -> Acked | None:
        """An acknowledgement, when a second or more of audio came since the last; never
        past `settled_ms` (the session's `settled_ms`: audio another worker may need)."""
        behind = max(0, self.codec.samples_taken - int(ACK_BEHIND_S * sample_rate))
        if settled_ms is not None:
            behind = min(behind, settled_ms * sample_rate // 1000)
        if behind - self._acked < ACK_EVERY_S * sample_rate:
            return None
        self._acked = behind
        return Acked(behind)

    def resume(self, request: ResumeRequest, *, stopped: bool) -> list[SessionEvent]:
        """Take a client's resume: `resumed`, then the finals handed out after the last it
        got; raises ResumeRefusedError when its audio would leave a gap. `stopped`: the
        stream has had its `stop` (the client sends nothing more)."""
        taken = self.codec.samples_taken
        if request.samples > taken:
            raise ResumeRefusedError(
                f"start.resume.samples is {request.samples}, but the stream has {taken} "
                "samples of audio: resend from at most that"
            )
        last = self._last_finals(request)
        self._skip_bytes = (taken - request.samples) * self.codec.bytes_per_frame
        self._acked = request.samples

        def owed(event: Final | Failed) -> bool:
            seen = last.get(event.channel)
            return seen is None or event.utt_id > seen

        replay = [e for e in self._sent if owed(e)]
        return [Resumed(taken, self._token_for(self.stream_id), stopped), *replay]

    def _last_finals(self, request: ResumeRequest) -> dict[int | None, int | None]:
        """The last final the client got, by channel (None: the stream's one channel)."""
        if not self.channels:
            return {None: request.last_utt_id}
        per_channel = request.last_utt_ids
        if per_channel is None or len(per_channel) != self.channels:
            raise ResumeRefusedError(
                f"a stream of {self.channels} channels is resumed with start.resume."
                "last_utt_ids, the last final received on each channel (null: none)"
            )
        return dict(enumerate(per_channel))

    def trim(self, message: bytes) -> bytes:
        """Resent audio, less what the stream already took before the drop."""
        if self._skip_bytes <= 0:
            return message
        cut = min(self._skip_bytes, len(message))
        self._skip_bytes -= cut
        # Counted once: the codec counts what it is given.
        return message[cut:]
