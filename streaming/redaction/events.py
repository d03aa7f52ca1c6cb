"""A session's events redacted before they leave it: finals (held while a card may go on),
partials, and the `redactions` each final reports.

Everything else a stream sends (webhooks, followers, every protocol's events, the file
API's formats) is made from these events, so redacting them here redacts it everywhere.
Time comes in with the session's inputs (`now`), as the session's own does. Held finals
wait while the speaker goes on: while the next utterance is open or its final is owed
(`busy`), then `HOLD_S` more once all is quiet, and never more than `MAX_HOLD_S` after the
last of them came. They are released by the first input after that, by a final that
shows no card follows, or by the stream's end (`release`, also when the client is gone).
"""

from __future__ import annotations

from dataclasses import replace

from streaming.events import Final, Partial
from streaming.redaction.apply import redact_text
from streaming.redaction.detect import DIGIT_RUN, Found, disjoint, find
from streaming.redaction.policies import Redaction
from streaming.redaction.stream import FinalText, RedactedFinal, SpokenContext, StreamRedactor

#: How long held finals wait, once nobody speaks, for the next part of their card: a
#: pause between two groups of digits, and the voice detector's time to hear the next.
HOLD_S = 3.0
#: The longest held finals wait after the last of them came, however long the speaker goes
#: on: a next utterance cut at its longest (15 s by default) and decoded.
MAX_HOLD_S = 20.0


class EventRedactor:
    """One stream's (one channel's) finals and partials, redacted in order."""

    def __init__(self, redaction: Redaction, context: SpokenContext | None = None) -> None:
        self.redaction = redaction
        self._stream = StreamRedactor(redaction, context)
        self._held: dict[int, Final] = {}
        self._quiet_since = 0.0  # the last time anything said the card might go on
        self._held_since = 0.0  # when the last held final came

    @property
    def holding(self) -> bool:
        return bool(self._held)

    def final(self, event: Final, now: float) -> list[Final]:
        """The finals that may go out now, in order (none while `event` is held)."""
        t = event.transcript
        item = FinalText(event.utt_id, t.text, t.tokens, event.start_ms, event.end_ms)
        self._held[event.utt_id] = event
        out = [self._applied(self._held.pop(r.key), r) for r in self._stream.final(item)]
        self._quiet_since = self._held_since = now
        return out

    def due(self, now: float, busy: bool) -> list[Final]:
        """The held finals, once their wait is over; `busy`: an utterance is open, or a
        final owed, that may carry the next part."""
        if not self._held:
            return []
        if busy:
            self._quiet_since = now
        at = self.due_at
        return self.release() if at is not None and now >= at else []

    @property
    def due_at(self) -> float | None:
        """When the held finals are due if nothing more is said (None: none is held)."""
        if not self._held:
            return None
        return min(self._quiet_since + HOLD_S, self._held_since + MAX_HOLD_S)

    def release(self) -> list[Final]:
        """The held finals, now (the stream ends, or another event must follow them)."""
        return [self._applied(self._held.pop(r.key), r) for r in self._stream.release()]

    def partial(self, event: Partial) -> Partial:
        return replace(event, text=self._stream.partial(event.text))

    def _applied(self, event: Final, result: RedactedFinal) -> Final:
        redacted, t = result.redacted, event.transcript
        if not redacted.spans:
            return event
        rich = t.rich_text
        if t.text and t.text in rich:
            rich = rich.replace(t.text, redacted.text)
        else:  # funasr's rendering moved the text about: redact it on its own, and every
            # run of digits with it (what a join or the context found cannot be placed)
            found = find(rich, self.redaction.policies)
            policy = redacted.spans[0].policy
            found += [Found(m.start(), m.end(), policy) for m in DIGIT_RUN.finditer(rich)]
            rich = redact_text(rich, disjoint(found), self.redaction.mask)
        transcript = replace(t, text=redacted.text, tokens=redacted.tokens, rich_text=rich)
        return replace(event, transcript=transcript, redactions=redacted.spans)
