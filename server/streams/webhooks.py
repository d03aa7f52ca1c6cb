"""Per-stream webhooks: a stream's finals and its end POSTed as JSON, signed, in order, retried.

A session names its webhook (v1 `start.webhook_url`); the operator decides which URLs may
be named (`--webhook-allow` prefixes) and signs every body with `--webhook-secret`:
`X-SenseStream-Signature: sha256=<hex HMAC-SHA256 of "<timestamp>.<body>">`, with the
timestamp (Unix seconds) in `X-SenseStream-Timestamp`, so a receiver can check both the
sender and the freshness. A slow or failing receiver never holds up the stream: events
wait in a bounded queue and are dropped (counted) past it.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

if TYPE_CHECKING:
    import aiohttp

log = logging.getLogger("sensestream.webhooks")

SIGNATURE_HEADER = "X-SenseStream-Signature"
TIMESTAMP_HEADER = "X-SenseStream-Timestamp"


@dataclass(frozen=True, slots=True)
class WebhookPolicy:
    """Which URLs sessions may name, the signing secret, and how hard to try."""

    allow: tuple[str, ...]
    secret: bytes
    attempts: int = 5
    first_backoff_s: float = 0.5  # doubles after each failed attempt
    timeout_s: float = 10.0
    max_pending: int = 1000  # queued bodies per stream
    max_total_pending: int = 20_000  # queued bodies of every stream together
    drain_s: float = 60.0  # after its stream ends, how long a webhook may keep trying

    def allows(self, url: str) -> bool:
        """Whether `url` has a prefix's scheme, host and port and begins with its segments."""
        # Compared parsed and by whole segments, never as strings: a prefix of
        # `/tenant1` must not admit `/tenant10/…`.
        target = url_parts(url)
        if target is None:
            return False
        allowed = (url_parts(prefix) for prefix in self.allow)
        return any(
            p is not None and target[:3] == p[:3] and target[3][: len(p[3])] == p[3]
            for p in allowed
        )


def url_parts(url: str) -> tuple[str, str, int, tuple[str, ...]] | None:
    """(scheme, host, port, path segments) of a plain http(s) URL, or None if it is not one."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    # User info and backslashes can make a URL name another host than it seems to.
    if parts.scheme not in ("http", "https") or not parts.hostname or "\\" in url:
        return None
    if parts.username is not None or parts.password is not None:
        return None
    segments = path_segments(parts.path)
    if segments is None:
        return None
    default = 443 if parts.scheme == "https" else 80
    return parts.scheme, parts.hostname.lower(), port or default, segments


def path_segments(path: str) -> tuple[str, ...] | None:
    """A path's percent-decoded segments; None if a receiver could resolve it elsewhere."""
    segments = []
    for raw in path.split("/")[1:]:
        segment = unquote(raw)
        # Refused, since a receiver may step out of the prefix on them: dot segments, also
        # encoded (`%2e%2e`) or with `;params` some servers drop first (`..;x`); an encoded
        # `/` or `\`; and an escape still there after one decoding (`%252e%252e`), which a
        # receiver that decodes twice reads as `..`.
        bare = segment.split(";", 1)[0]
        if bare in (".", "..") or "/" in segment or "\\" in segment or unquote(segment) != segment:
            return None
        segments.append(segment)
    if segments and segments[-1] == "":
        segments.pop()  # `/calls/` and `/calls` are the same place to be under
    return tuple(segments)


def signature(secret: bytes, timestamp: str, body: bytes) -> str:
    """The signature header's value for one body sent at `timestamp`."""
    digest = hmac.new(secret, timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    return f"sha256={digest}"


class PendingBodies:
    """Bodies queued for every webhook together: one bound across streams."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.count = 0

    def take(self) -> bool:
        if self.count >= self.limit:
            return False
        self.count += 1
        return True

    def give(self, n: int = 1) -> None:
        self.count -= n


class WebhookDelivery:
    """One stream's webhook: one task posts its events in order, each retried with backoff.

    Once the stream has ended, what is still queued gets `drain_s` to go out; the rest
    counts as failed (a receiver that is down must not hold memory for hours).
    """

    def __init__(
        self,
        url: str,
        policy: WebhookPolicy,
        http: aiohttp.ClientSession,
        count: Callable[[str], None],
        pending: PendingBodies | None = None,
    ) -> None:
        self.url = url
        self._policy = policy
        self._http = http
        self._count = count
        self._pending = pending if pending is not None else PendingBodies(policy.max_pending)
        self._queue: deque[bytes] = deque()
        self._ready = asyncio.Event()
        self._finished = False
        self._give_up: asyncio.TimerHandle | None = None
        self.task = asyncio.get_running_loop().create_task(self._run(), name="webhook")

    def send(self, payload: dict[str, Any]) -> None:
        """Queue one event; past the bounds it is dropped (and counted), never waited on."""
        if len(self._queue) >= self._policy.max_pending or not self._pending.take():
            self._count("dropped")
            return
        self._queue.append(json.dumps(payload, ensure_ascii=False).encode())
        self._ready.set()

    def finish(self) -> None:
        """No more events: the task ends once what is queued has been tried, or at the
        drain deadline."""
        if self._finished:
            return
        self._finished = True
        self._ready.set()
        loop = asyncio.get_running_loop()
        self._give_up = loop.call_later(self._policy.drain_s, self.task.cancel)

    async def _run(self) -> None:
        in_flight = 0
        try:
            while True:
                while not self._queue:
                    if self._finished:
                        return
                    self._ready.clear()
                    await self._ready.wait()
                body = self._queue.popleft()
                in_flight = 1
                delivered = await self._deliver(body)
                in_flight = 0
                self._pending.give()
                self._count("delivered" if delivered else "failed")
        finally:
            left = len(self._queue) + in_flight
            self._pending.give(left)
            for _ in range(left):
                self._count("failed")
            self._queue.clear()
            if self._give_up is not None:
                self._give_up.cancel()

    async def _deliver(self, body: bytes) -> bool:
        delay = self._policy.first_backoff_s
        for attempt in range(1, self._policy.attempts + 1):
            retry = await self._post(body, attempt)
            if retry is None:
                return True
            if not retry or attempt == self._policy.attempts:
                break
            await asyncio.sleep(delay)  # a backoff between attempts, not a poll
            delay *= 2
        log.warning("webhook %s: an event was not delivered", self.url)
        return False

    async def _post(self, body: bytes, attempt: int) -> bool | None:
        """None when delivered; else whether trying again may help."""
        timestamp = str(int(time.time()))
        headers = {
            "Content-Type": "application/json",
            TIMESTAMP_HEADER: timestamp,
            SIGNATURE_HEADER: signature(self._policy.secret, timestamp, body),
        }
        import aiohttp  # loaded by `Webhooks.open` already; kept out of start-up (0.14 s)

        timeout = aiohttp.ClientTimeout(total=self._policy.timeout_s)
        try:
            async with self._http.post(
                self.url, data=body, headers=headers, timeout=timeout, allow_redirects=False
            ) as answer:
                if answer.status < 300:
                    return None
                log.info("webhook %s: attempt %d: HTTP %d", self.url, attempt, answer.status)
                # The receiver refused this body: only its overload or failure is retried.
                return answer.status >= 500 or answer.status in (408, 429)
        except (aiohttp.ClientError, TimeoutError) as exc:
            log.info("webhook %s: attempt %d: %s", self.url, attempt, type(exc).__name__)
            return True


class Webhooks:
    """The app's webhook deliveries and their one HTTP client."""

    def __init__(self, policy: WebhookPolicy | None, count: Callable[[str], None]) -> None:
        self.policy = policy
        self._count = count
        self._http: aiohttp.ClientSession | None = None
        self._running: set[WebhookDelivery] = set()
        self._pending = PendingBodies(policy.max_total_pending if policy else 0)

    def open(self, url: str) -> WebhookDelivery:
        """A delivery to `url` (the caller has checked the policy allows it)."""
        if self.policy is None:
            raise RuntimeError("webhooks are not configured")
        if self._http is None:
            import aiohttp  # only servers whose streams name a webhook pay for the import

            self._http = aiohttp.ClientSession()
        delivery = WebhookDelivery(url, self.policy, self._http, self._count, self._pending)
        self._running.add(delivery)
        delivery.task.add_done_callback(lambda _: self._running.discard(delivery))
        return delivery

    async def close(self, timeout_s: float) -> None:
        """Let queued events go out (within `timeout_s`), then close the client."""
        running = list(self._running)
        tasks = [d.task for d in running]
        for delivery in running:
            delivery.finish()
        if tasks:
            _, late = await asyncio.wait(tasks, timeout=timeout_s)
            for task in late:
                task.cancel()
            await asyncio.gather(*late, return_exceptions=True)
        if self._http is not None:
            await self._http.close()
