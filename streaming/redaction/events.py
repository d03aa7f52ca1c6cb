"""A session's events redacted before they leave it: finals (held while a card may go on),
partials, and the `redactions` each final reports.

Everything else a stream sends (webhooks, followers, every protocol's events, the file
API's formats) is made from these events, so redacting them here redacts it everywhere.
Time comes in with the session's inputs (`now`), as the session's own does: a held final
is released by the first input after `HOLD_S`, by the next final, or by the stream's end.
"""

from __future__ import annotations

from dataclasses import replace

from streaming.events import Final, Partial
from streaming.redaction.apply import redact_text
from streaming.redaction.detect import find
from streaming.redaction.policies import Redaction
from streaming.redaction.stream import FinalText, RedactedFinal, StreamRedactor

#: How long a final that may end in the first part of a card waits for its next part.
HOLD_S = 3.0


class EventRedactor:
    """One stream's (one channel's) finals and partials, redacted in order."""

    def __init__(self, redaction: Redaction) -> None:
        self.redaction = redaction
        self._stream = StreamRedactor(redaction)
        self._held: Final | None = None
        self._held_since = 0.0

    def final(self, event: Final, now: float) -> list[Final]:
        """The finals that may go out now, in order (none while `event` is held)."""
        t = event.transcript
        item = FinalText(event.utt_id, t.text, t.tokens, event.start_ms, event.end_ms)
        by_key = {event.utt_id: event}
        if self._held is not None:
            by_key[self._held.utt_id] = self._held
        out = [self._applied(by_key[r.key], r) for r in self._stream.final(item)]
        self._held = event if self._stream.holding else None
        self._held_since = now
        return out

    def due(self, now: float) -> list[Final]:
        """The held final, once it has waited `HOLD_S`."""
        if self._held is None or now - self._held_since < HOLD_S:
            return []
        return self.release()

    def release(self) -> list[Final]:
        """The held final, now (the stream ends, or another event must follow it)."""
        held, self._held = self._held, None
        if held is None:
            return []
        return [self._applied(held, r) for r in self._stream.release()]

    def partial(self, event: Partial) -> Partial:
        return replace(event, text=self._stream.partial(event.text))

    def _applied(self, event: Final, result: RedactedFinal) -> Final:
        redacted, t = result.redacted, event.transcript
        if not redacted.spans:
            return event
        rich = t.rich_text
        if t.text and t.text in rich:
            rich = rich.replace(t.text, redacted.text)
        else:  # funasr's rendering moved the text about: redact it on its own
            rich = redact_text(rich, find(rich, self.redaction.policies), self.redaction.mask)
        transcript = replace(t, text=redacted.text, tokens=redacted.tokens, rich_text=rich)
        return replace(event, transcript=transcript, redactions=redacted.spans)
