"""Client secrets on a real server: minted with the `openai` SDK, used where keys are.

A server with three tenants' keys (acme, beta, ops with the admin scope) and an explicit
`--token-secret`, so the tests can also make tokens themselves with the token module:
expired ones, and ones of a tenant the key file does not hold. Then a supervisor with two
workers and no secret given: a token minted on either is taken by both, and its sessions
are counted host-wide.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile as sf
from openai import APIStatusError, AsyncOpenAI, OpenAI, PermissionDeniedError
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from engine.types import Hotword
from sensestream.client import run_session
from server.files.api import FileApi
from server.http.client_secrets import Grant, mint_token
from server.http.tenants import Tenant
from streaming.pins import Pins
from streaming.session import SessionConfig
from tests.callcentre.subscriber import follow_url
from tests.server.conftest import ServerProcess
from tests.server.test_openai_realtime_route import COMPLETED, append_paced, collect, of
from tests.speech import Clip, to_s16le
from tools.speech import noise_floor

ACME = "acme-key-0123456789abcdef"
BETA = "beta-key-0123456789abcdef"
OPS = "ops-key-0123456789abcdef"
SECRET = "client-secret-signing-key-0123456789abcdef"
SR = 16000
TIMEOUT_S = 120.0
PCM16K = {"type": "audio/pcm", "rate": SR}


@pytest.fixture(scope="module")
def server(
    tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    keys = tmp_path_factory.mktemp("keys") / "keys"
    keys.write_text(f"acme:{ACME}\nbeta:{BETA}\nops:{OPS}:admin\n", encoding="utf-8")
    proc = ServerProcess(
        tiny_model_dir,
        "--api-keys-file", str(keys),
        "--token-secret", SECRET,
        "--token-max-sessions", "5",
        "--protect-metrics",
    )  # fmt: skip
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def speech(speech_clips: list[Clip]) -> np.ndarray:
    """One English sentence with a pause after it, so the VAD closes it."""
    lead, tail = np.zeros(SR // 2, np.float32), np.zeros(int(1.5 * SR), np.float32)
    audio = np.concatenate([lead, speech_clips[0].audio, tail])
    return (audio + noise_floor(audio.size, seed=5)).astype(np.float32)


def sdk(server: ServerProcess, key: str) -> OpenAI:
    return OpenAI(api_key=key, base_url=f"http://127.0.0.1:{server.port}/v1")


def transcription(**audio_input: Any) -> dict[str, Any]:
    return {"type": "transcription", "audio": {"input": audio_input}}


def mint(server: ServerProcess, key: str = ACME, **asked: Any) -> str:
    """A token minted through the SDK, as a customer's backend mints one."""
    value: str = sdk(server, key).realtime.client_secrets.create(**asked).value
    return value


def post(server: ServerProcess, body: Any, headers: dict[str, str]) -> tuple[int, Any]:
    """A raw mint request: the status and the JSON answer."""
    request = urllib.request.Request(
        server.server.http_url + "/v1/realtime/client_secrets",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", **headers},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def get(server: ServerProcess, path: str, credential: str) -> int:
    headers = {"Authorization": f"Bearer {credential}"}
    request = urllib.request.Request(server.server.http_url + path, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def run(scenario: Any) -> Any:
    return asyncio.run(asyncio.wait_for(scenario, TIMEOUT_S))


async def status_of(url: str, **options: Any) -> int:
    """A handshake's answer: 101 when it was let in (and closed again at once)."""
    try:
        async with connect(url, **options):
            return 101
    except InvalidStatus as exc:
        return exc.response.status_code


def first_message(url: str, **options: Any) -> dict[str, Any]:
    async def scenario() -> dict[str, Any]:
        async with connect(url, **options) as ws:
            message: dict[str, Any] = json.loads(await ws.recv())
            return message

    result: dict[str, Any] = run(scenario())
    return result


def realtime_url(server: ServerProcess) -> str:
    return f"ws://127.0.0.1:{server.port}/v1/realtime?intent=transcription"


# ---- minting ---------------------------------------------------------------------------


def test_the_sdk_mints_a_token_with_a_key(server: ServerProcess) -> None:
    session = transcription(format=PCM16K, transcription={"language": "en"})
    before = time.time()
    answer = sdk(server, ACME).realtime.client_secrets.create(
        expires_after={"anchor": "created_at", "seconds": 120}, session=session
    )
    assert answer.value.startswith("ek_")
    assert before + 119 <= answer.expires_at <= time.time() + 121
    assert answer.session.type == "transcription" and answer.session.id
    assert answer.session.audio is not None and answer.session.audio.input is not None
    assert answer.session.audio.input.format is not None
    assert answer.session.audio.input.format.type == "audio/pcm"
    assert "client secret" in "".join(server.log) and answer.value not in "".join(server.log)


def test_a_token_cannot_mint(server: ServerProcess) -> None:
    token = mint(server)
    with pytest.raises(PermissionDeniedError) as refused:
        sdk(server, token).realtime.client_secrets.create()
    assert refused.value.status_code == 403
    assert refused.value.code == "token_cannot_mint"


@pytest.mark.parametrize(
    ("body", "headers", "status", "code", "param"),
    [
        ({}, {}, 401, "invalid_api_key", None),
        ({}, {"Authorization": "Bearer wrong-key-0123456789"}, 401, "invalid_api_key", None),
        ({}, {"Origin": "https://evil.example"}, 403, "origin_not_allowed", None),
        ({"expires_after": {"anchor": "x"}}, {}, 400, "invalid_value", "expires_after.anchor"),
        ({"expires_after": {"seconds": 5}}, {}, 400, "invalid_value", "expires_after.seconds"),
        ({"session": {"type": "chat"}}, {}, 400, "invalid_value", "session.type"),
        ({"max_sessions": 6}, {}, 400, "invalid_value", "max_sessions"),
        # Pinned keywords the model cannot write: every session of the token would fail.
        (
            {"session": transcription(transcription={"keywords": ["\u2603 snowman"]})},
            {},
            400,
            "unsupported_hotword",
            "session",
        ),
        # Scopes: only known names; a key's own tenant unless an admin key names another.
        ({"scopes": ["streams:read", "admin"]}, {}, 400, "invalid_value", "scopes[1]"),
        ({"scopes": "streams:read"}, {}, 400, "invalid_type", "scopes"),
        ({"tenant": "beta"}, {}, 403, "insufficient_scope", "tenant"),
        ({"tenant": "ghost"}, bearer(OPS), 400, "invalid_value", "tenant"),
    ],
)
def test_a_mint_is_refused_with_openais_error_object(
    server: ServerProcess,
    body: Any,
    headers: dict[str, str],
    status: int,
    code: str,
    param: str | None,
) -> None:
    key = {} if "Authorization" in headers or status == 401 else bearer(ACME)
    got, answer = post(server, body, {**key, **headers})
    assert got == status
    error = answer["error"]
    assert (error["type"], error["code"], error["param"]) == ("invalid_request_error", code, param)


# ---- sessions opened with a token -------------------------------------------------------


def test_a_realtime_session_opened_with_a_token_gets_finals_under_its_pins(
    server: ServerProcess, speech: np.ndarray
) -> None:
    token = mint(server, session=transcription(format=PCM16K, transcription={"language": "en"}))

    async def scenario() -> list[Any]:
        host = f"127.0.0.1:{server.port}"
        client = AsyncOpenAI(
            api_key=token, base_url=f"http://{host}/v1", websocket_base_url=f"ws://{host}/v1"
        )  # the SDK sends the token as its Bearer key
        async with client.realtime.connect(extra_query={"intent": "transcription"}) as conn:
            asks = transcription(transcription={"language": "zh"})
            await conn.session.update(session=asks)
            sender = asyncio.create_task(append_paced(conn, to_s16le(speech), 2 * SR))
            events = await collect(conn, lambda seen: len(of(seen, COMPLETED)) >= 1)
            await sender
            return events

    events = run(scenario())
    created, updated = events[0], events[1]
    assert (created.type, updated.type) == ("session.created", "session.updated")
    for event in (created, updated):  # the secret's session, whatever the client asks
        audio_in = event.session.audio.input
        assert audio_in.format.type == "audio/pcm" and audio_in.format.rate == SR
        assert audio_in.transcription.language == "en"
    assert of(events, COMPLETED) and of(events, "error") == []


def test_the_browser_subprotocol_carries_a_token_and_keywords_are_pinned(
    server: ServerProcess,
) -> None:
    words = {"language": "en", "keywords": ["sense stream"]}
    token = mint(server, session=transcription(transcription=words))
    offered = ["realtime", f"openai-insecure-api-key.{token}"]
    created = first_message(realtime_url(server), subprotocols=offered)
    assert created["type"] == "session.created"
    transcribed = created["session"]["audio"]["input"]["transcription"]
    assert (transcribed["language"], transcribed["keywords"]) == ("en", ["sense stream"])


def test_a_v1_session_with_a_token_query_gets_finals_in_the_pinned_language(
    server: ServerProcess, speech: np.ndarray
) -> None:
    token = mint(server, session=transcription(transcription={"language": "en"}))
    start = {"type": "start", "language": "zh", "pace": "replay"}
    outcome = run(run_session(f"{server.url}?token={token}", to_s16le(speech), start=start))
    (ready,) = outcome.of("ready")
    assert ready["config"]["language"] == "en"
    assert outcome.of("final") and outcome.close_code == 1000


def test_pinned_hotwords_replace_a_v1_clients_own(server: ServerProcess) -> None:
    token = mint(server, session=transcription(transcription={"keywords": ["sense stream"]}))

    async def scenario() -> dict[str, Any]:
        async with connect(f"{server.url}?token={token}") as ws:
            await ws.send(json.dumps({"type": "start", "hotwords": ["other words"]}))
            ready: dict[str, Any] = json.loads(await ws.recv())
            return ready

    ready = run(scenario())
    assert ready["type"] == "ready" and list(ready["config"]["hotwords"]) == ["sense stream"]


def test_a_v1_start_in_another_format_than_the_pinned_one_is_refused(
    server: ServerProcess,
) -> None:
    token = mint(server, session=transcription(format={"type": "audio/pcmu"}))

    async def scenario() -> tuple[list[dict[str, Any]], int | None]:
        async with connect(f"{server.url}?token={token}") as ws:
            await ws.send(json.dumps({"type": "start", "sample_rate": 16000}))
            seen = []
            with contextlib.suppress(ConnectionClosed):
                async for message in ws:
                    seen.append(json.loads(message))
            return seen, ws.close_code

    events, code = run(scenario())
    errors = [e for e in events if e["type"] == "error"]
    assert [e["code"] for e in errors] == ["invalid_field"] and code == 1008
    assert "mulaw at 8000 Hz" in errors[0]["message"]


# ---- refusals -----------------------------------------------------------------------------


def forged(tenant: Tenant, expires_at: float, secret: str = SECRET) -> str:
    now = int(time.time())
    return mint_token(secret.encode(), Grant(tenant, "forged", now - 700, int(expires_at), 5))


def tampered(token: str) -> str:
    """The token with one claim changed (the admin scope) and its old signature."""
    payload, _, signature = token[3:].partition(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    changed = base64.urlsafe_b64encode(json.dumps({**claims, "admin": True}).encode())
    return "ek_" + changed.decode().rstrip("=") + "." + signature


def test_expired_tampered_foreign_and_other_servers_tokens_get_401(server: ServerProcess) -> None:
    now = time.time()
    refused = [
        ("client secret expired", forged(Tenant("acme"), now - 60)),
        ("client secret has a bad signature", tampered(mint(server))),
        ("client secret's tenant has no key on this server", forged(Tenant("ghost"), now + 60)),
        ("client secret has a bad signature", forged(Tenant("acme"), now + 60, "x" * 40)),
    ]

    async def scenario() -> list[int]:
        statuses = []
        for _, token in refused:
            statuses.append(await status_of(f"{server.url}?token={token}"))
            statuses.append(await status_of(realtime_url(server), additional_headers=bearer(token)))
        return statuses

    assert run(scenario()) == [401] * 2 * len(refused)
    assert {get(server, "/v1/streams", token) for _, token in refused} == {401}
    log = "".join(server.log)
    for reason, token in refused:  # each refusal logged with its reason, never the token
        assert f"401 {reason}" in log and token not in log


def test_a_token_opens_at_most_its_max_sessions(server: ServerProcess) -> None:
    token = mint(server, extra_body={"max_sessions": 1})
    url = f"{server.url}?token={token}"
    # A plain GET (the page asking why a socket was refused) opens no session.
    assert server.http(f"/ws?token={token}")[0] == 426
    assert [run(status_of(url)) for _ in range(3)] == [101, 403, 403]
    assert any("403 client secret used up" in line for line in server.log)
    assert server.http(f"/ws?token={token}")[0] == 403  # and the GET says so too


def test_resumes_are_no_new_sessions_of_the_client_secret(server: ServerProcess) -> None:
    token = mint(server, extra_body={"max_sessions": 2})
    url = f"{server.url}?token={token}"

    async def drop_and_resume(times: int) -> list[str]:
        ws = await connect(url)
        await ws.send(json.dumps({"type": "start", "pace": "replay"}))
        resume_token = json.loads(await ws.recv())["resume_token"]
        kinds = []
        for _ in range(times):
            ws.transport.abort()  # the connection is lost: the stream waits
            ws = await connect(url)
            resume = {"token": resume_token, "samples": 0, "last_utt_id": None}
            await ws.send(json.dumps({"type": "start", "resume": resume}))
            resumed = json.loads(await ws.recv())
            kinds.append(resumed["type"])
            resume_token = resumed.get("resume_token", resume_token)
        await ws.send(json.dumps({"type": "stop"}))
        kinds += [json.loads(m)["type"] async for m in ws][-1:]
        return kinds

    # Each resume is counted at its handshake and given back once it is seen to be one.
    assert run(drop_and_resume(3)) == ["resumed", "resumed", "resumed", "end"]
    assert [run(status_of(url)) for _ in range(2)] == [101, 403]  # one session was left


@contextlib.asynccontextmanager
async def live(server: ServerProcess, key: str, stream_id: str) -> Any:
    async with connect(server.url, additional_headers=bearer(key)) as ws:
        await ws.send(json.dumps({"type": "start", "stream_id": stream_id}))
        assert json.loads(await ws.recv())["type"] == "ready"
        yield ws


@dataclass(frozen=True)
class Listed:
    """`GET /v1/streams`' answer: its status, the stream ids listed, its challenge."""

    status: int
    ids: tuple[str, ...] = ()
    challenge: str = ""


def listed(server: ServerProcess, credential: str) -> Listed:
    request = urllib.request.Request(
        server.server.http_url + "/v1/streams", headers=bearer(credential)
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            streams = json.loads(answer.read())["streams"]
            return Listed(answer.status, tuple(s["stream_id"] for s in streams))
    except urllib.error.HTTPError as exc:
        return Listed(exc.code, challenge=exc.headers.get("WWW-Authenticate", ""))


@pytest.fixture(scope="module")
def wav(speech: np.ndarray, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("upload") / "speech.wav"
    sf.write(path, speech, SR, subtype="PCM_16")
    return path


def uploaded(server: ServerProcess, credential: str, wav: Path) -> tuple[int, str | None]:
    """An upload through the SDK: 200, or the refusal's status and OpenAI error code."""
    try:
        with wav.open("rb") as audio:
            done = sdk(server, credential).audio.transcriptions.create(
                model="whisper-1", file=audio
            )
    except APIStatusError as exc:
        return exc.status_code, exc.code
    assert isinstance(done.text, str)
    return 200, None


def test_a_token_minted_without_scopes_streams_but_may_not_list_follow_or_upload(
    server: ServerProcess, wav: Path
) -> None:
    token = mint(server)

    async def scenario() -> tuple[int, int, Listed]:
        async with live(server, ACME, "acme-unscoped"):
            follow = follow_url(server.url, "acme-unscoped", 0)
            followed = await status_of(follow, additional_headers=bearer(token))
            listing = await asyncio.to_thread(listed, server, token)
            streamed = await status_of(f"{server.url}?token={token}")
            return streamed, followed, listing

    streamed, followed, listing = run(scenario())
    assert (streamed, followed, listing.status) == (101, 403, 403)
    assert listing.challenge == 'Bearer error="insufficient_scope", scope="streams:read"'
    assert any("403 insufficient_scope" in line for line in server.log)  # the follower's
    assert uploaded(server, token, wav) == (403, "insufficient_scope")


def test_the_scopes_a_mint_names_let_its_token_list_follow_and_upload_in_its_tenant(
    server: ServerProcess, wav: Path
) -> None:
    token = mint(server, extra_body={"scopes": ["streams:read", "files:write"]})

    async def scenario() -> tuple[Listed, int, int]:
        async with live(server, ACME, "acme-scoped"), live(server, BETA, "beta-scoped"):
            listing = await asyncio.to_thread(listed, server, token)
            own = follow_url(server.url, "acme-scoped", 0)
            foreign = follow_url(server.url, "beta-scoped", 0) + "&tenant=beta"
            return (
                listing,
                await status_of(own, additional_headers=bearer(token)),
                await status_of(foreign, additional_headers=bearer(token)),
            )

    listing, own, foreign = run(scenario())
    assert listing.status == 200 and "acme-scoped" in listing.ids
    assert "beta-scoped" not in listing.ids
    assert (own, foreign) == (101, 403)
    assert uploaded(server, token, wav) == (200, None)


def test_an_admin_keys_token_reaches_another_tenant_only_when_its_mint_names_it(
    server: ServerProcess,
) -> None:
    read = {"scopes": ["streams:read"]}
    own, for_beta = (
        mint(server, OPS, extra_body=read),
        mint(server, OPS, extra_body={**read, "tenant": "beta"}),
    )

    async def scenario() -> tuple[Listed, Listed, int, int, Listed]:
        async with live(server, BETA, "beta-call"):
            follow = follow_url(server.url, "beta-call", 0)
            own_listing = await asyncio.to_thread(listed, server, own)
            beta_listing = await asyncio.to_thread(listed, server, for_beta)
            naming = await status_of(follow + "&tenant=beta", additional_headers=bearer(own))
            followed = await status_of(follow, additional_headers=bearer(for_beta))
        async with live(server, for_beta, "opened-for-beta"):  # beta's stream, not ops'
            by_beta = await asyncio.to_thread(listed, server, BETA)
        return own_listing, beta_listing, naming, followed, by_beta

    own_listing, beta_listing, naming, followed, by_beta = run(scenario())
    assert own_listing.status == 200 and "beta-call" not in own_listing.ids
    assert "beta-call" in beta_listing.ids
    assert (naming, followed) == (403, 101)
    assert "opened-for-beta" in by_beta.ids


def test_a_tokens_uploads_count_against_its_max_sessions(server: ServerProcess, wav: Path) -> None:
    token = mint(server, extra_body={"scopes": ["files:write"], "max_sessions": 2})
    assert uploaded(server, token, wav) == (200, None)

    async def scenario() -> tuple[int, int]:
        async with connect(f"{server.url}?token={token}"):  # its second and last session
            refused = await asyncio.to_thread(uploaded, server, token, wav)
        return refused, await status_of(f"{server.url}?token={token}")

    (status, code), streamed = run(scenario())
    assert (status, code, streamed) == (403, "client_secret_used_up", 403)


def test_stats_and_metrics_take_keys_but_the_file_api_takes_tokens(
    server: ServerProcess, wav: Path
) -> None:
    token = mint(server, extra_body={"max_sessions": 3, "scopes": ["files:write"]})
    assert [get(server, path, token) for path in ("/stats", "/metrics")] == [401, 401]
    assert [get(server, path, ACME) for path in ("/stats", "/metrics")] == [200, 200]
    assert get(server, "/v1/models", token) == 200
    for _ in range(2):  # each upload is one of the token's sessions
        with wav.open("rb") as audio:
            done = sdk(server, token).audio.transcriptions.create(model="whisper-1", file=audio)
        assert isinstance(done.text, str)
    assert run(status_of(f"{server.url}?token={token}")) == 101


class FileHost:
    """Just what the file API asks of its app to choose an upload's settings."""

    def __init__(self, who: Tenant | Grant) -> None:
        self.who = who

    def session_config(self) -> SessionConfig:
        return SessionConfig()

    def credential(self, conn: object) -> Tenant | Grant:
        return self.who


def test_an_upload_with_a_token_keeps_its_language_and_hotwords_but_not_its_format() -> None:
    pins = Pins("en", (Hotword("sense stream"),), "mulaw", 8000)
    grant = Grant(Tenant("acme"), "t", 0, 9, 1, pins)
    api = FileApi(FileHost(grant))  # type: ignore[arg-type]
    assert api._config(None).pinned == Pins("en", (Hotword("sense stream"),))  # type: ignore[arg-type]
    assert FileApi(FileHost(Tenant("acme")))._config(None).pinned == Pins()  # type: ignore[arg-type]


# ---- two workers --------------------------------------------------------------------------


def worker_of(ws: ClientConnection) -> int:
    return int(ws.response.headers["x-sensestream-worker"])


async def reaching(url: str, worker: int) -> ClientConnection:
    """A connection served by `worker` (the kernel picks a worker per connection)."""
    for _ in range(500):
        ws = await connect(url)
        if worker_of(ws) == worker:
            return ws
        await ws.close()
    raise AssertionError(f"no connection reached worker {worker}")


async def refusers(url: str, tries: int) -> list[tuple[int, int]]:
    """Each refused handshake's status and the worker that refused it."""
    seen = []
    for _ in range(tries):
        with pytest.raises(InvalidStatus) as refused:
            async with connect(url):
                pass
        response = refused.value.response
        seen.append((response.status_code, int(response.headers["x-sensestream-worker"])))
    return seen


def test_workers_take_each_others_tokens_and_count_their_sessions_together(
    tiny_model_dir: Path,
) -> None:
    # No --token-secret: the supervisor makes one for both workers; no keys: anyone mints.
    proc = ServerProcess(tiny_model_dir, "--workers", "2", "--token-max-sessions", "1000")
    try:
        many, once = mint(proc, "any"), mint(proc, "any", extra_body={"max_sessions": 1})

        async def scenario() -> tuple[list[int], list[tuple[int, int]]]:
            reached = []
            for worker in (0, 1):
                ws = await reaching(f"{proc.url}?token={many}", worker)
                reached.append(worker_of(ws))
                await ws.close()
            async with connect(f"{proc.url}?token={once}"):
                return reached, await refusers(f"{proc.url}?token={once}", 40)

        reached, refused = run(scenario())
    finally:
        proc.stop()
    assert reached == [0, 1]
    assert {status for status, _ in refused} == {403}
    assert {worker for _, worker in refused} == {0, 1}
