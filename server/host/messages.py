"""What workers and the supervisor say to each other over their channel: plain records.

Worker → supervisor calls: `Acquire`, `UseToken`, `OpenStream`, `ListStreams`, `Follow`,
`Gather`, `TakeUp`, `HandOver`.
Supervisor → worker calls: `Describe`, `Subscribe`, `Report`, `TakeUp`.
Notices: `Joined`, `Ready`, `GiveBackToken` (worker → supervisor); `Retire` (supervisor
→ worker); either way `Release`, `CloseStream`, `Relay`, `Unfollow`, `Pipe`, `HangUp`.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from server.host.admission import Kind
from server.resume.handover import Handover
from streaming.events import SessionEvent
from streaming.protocols.v1.codec import ResumeRequest


class Topic(StrEnum):
    """What a gather collects from every process."""

    STATS = "stats"
    METRICS = "metrics"


# ---- worker → supervisor ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Joined:
    """A worker's first notice on its channel: which worker it is."""

    worker: int
    pid: int


@dataclass(frozen=True, slots=True)
class Acquire:
    """A place of `kind` for `peer` (answered by a lease id or the refusing `Scope`);
    `peek` only asks whether one would fit (answered by a `Scope` or None)."""

    kind: Kind
    peer: str
    peek: bool = False
    force: bool = False  # over the limits: a stream admitted once, handed over


@dataclass(frozen=True, slots=True)
class Release:
    lease: int


@dataclass(frozen=True, slots=True)
class UseToken:
    """One more session of the client secret `token_id`, unless it has opened `limit`
    (answered True or False); `expires_at` and `now` say when its count may be dropped.
    `peek` only asks whether one would be counted."""

    token_id: str
    limit: int
    expires_at: float
    now: float
    peek: bool = False


@dataclass(frozen=True, slots=True)
class GiveBackToken:
    """A session counted for the client secret `token_id` was a resume: not counted."""

    token_id: str


@dataclass(frozen=True, slots=True)
class OpenStream:
    """A stream starts on the calling worker; answered True unless its key is taken."""

    key: str


@dataclass(frozen=True, slots=True)
class CloseStream:
    key: str


@dataclass(frozen=True, slots=True)
class ListStreams:
    """Every worker's live streams (`LiveStream.describe` dicts)."""


@dataclass(frozen=True, slots=True)
class Follow:
    """Follow the stream `key`, waiting up to `wait_s` for it to start; answered by a
    `Followed`. The caller names the follow (`worker.n`) and expects its `Relay`s under
    that id from the moment it asks."""

    key: str
    wait_s: float
    follow_id: str


class Followed(StrEnum):
    """Where a `Follow` found its stream."""

    HERE = "here"  # on the calling worker: it subscribes in its own hub
    RELAYED = "relayed"  # on another worker: its events come as `Relay` notices
    MISSING = "missing"  # no such live stream (it never started, or ended)
    FULL = "full"  # the stream has its most subscribers


@dataclass(frozen=True, slots=True)
class Gather:
    """Every process's stats or metrics, as the supervisor puts them together."""

    topic: Topic


@dataclass(frozen=True, slots=True)
class TakeUp:
    """A resume landed on a worker that does not hold its stream: the worker that runs the
    stream `key` takes it up (the supervisor passes the call on to it). Answered None when
    it did, the client's frames then going both ways as `Pipe` notices under `pipe_id`;
    a `Handover` when the stream's worker retired and the landing worker is to go on with
    it; else the refusal's message. The landing worker has checked the resume token."""

    key: str
    session_id: str
    request: ResumeRequest
    pipe_id: str
    peer: str


#: A stream worker's answer to a `TakeUp` while the stream is being handed over: the
#: supervisor waits for its `HandOver` and answers the landing worker with it.
MOVING = "the stream is moving to another worker"
#: How long a resume that reached a stream being handed over waits for its hand-over
#: (its worker waits at most a hand-off wait for a pause, then 10 s to settle).
HAND_OVER_WAIT_S = 30.0
#: Why a resume finds no stream (on the worker it reached, nor on any other).
NOT_WAITING = "the stream is not waiting to be resumed: it ended, or its grace ran out"


@dataclass(frozen=True, slots=True)
class HandOver:
    """A retiring worker gives up a stream for the worker its client resumes on (kept
    `wait_s`, the resume grace); answered once kept."""

    handover: Handover
    wait_s: float


@dataclass(frozen=True, slots=True)
class Ready:
    """The worker has loaded and takes connections."""

    worker: int


# ---- supervisor → worker ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Describe:
    """This worker's live streams."""


@dataclass(frozen=True, slots=True)
class Retire:
    """A reload replaces this worker: hand its streams on (v1 streams to the worker each
    resumes on, AudioHook's told to reconnect), drain the rest, and exit."""


@dataclass(frozen=True, slots=True)
class Subscribe:
    """Relay the stream `key` (on this worker) to the follow `follow_id`; answered by a
    `Followed` (RELAYED when it does)."""

    follow_id: str
    key: str


@dataclass(frozen=True, slots=True)
class Report:
    """This worker's stats (a dict) or metrics (exposition text)."""

    topic: Topic


# ---- either way ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Relay:
    """One event of a relayed stream, for the follow `follow_id` (in order)."""

    follow_id: str
    event: SessionEvent


class Why(StrEnum):
    """Why a follow ended (from the follower's side, always LEFT)."""

    LEFT = "left"  # the follower went away
    SLOW = "slow"  # the follower's worker could not take the relay fast enough
    LOST = "lost"  # the worker that ran the stream stopped


@dataclass(frozen=True, slots=True)
class Unfollow:
    """A follow is over; the supervisor passes it to the other end."""

    follow_id: str
    why: Why = Why.LEFT


@dataclass(frozen=True, slots=True)
class Pipe:
    """One WebSocket message of a piped resume, either way (in order)."""

    pipe_id: str
    data: str | bytes


@dataclass(frozen=True, slots=True)
class HangUp:
    """A piped resume is over. From the stream's worker: close the client's socket with
    `code` and the error code `error`, or drop it at once when `code` is None. From the
    landing worker: the client went away (`code`: its close code, None if unknown)."""

    pipe_id: str
    code: int | None = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class Gathered:
    """What `Gather` answers: the supervisor's view of the processes, and per worker its
    `Report` (None for a worker that did not answer)."""

    processes: dict[str, object]
    reports: tuple[object, ...]
