"""This worker's streams whose client dropped, each waiting out its grace for the client to
come back (one owner: the app; the connections park and leave themselves)."""

from __future__ import annotations

from typing import Generic, TypeVar

T = TypeVar("T")


class ParkedStreams(Generic[T]):
    """Parked streams by session id; a resume takes one out, and so does its grace's end."""

    def __init__(self) -> None:
        self._waiting: dict[str, T] = {}

    def park(self, session_id: str, stream: T) -> None:
        self._waiting[session_id] = stream

    def leave(self, session_id: str, stream: T) -> None:
        """The stream stops waiting (its grace ran out, or it is draining)."""
        if self._waiting.get(session_id) is stream:
            del self._waiting[session_id]

    def has(self, session_id: str) -> bool:
        return session_id in self._waiting

    def take(self, session_id: str) -> T | None:
        """The stream a resume names, if it is still waiting: it waits no more."""
        return self._waiting.pop(session_id, None)
