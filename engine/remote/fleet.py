"""Fleet: a gateway's bookkeeping of remote replicas, with no I/O.

Each session is pinned to one replica while it lives, so a newer partial replaces an
older one and a cancellation reaches every request the session has queued. Every final
(and early or background decode) is owed until its answer arrives; when a replica is lost
its sessions move to the least-loaded live replica and their owed requests are sent
again. An answer is taken once, the first to arrive, so a final reaches its session
exactly once however many replicas were asked.

While no replica is known, requests wait here, within a bound on their audio: a newer
partial replaces its session's older one, past the bound waiting partials are dropped
first, and an owed request that still does not fit fails at once with `NoReplicaError`'s
code (`take_failed` hands those answers over).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.errors import NoReplicaError
from engine.remote.messages import Tick
from engine.types import SAMPLE_RATE, InferenceRequest, InferenceResult, RequestKind

#: Seconds of audio that may wait for a replica while a gateway has none. Only sessions
#: already open add to it (a gateway with no replica is unhealthy, and refuses new ones),
#: so it needs to outlast a short gap between one replica lost and the next attached, and
#: no more: it caps what an outage can pile up here at 38 MB (16 kHz float32), about 40
#: finals of the longest segment (15 s) or 120 of a typical 5 s.
DEFAULT_HOMELESS_AUDIO_S = 600.0


@dataclass
class _Replica:
    sessions: set[str] = field(default_factory=set)
    requests: list[InferenceRequest] = field(default_factory=list)
    cancels: list[str] = field(default_factory=list)


class Fleet:
    """Pins, outboxes and owed requests of one gateway's sessions across replicas."""

    def __init__(self, gateway: str, *, homeless_audio_s: float = DEFAULT_HOMELESS_AUDIO_S) -> None:
        if homeless_audio_s < 0:
            raise ValueError(f"homeless_audio_s must be >= 0; got {homeless_audio_s}")
        self.gateway = gateway
        self._homeless_limit = round(homeless_audio_s * SAMPLE_RATE)  # in samples
        self._replicas: dict[str, _Replica] = {}
        self._open: set[str] = set()
        self._pins: dict[str, str] = {}
        self._owed: dict[tuple[str, int], InferenceRequest] = {}
        self._homeless: list[InferenceRequest] = []  # sent once a replica is known
        self._failed: list[InferenceResult] = []  # owed requests refused: no room to wait
        self.resent = 0  # owed requests handed to another replica after theirs was lost
        self.partials_dropped = 0  # waiting partials replaced or dropped for room

    @property
    def replicas(self) -> tuple[str, ...]:
        return tuple(self._replicas)

    @property
    def owed(self) -> int:
        return len(self._owed)

    def pinned_to(self, session_id: str) -> str | None:
        return self._pins.get(session_id)

    def add(self, replica: str) -> set[str]:
        """A replica joins; requests that waited for one go to it. Returns replicas to wake."""
        if replica in self._replicas:
            return set()
        self._replicas[replica] = _Replica()
        waiting, self._homeless = self._homeless, []
        return {r for r in map(self._route, waiting) if r is not None}

    def open(self, session_id: str) -> None:
        if session_id in self._open:
            raise ValueError(f"session {session_id!r} is already open")
        self._open.add(session_id)

    def submit(self, request: InferenceRequest) -> str | None:
        """Queue a request for its session's replica; None while no replica is known."""
        if request.session_id not in self._open:
            raise ValueError(f"session {request.session_id!r} is not open")
        if request.kind is not RequestKind.PARTIAL:
            self._owed[(request.session_id, request.request_id)] = request
        return self._route(request)

    def cancel(self, session_id: str) -> tuple[int, str | None]:
        """Forget a session: (its requests dropped here, the replica to tell, if any)."""
        self._open.discard(session_id)
        dropped = {key for key in self._owed if key[0] == session_id}
        for key in dropped:
            del self._owed[key]
        dropped |= {
            (r.session_id, r.request_id) for r in self._homeless if r.session_id == session_id
        }
        self._homeless = [r for r in self._homeless if r.session_id != session_id]
        replica = self._pins.pop(session_id, None)
        if replica is None:
            return len(dropped), None
        state = self._replicas[replica]
        state.sessions.discard(session_id)
        dropped |= {
            (r.session_id, r.request_id) for r in state.requests if r.session_id == session_id
        }
        state.requests = [r for r in state.requests if r.session_id != session_id]
        state.cancels.append(session_id)
        return len(dropped), replica

    def take(self, replica: str) -> Tick:
        """Everything queued for `replica` since the last tick, as one call."""
        state = self._replicas.get(replica)
        if state is None:
            return Tick(self.gateway)
        tick = Tick(self.gateway, tuple(state.requests), tuple(state.cancels))
        state.requests, state.cancels = [], []
        return tick

    def accept(self, replica: str, results: tuple[InferenceResult, ...]) -> list[InferenceResult]:
        """The results to deliver: an owed answer the first time it comes, and partials
        from the replica the session is pinned to; nothing for ended sessions."""
        out = []
        for result in results:
            ref = result.ref
            if ref.session_id not in self._open:
                continue
            owed = self._owed.pop((ref.session_id, ref.request_id), None) is not None
            live = ref.kind is RequestKind.PARTIAL and self._pins.get(ref.session_id) == replica
            if owed or live:
                out.append(result)
        return out

    def lose(self, replica: str) -> set[str]:
        """A replica is gone: move its sessions on and send their owed requests again.
        Returns the replicas that now have work to send."""
        state = self._replicas.pop(replica, None)
        if state is None:
            return set()
        moved = state.sessions
        for session_id in moved:
            del self._pins[session_id]
        owed = sorted(
            (r for r in self._owed.values() if r.session_id in moved),
            key=lambda r: (r.session_id, r.request_id),
        )
        # A partial not yet sent may as well go too; one in flight is simply superseded.
        unsent = [r for r in state.requests if r.kind is RequestKind.PARTIAL]
        self.resent += len(owed)
        return {r for r in map(self._route, owed + unsent) if r is not None}

    def take_failed(self) -> list[InferenceResult]:
        """The error answers of owed requests refused since the last call, for their sessions."""
        failed, self._failed = self._failed, []
        return failed

    def _route(self, request: InferenceRequest) -> str | None:
        replica = self._pins.get(request.session_id) or self._least_loaded()
        if replica is None:
            self._wait(request)
            return None
        state = self._replicas[replica]
        if request.session_id not in state.sessions:
            state.sessions.add(request.session_id)
            self._pins[request.session_id] = replica
        state.requests.append(request)
        return replica

    def _wait(self, request: InferenceRequest) -> None:
        """Keep `request` until a replica is known, if its audio fits within the bound."""
        # A partial replaces its session's older one, and is dropped if it does not fit;
        # an owed request makes room by dropping partials, oldest first, or else fails
        # (dropping none, when all of them would not be room enough).
        partial = request.kind is RequestKind.PARTIAL
        if partial:
            kept = [r for r in self._homeless if not _partial_of(r, request.session_id)]
            self.partials_dropped += len(self._homeless) - len(kept)
            self._homeless = kept
        waiting = sum(r.num_samples for r in self._homeless)
        over = waiting + request.num_samples - self._homeless_limit
        droppable = sum(r.num_samples for r in self._homeless if r.kind is RequestKind.PARTIAL)
        if 0 < over <= droppable and not partial:
            over -= self._drop_partials(over)
        if over <= 0:
            self._homeless.append(request)
        elif partial:
            self.partials_dropped += 1
        else:
            self._fail(request)

    def _fail(self, request: InferenceRequest) -> None:
        """Settle an owed request with an error answer: it has no room to wait."""
        self._owed.pop((request.session_id, request.request_id), None)
        limit_s = self._homeless_limit / SAMPLE_RATE
        why = (
            f"no engine replica is attached, and the wait for one is full ({limit_s:g} s of audio)"
        )
        self._failed.append(InferenceResult(request.ref, None, NoReplicaError.code, why))

    def _drop_partials(self, samples: int) -> int:
        """Drop waiting partials, oldest first, until `samples` are freed; the samples freed."""
        freed = 0
        for waiting in [r for r in self._homeless if r.kind is RequestKind.PARTIAL]:
            if freed >= samples:
                break
            self._homeless.remove(waiting)
            self.partials_dropped += 1
            freed += waiting.num_samples
        return freed

    def _least_loaded(self) -> str | None:
        if not self._replicas:
            return None
        return min(self._replicas, key=lambda r: len(self._replicas[r].sessions))


def _keys_of(requests: list[InferenceRequest], session_id: str) -> set[tuple[str, int]]:
    return {(r.session_id, r.request_id) for r in requests if r.session_id == session_id}


def _partial_of(request: InferenceRequest, session_id: str) -> bool:
    return request.kind is RequestKind.PARTIAL and request.session_id == session_id
