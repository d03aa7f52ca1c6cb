// SenseStream browser client: microphone or file -> WebSocket protocol v1 -> captions.
//
// Plain ES module, no build step. The pieces, top to bottom: the page's elements and
// state; a Stream (one WebSocket session); a Microphone (getUserMedia + AudioWorklet);
// the microphone and file controllers; captions, meter, latency; the engine panel;
// downloads; wiring. What a dropped microphone stream keeps to be resumed is resume.js's.

import {
  emotionEmoji,
  eventEmoji,
  formatBytes,
  median,
  mmss,
  splitStable,
  toSrt,
  toTxt,
} from './format.js';
import { Resumer, backoffMs } from './resume.js';

const SAMPLE_RATE = 16000;
const SAMPLES_PER_MS = SAMPLE_RATE / 1000;
const MIC_FRAME_MS = 40; // 640 samples: small enough for latency, few enough messages
const FILE_FRAME_MS = 100;
const FILE_GAP_MS = 10; // 100 ms of audio every ~10 ms: about 10x real time
const FILE_MAX_BUFFERED = 1 << 20; // wait for the socket to drain above 1 MiB queued
const STATS_INTERVAL_MS = 2000;
const RECONNECT_BASE_MS = 500;
const RECONNECT_MAX_MS = 10_000;
const STOP_TIMEOUT_MS = 20_000;
const MAX_FRAME_LOG = 15_000; // 10 minutes of 40 ms frames without a final
const MAX_STOP_RESUMES = 5; // a stream that drops while stopping: tries to get its finals
// The server closes with these when the client itself broke the protocol: reconnecting
// would only repeat the mistake.
const PROTOCOL_ERROR_CLOSES = new Set([1002, 1007, 1008]);

const $ = (id) => document.getElementById(id);

const ui = {
  status: $('status'),
  warning: $('test-model-warning'),
  demo: $('demo-model-note'),
  start: $('start'),
  language: $('language'),
  options: $('options'),
  partials: $('opt-partials'),
  commit: $('opt-commit'),
  itn: $('opt-itn'),
  emotion: $('opt-emotion'),
  event: $('opt-event'),
  level: $('level'),
  levelBar: $('level-bar'),
  latency: $('latency'),
  captions: $('captions'),
  empty: $('captions-empty'),
  finals: $('finals'),
  partial: $('partial'),
  file: $('file'),
  downloadTxt: $('download-txt'),
  downloadSrt: $('download-srt'),
  clear: $('clear'),
  dropOverlay: $('drop-overlay'),
  keyForm: $('key-form'),
  keyMessage: $('key-message'),
  keyInput: $('api-key'),
  stat: {
    state: $('stat-state'),
    sessions: $('stat-sessions'),
    queue: $('stat-queue'),
    batches: $('stat-batches'),
    memory: $('stat-memory'),
    backend: $('stat-backend'),
    gpuUtil: $('stat-gpu-util'),
    gpuTemp: $('stat-gpu-temp'),
    updated: $('stat-updated'),
  },
};

const state = {
  mode: 'idle', // idle | mic | file | stopping
  stream: null, // the current Stream
  finals: [], // {start_ms, end_ms, text, lang, emotion, event} on the page clock
  latencies: [], // ms, end of speech -> final
  connects: 0, // sessions that reached `ready` (tests read it from data-connects)
  resumes: 0, // sockets that took a dropped stream up (`resumed`; data-resumes)
  // The utterance on show: text committed at its pauses (never withdrawn) and the last
  // partial's text, which starts with it.
  live: { utt: null, committed: '', text: '' },
};

// ---- one WebSocket session ----------------------------------------------------------

// A server started with --api-keys wants a key; browsers cannot set headers on a
// WebSocket, so the key goes to /ws as `?token=`. It comes from the page's own address
// or from the key field; a typed key lives in sessionStorage so a reload keeps it
// without writing it to disk or into the address bar's history.
const KEY_STORAGE = 'sensestream.apiKey';
const auth = {
  token: fragmentSecret() ?? new URLSearchParams(location.search).get('token') ?? storedKey(),
  retry: null, // what to run again once a key is entered
};

/**
 * A client secret handed over in the address's fragment (`#token=ek_…`, minted by a
 * backend with POST /v1/realtime/client_secrets): used instead of asking for a key. A
 * fragment never reaches a server or its logs; it is taken off the address at once, so it
 * is not bookmarked or copied on, and kept in the tab like a typed key, so a reload keeps
 * it until it expires.
 */
function fragmentSecret() {
  const params = new URLSearchParams(location.hash.slice(1));
  const token = params.get('token');
  if (token === null) return null;
  params.delete('token');
  const url = new URL(location.href);
  url.hash = params.toString();
  history.replaceState(history.state, '', url);
  if (!token.startsWith('ek_')) return null; // only client secrets come this way
  try {
    sessionStorage.setItem(KEY_STORAGE, token);
  } catch {
    // storage disabled: the secret still works until the page is reloaded
  }
  return token;
}

function storedKey() {
  try {
    return sessionStorage.getItem(KEY_STORAGE) ?? '';
  } catch {
    return ''; // storage disabled: the key just does not survive a reload
  }
}

function tokenQuery() {
  return auth.token ? `?token=${encodeURIComponent(auth.token)}` : '';
}

function socketUrl() {
  const scheme = location.protocol === 'https:' ? 'wss' : 'ws';
  return `${scheme}://${location.host}/ws${tokenQuery()}`;
}

/**
 * One protocol-v1 socket. It knows how many samples its stream has been sent and when
 * each frame left, which is what turns a final's `end_ms` (stream clock) into a latency.
 *
 * `resume` ({sent, startSample}) makes it a socket that takes a dropped stream up: its
 * start message resumes, its stream clock goes on from `sent`, and it sends nothing
 * until `resumed` says the stream wants audio. `resumer` is the mic's resume state, for
 * the event handler; a file stream has none.
 */
class Stream {
  constructor(startMessage, { onEvent, onClose, resume = null, resumer = null }) {
    this.onEvent = onEvent;
    this.onClose = onClose;
    this.resumer = resumer;
    this.sent = resume?.sent ?? 0; // samples of the stream sent (a resume: from its start)
    this.firstSample = this.sent; // where this socket's audio begins
    this.startSample = resume?.startSample ?? null; // the page clock at stream sample 0
    this.frames = []; // {end: samples sent after the frame, at: performance.now() or null}
    this.held = resume !== null; // a resume waits for `resumed` before any audio
    this.answered = false; // `ready` or `resumed` came: a close now is a drop
    this.gotEnd = false;
    this.serverStopped = false; // `resumed` said the stream already had our `stop`
    this.resumeRefused = false;
    this.stopRequested = false;
    this.timedOut = false; // stop() gave up waiting for the close
    this.closed = false;
    this.wasOpen = false; // a close without an open is a refused or failed handshake
    this.ws = new WebSocket(socketUrl());
    this.ws.binaryType = 'arraybuffer';
    this.opened = new Promise((resolve, reject) => {
      this.ws.addEventListener('open', () => {
        this.wasOpen = true;
        this.ws.send(JSON.stringify(startMessage));
        resolve();
      });
      this.ws.addEventListener('close', (ev) => reject(new Error(closeReason(ev))));
    });
    this.opened.catch(() => {}); // a socket that never opens is reported by onClose
    // Settles with the `ready` event, or fails with the server's error (or the close)
    // when the start was refused.
    this.ready = new Promise((resolve, reject) => {
      this.settleReady = { resolve, reject };
    });
    this.ready.catch(() => {});
    this.ended = new Promise((resolve) => {
      this.ws.addEventListener('close', (ev) => {
        this.closed = true;
        this.settleReady.reject(new Error(closeReason(ev)));
        resolve(ev);
        this.onClose(this, ev);
      });
    });
    this.ws.addEventListener('message', (ev) => this.receive(ev));
  }

  get canSend() {
    return !this.stopRequested && !this.held && this.ws.readyState === WebSocket.OPEN;
  }

  receive(ev) {
    if (typeof ev.data !== 'string') return; // the server only sends JSON text
    let event;
    try {
      event = JSON.parse(ev.data);
    } catch {
      showStatus('The server sent something that is not JSON', 'error');
      return;
    }
    this.note(event);
    if (event.type === 'ready' || event.type === 'resumed') this.settleReady.resolve(event);
    if (event.type === 'error') this.settleReady.reject(new ServerError(event));
    this.onEvent(this, event);
  }

  /** What the socket's own bookkeeping needs of an event, before the page sees it. */
  note(event) {
    if (event.type === 'ready' || event.type === 'resumed') this.answered = true;
    if (event.type === 'resumed') {
      this.held = false; // the handler resends the kept audio at once
      this.serverStopped = Boolean(event.stopped);
    }
    if (event.type === 'end') this.gotEnd = true;
    if (event.type === 'error' && event.code === 'resume_refused') this.resumeRefused = true;
  }

  /**
   * Send int16 samples; `pageSample` is where they start on the page clock. `resent`:
   * audio sent before, on a socket that dropped; no latency is measured from it.
   */
  send(pcm, pageSample, resent = false) {
    if (!this.canSend) return false;
    if (this.startSample === null) this.startSample = pageSample;
    this.ws.send(pcm);
    this.sent += pcm.length;
    this.frames.push({ end: this.sent, at: resent ? null : performance.now() });
    if (this.frames.length > MAX_FRAME_LOG) this.frames.splice(0, this.frames.length / 2);
    return true;
  }

  /** Stream clock ms -> page clock ms (captions keep counting across reconnects). */
  pageMs(ms) {
    return (this.startSample ?? 0) / SAMPLES_PER_MS + ms;
  }

  /** When the frame holding sample `endMs` was sent; by default forget older frames. */
  sentAt(endMs, forget = true) {
    const sample = Math.ceil(endMs * SAMPLES_PER_MS);
    if (sample <= this.firstSample) return null; // sent on a socket that dropped
    const i = this.frames.findIndex((f) => f.end >= sample);
    if (i < 0) return null;
    const at = this.frames[i].at;
    if (forget) this.frames.splice(0, i); // later finals end later: older frames can go
    return at;
  }

  /** Ask for the owed finals; resolves once the server closes (or after a timeout). */
  async stop() {
    if (this.closed) return;
    const timeout = new Promise((resolve) => setTimeout(resolve, STOP_TIMEOUT_MS));
    // Still connecting: let it open (the start goes out), then stop cleanly, rather than
    // abort a handshake in flight.
    if (this.ws.readyState === WebSocket.CONNECTING) {
      await Promise.race([this.opened.catch(() => {}), timeout]);
    }
    // A resume resends its kept audio when `resumed` comes: the stop must come after it.
    if (this.held) await Promise.race([this.ready.catch(() => {}), timeout]);
    this.stopRequested = true;
    if (this.ws.readyState === WebSocket.OPEN && !this.serverStopped) {
      this.ws.send(JSON.stringify({ type: 'stop' }));
    }
    await Promise.race([this.ended, timeout]);
    if (!this.closed) {
      this.timedOut = true; // given up on: not a drop to resume
      this.ws.close();
    }
  }

  /** Close without asking for finals (page unload, failed start). */
  abort() {
    this.stopRequested = true;
    if (!this.closed) this.ws.close();
  }
}

class ServerError extends Error {
  constructor(event) {
    super(`${event.code}: ${event.message}`);
    this.code = event.code;
    this.detail = event.message;
  }
}

function closeReason(ev) {
  return ev.reason ? `${ev.code} ${ev.reason}` : `code ${ev.code}`;
}

function startMessage(extra = {}) {
  return {
    ...extra,
    type: 'start',
    sample_rate: SAMPLE_RATE,
    encoding: 'pcm_s16le',
    channels: 1,
    language: ui.language.value,
    itn: ui.itn.checked,
    partials: ui.partials.checked,
    // Captions settle at each pause (never withdrawn) rather than only when the speaker stops.
    commit: ui.commit.checked ? 'pauses' : 'off',
    emotion: ui.emotion.checked,
    event: ui.event.checked,
    timestamps: true,
  };
}

// ---- microphone capture -------------------------------------------------------------

/** getUserMedia -> MediaStreamSource -> AudioWorklet (mono, 16 kHz, int16 frames). */
class Microphone {
  constructor(onFrame) {
    this.onFrame = onFrame;
    this.context = null;
    this.media = null;
    this.node = null;
    this.flushed = null;
  }

  async start() {
    if (!navigator.mediaDevices?.getUserMedia) {
      throw new Error(
        'the microphone needs a secure page: use https:// (see web_client/README.md) or localhost',
      );
    }
    // Created before the first await, inside the click, so autoplay rules let it run.
    this.context = new AudioContext({ latencyHint: 'interactive' });
    // Browser voice processing is tuned for calls, not recognisers: it gates quiet
    // speech and smears onsets, so ask for the raw signal.
    this.media = await navigator.mediaDevices.getUserMedia({
      audio: {
        channelCount: { ideal: 1 },
        echoCancellation: false,
        noiseSuppression: false,
        autoGainControl: false,
      },
    });
    await this.context.audioWorklet.addModule(new URL('./worklet.js', import.meta.url));
    const source = this.context.createMediaStreamSource(this.media);
    // No outputs: Chrome pulls an output-less worklet by itself, and the microphone is
    // never played back to the speakers.
    this.node = new AudioWorkletNode(this.context, 'capture', {
      numberOfInputs: 1,
      numberOfOutputs: 0,
      processorOptions: { frameMs: MIC_FRAME_MS },
    });
    this.node.port.onmessage = (ev) => this.receive(ev.data);
    source.connect(this.node);
    await this.context.resume();
    return this.context.sampleRate;
  }

  receive(data) {
    if (data.pcm) this.onFrame(new Int16Array(data.pcm), data.rms);
    if (data.flushed && this.flushed) this.flushed();
  }

  /** Have the worklet post its partly filled last frame. */
  flush() {
    if (!this.node) return Promise.resolve();
    return new Promise((resolve) => {
      this.flushed = resolve;
      this.node.port.postMessage('flush');
      setTimeout(resolve, 500); // a closed context never answers
    });
  }

  async close() {
    this.media?.getTracks().forEach((t) => t.stop());
    this.node?.disconnect();
    if (this.context && this.context.state !== 'closed') await this.context.close();
    this.node = null;
  }
}

// ---- microphone controller ----------------------------------------------------------

const mic = {
  capture: null,
  captured: 0, // samples captured since Start: the page clock
  origin: 0, // the page clock at the current stream's sample 0
  attempt: 0, // fresh reconnect attempts since the last `ready`
  refused: 0, // handshakes in a row refused although HTTP says the request is fine
  timer: null, // pending reconnect
  resume: new Resumer(), // the current stream's token, ack, last final and kept audio
};

async function startMic() {
  setMode('mic');
  hideKeyForm();
  mic.captured = 0;
  mic.attempt = 0;
  mic.refused = 0;
  mic.resume = new Resumer();
  const capture = new Microphone(onMicFrame);
  mic.capture = capture;
  showStatus('Asking for the microphone…');
  try {
    const rate = await capture.start();
    if (state.mode !== 'mic') {
      await capture.close(); // stopped while the permission prompt was up
      return;
    }
    ui.level.dataset.inputRate = String(rate);
  } catch (err) {
    await capture.close();
    if (state.mode !== 'mic') return; // stopped meanwhile: the failure is moot
    mic.capture = null;
    setMode('idle');
    showStatus(`Microphone unavailable: ${err.message}`, 'error');
    return;
  }
  connect();
}

function onMicFrame(pcm, rms) {
  showLevel(rms);
  feedStream(pcm);
  mic.captured += pcm.length;
}

/**
 * Send a frame and keep it until the server acknowledges it; while the socket is down (or
 * a resume waits for `resumed`), only keep it: the resume sends it. With nothing to
 * resume, a frame captured while the socket is down is dropped, but still counted, so
 * caption times after a reconnect stay on the same clock as the ones before.
 */
function feedStream(pcm) {
  const kept = mic.resume.kept;
  if (kept.end === 0) mic.origin = mic.captured; // the stream's first sample
  if (state.stream?.send(pcm, mic.captured) || mic.resume.canResume) kept.append(pcm);
}

function connect() {
  mic.timer = null;
  if (mic.resume.canResume) {
    resumeStream();
    return;
  }
  // Nothing to resume (no token, or more than the kept audio since the last ack): a new
  // stream, whose samples count from 0 again.
  mic.resume.fresh();
  showStatus(mic.attempt ? `Reconnecting (attempt ${mic.attempt})…` : 'Connecting…');
  state.stream = new Stream(startMessage(), {
    onEvent: handleEvent,
    onClose: onMicClose,
    resumer: mic.resume,
  });
}

/** A socket that takes the dropped stream up where the server's last ack left it. */
function resumeStream() {
  const resume = mic.resume;
  showStatus(`Resuming the stream (try ${resume.attempt})…`, 'warn');
  state.stream = new Stream(resume.startMessage(), {
    onEvent: handleEvent,
    onClose: onMicClose,
    resumer: resume,
    resume: { sent: resume.acked, startSample: mic.origin },
  });
}

function onMicClose(stream, ev) {
  if (stream !== state.stream) return;
  clearPartial();
  // The gap is timed from the first socket that drops; failed tries only prolong it. A
  // stream that sent `end` is over: there is nothing to resume.
  if (stream.gotEnd) mic.resume.fresh();
  else if (stream.answered) mic.resume.dropped(performance.now());
  if (state.mode !== 'mic' || stream.stopRequested) return;
  if (stream.resumeRefused) {
    connect(); // the refusal dropped the token: this starts a new stream
    return;
  }
  if (PROTOCOL_ERROR_CLOSES.has(ev.code)) {
    mic.resume.fresh(); // ended by the server, not dropped: Stop must not resume it
    stopMic(`The server ended the session (${closeReason(ev)})`);
    return;
  }
  if (!stream.wasOpen) {
    onMicRefused(stream);
    return;
  }
  scheduleReconnect(`Connection lost (${closeReason(ev)})`);
}

/** The handshake failed: retrying only helps when the server is busy or away. */
async function onMicRefused(stream) {
  const refusal = await whyRefused();
  if (stream !== state.stream || state.mode !== 'mic') return; // stopped meanwhile
  mic.refused = refusal.kind === 'upgrade' ? mic.refused + 1 : 0;
  if (refusal.kind === 'key') {
    await stopMic(refusal.message);
    askForKey(refusal.message, startMic);
  } else if (refusal.kind === 'origin' || mic.refused >= 2) {
    stopMic(refusal.kind === 'origin' ? refusal.message : ORIGIN_GUESS);
  } else {
    scheduleReconnect(refusal.message);
  }
}

/**
 * Back-off, capped, with jitter. A resume starts at 0.1 s (a blip mends at once, and the
 * server waits only its grace); a new stream at 0.5 s, as a server that restarts needs.
 */
function scheduleReconnect(reason) {
  const resuming = mic.resume.canResume;
  const delay = resuming
    ? mic.resume.nextDelayMs()
    : backoffMs(mic.attempt++, RECONNECT_BASE_MS, RECONNECT_MAX_MS);
  const next = resuming ? 'resuming' : 'reconnecting';
  showStatus(`${reason}; ${next} in ${(delay / 1000).toFixed(1)} s`, 'warn');
  mic.timer = setTimeout(connect, delay);
}

async function stopMic(message) {
  setMode('stopping');
  clearTimeout(mic.timer);
  mic.timer = null;
  showStatus('Stopping: waiting for the last captions…');
  const capture = mic.capture;
  mic.capture = null;
  if (capture) await capture.flush();
  await finishStream();
  if (capture) await capture.close();
  showLevel(0);
  setMode('idle');
  showStatus(message ?? `Stopped. ${state.finals.length} caption(s).`, message ? 'error' : '');
}

/**
 * Stop the stream and wait for its last finals. A stream that dropped (before the stop,
 * or while waiting for them) is resumed to get them: it resends what the server lacks
 * (or nothing, when `resumed` says the stop arrived), then stops.
 */
async function finishStream() {
  for (let tries = 0; state.stream && tries <= MAX_STOP_RESUMES; tries += 1) {
    await state.stream.stop();
    const stream = state.stream;
    if (stream.gotEnd || stream.timedOut || !mic.resume.canResume) return;
    await sleep(mic.resume.nextDelayMs());
    resumeStream();
  }
}

// ---- refused connections -------------------------------------------------------------

const ORIGIN_MESSAGE = `The server does not allow pages from ${location.origin}`;
// A same-origin fetch carries no Origin header, so the probe passes the one check that
// only the WebSocket meets; when the handshake keeps failing anyway, that check is the
// likely cause (or a proxy that does not pass WebSockets on).
const ORIGIN_GUESS =
  `The server answers but refuses the WebSocket: its --allowed-origins probably does ` +
  `not list ${location.origin}, or a proxy in between does not pass WebSockets`;

/**
 * Why a WebSocket never opened. Browsers hide a refused handshake's HTTP status (the
 * page sees close code 1006 either way), so send the same request as a plain GET: the
 * server checks origin, key and state before it looks for an upgrade, and a request
 * that passes them gets the websockets library's 426 or 400 instead.
 */
async function whyRefused() {
  let response;
  try {
    response = await fetch(`/ws${tokenQuery()}`, { cache: 'no-store' });
  } catch {
    return { kind: 'unreachable', message: 'The server cannot be reached' };
  }
  if (response.status === 401) {
    return { kind: 'key', message: keyRefusal() };
  }
  if (response.status === 403) return forbidden(await response.text());
  if (response.status === 503) return { kind: 'busy', message: await busyMessage(response) };
  return { kind: 'upgrade', message: `The WebSocket handshake failed (HTTP ${response.status})` };
}

/** A 403 is the origin policy's, or a client secret that has opened all its sessions. */
function forbidden(text) {
  if (text.startsWith('client secret used up')) {
    return { kind: 'key', message: 'The access token has opened all the sessions it may' };
  }
  return { kind: 'origin', message: ORIGIN_MESSAGE };
}

function keyRefusal() {
  if (!auth.token) return 'This server needs an API key';
  if (auth.token.startsWith('ek_')) return 'The access token was refused (it may have expired)';
  return 'The API key was refused';
}

/** The server says which: "server is starting" or "server is draining". */
async function busyMessage(response) {
  const phase = /server is (\w+)/.exec(await response.text())?.[1];
  return `The server is ${phase ?? 'starting or draining'}`;
}

/** Show the key field; `retry` runs once a key is entered (a user action, so audio may start). */
function askForKey(message, retry) {
  auth.retry = retry;
  ui.keyMessage.textContent = `${message}.`;
  ui.keyForm.hidden = false;
  ui.keyInput.value = '';
  ui.keyInput.focus();
}

function hideKeyForm() {
  ui.keyForm.hidden = true;
}

function onKeySubmit(ev) {
  ev.preventDefault();
  auth.token = ui.keyInput.value.trim();
  try {
    sessionStorage.setItem(KEY_STORAGE, auth.token);
  } catch {
    // storage disabled: the key still works until the page is reloaded
  }
  dropTokenFromAddress();
  hideKeyForm();
  ui.start.focus(); // the field it had is gone; Start/Stop is where the user goes next
  const retry = auth.retry;
  auth.retry = null;
  if (retry && state.mode === 'idle') retry();
}

/** A typed key replaces the address's `?token=`, which would otherwise win on reload. */
function dropTokenFromAddress() {
  const url = new URL(location.href);
  if (!url.searchParams.has('token')) return;
  url.searchParams.delete('token');
  history.replaceState(history.state, '', url);
}

// ---- file controller -----------------------------------------------------------------

const file = { cancel: false };

/** Decode any format the browser knows, then let Web Audio resample to 16 kHz mono. */
async function decodeTo16k(blob) {
  const bytes = await blob.arrayBuffer();
  const context = new AudioContext();
  let decoded;
  try {
    decoded = await context.decodeAudioData(bytes);
  } finally {
    await context.close();
  }
  const length = Math.max(1, Math.ceil(decoded.duration * SAMPLE_RATE));
  // A one-channel destination downmixes (speaker rules), and rendering at 16 kHz runs
  // the browser's own band-limited resampler over the whole file at once.
  const offline = new OfflineAudioContext(1, length, SAMPLE_RATE);
  const source = offline.createBufferSource();
  source.buffer = decoded;
  source.connect(offline.destination);
  source.start();
  const rendered = await offline.startRendering();
  return floatToInt16(rendered.getChannelData(0));
}

function floatToInt16(samples) {
  const out = new Int16Array(samples.length);
  for (let i = 0; i < samples.length; i++) {
    const s = Math.max(-1, Math.min(1, samples[i]));
    out[i] = s < 0 ? s * 0x8000 : s * 0x7fff;
  }
  return out;
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function transcribeFile(blob) {
  if (state.mode !== 'idle') {
    showStatus('Stop the current transcription first.', 'warn');
    return;
  }
  setMode('file');
  hideKeyForm();
  file.cancel = false;
  const name = blob.name || 'file';
  showStatus(`Decoding ${name}…`);
  let pcm;
  try {
    pcm = await decodeTo16k(blob);
  } catch (err) {
    setMode('idle');
    showStatus(`Cannot decode ${name}: ${err.message || err}`, 'error');
    return;
  }
  const before = state.finals.length;
  let stream;
  try {
    stream = await openFileStream();
    await pumpFile(stream, pcm, name);
    setMode('stopping');
    showStatus(`Sent ${name}; waiting for the last captions…`);
    await stream.stop();
  } catch (err) {
    const failed = state.stream;
    failed?.abort();
    await explainFileFailure(failed, err, blob);
    return;
  }
  setMode('idle');
  const count = state.finals.length - before;
  showStatus(`Done: ${count} caption(s) from ${name}.`);
}

/**
 * A file is sent faster than real time, so it asks for `"pace": "replay"`: servers with
 * rate limits hold live streams to about real time. A server from before that option
 * refuses the unknown field; it has no rate limit either, so ask again without it.
 */
async function openFileStream() {
  let stream = newFileStream({ pace: 'replay' });
  try {
    await stream.ready;
  } catch (err) {
    if (!(err instanceof ServerError && err.code === 'invalid_field' && /pace/.test(err.detail))) {
      throw err;
    }
    stream = newFileStream();
    await stream.ready;
  }
  return stream;
}

function newFileStream(extra) {
  const stream = new Stream(startMessage(extra), { onEvent: handleEvent, onClose: onFileClose });
  state.stream = stream;
  return stream;
}

/** 100 ms frames with small gaps: faster than real time, but never a flood. */
async function pumpFile(stream, pcm, name) {
  const frame = FILE_FRAME_MS * SAMPLES_PER_MS;
  for (let at = 0; at < pcm.length; at += frame) {
    if (file.cancel) return;
    if (stream.closed) throw new Error('the connection closed');
    while (stream.ws.bufferedAmount > FILE_MAX_BUFFERED) await sleep(FILE_GAP_MS);
    stream.send(pcm.subarray(at, at + frame), at);
    const percent = Math.min(100, Math.round(((at + frame) / pcm.length) * 100));
    showStatus(`Transcribing ${name}: ${percent}%`);
    await sleep(FILE_GAP_MS);
  }
}

/** A refused handshake gets its reason (and, for a key, the key field); the rest as is. */
async function explainFileFailure(stream, err, blob) {
  const name = blob.name || 'file';
  const refusal = stream && !stream.wasOpen ? await whyRefused() : null;
  setMode('idle');
  showStatus(`Transcribing ${name} failed: ${refusal?.message ?? err.message}`, 'error');
  if (refusal?.kind === 'key') askForKey(refusal.message, () => transcribeFile(blob));
}

function onFileClose(stream, ev) {
  if (stream !== state.stream) return; // a refused first try, already replaced
  clearPartial();
  if (!stream.stopRequested && ev.code !== 1000 && state.mode === 'file') {
    showStatus(`Connection lost while sending the file (${closeReason(ev)})`, 'error');
  }
}

// ---- server events -----------------------------------------------------------------

function handleEvent(stream, event) {
  if (stream !== state.stream) return; // a late event from a replaced session
  // The resume state sees every event first; false: a final already shown.
  if (stream.resumer && !stream.resumer.take(event, performance.now())) return;
  switch (event.type) {
    case 'ready':
      onReady(stream, event);
      break;
    case 'resumed':
      onResumed(stream, event);
      break;
    case 'speech_started':
      showSpeaking();
      break;
    case 'partial':
      showPartial(event);
      break;
    case 'committed':
      showCommitted(event);
      break;
    case 'final':
      onFinal(stream, event);
      break;
    case 'error':
      if (event.code === 'resume_refused') onResumeRefused(stream, event);
      else showStatus(`Server error ${event.code}: ${event.message}`, 'error');
      break;
    case 'end':
      break; // the close that follows does the bookkeeping
    default:
      break; // newer servers may add events; ignoring them is the v1 contract
  }
}

function onReady(stream, event) {
  state.connects += 1;
  document.body.dataset.connects = String(state.connects);
  document.body.dataset.session = event.session_id;
  if (state.mode === 'mic') {
    mic.attempt = 0;
    mic.refused = 0;
    showStatus(`Listening (session ${event.session_id})`);
  }
  // A new stream after a drop: say so where the captions are, as nothing of the gap is in them.
  const gapMs = stream.resumer?.gapMs;
  if (gapMs != null) {
    showGap(`Reconnected after ${seconds(gapMs)} as a new stream: speech in the gap is lost`);
  }
  // The ready event says which model hears the speaker: a person who sees template
  // sentences for their words then knows why.
  if (event.test_model) ui.warning.hidden = false;
  if (event.demo_model) ui.demo.hidden = false;
}

/**
 * The dropped stream is taken up: the server has replayed nothing yet (its missed finals
 * follow). Resend the kept audio from the sample the resume named; the server drops what
 * of it it already has (`samples` says how much that is).
 */
function onResumed(stream, event) {
  state.resumes += 1;
  document.body.dataset.resumes = String(state.resumes);
  showGap(`Reconnected after ${seconds(stream.resumer.gapMs ?? 0)}`);
  if (event.stopped) return; // it has had our stop: only the last finals are to come
  const kept = stream.resumer.kept.from(stream.sent);
  if (kept === null) {
    stream.ws.close(4001, 'audio not kept'); // cannot happen within the bound; start anew
    return;
  }
  for (const pcm of kept) stream.send(pcm, mic.origin + stream.sent, true);
  if (state.mode === 'mic') {
    mic.refused = 0;
    showStatus(`Listening (session ${document.body.dataset.session}, resumed)`);
  }
}

/** The server will not take the stream up (its grace ran out, it restarted): start anew. */
function onResumeRefused(stream, event) {
  stream.resumer?.fresh(); // its close then starts a new stream (onMicClose)
  showStatus(`The stream could not be resumed (${event.message}); starting a new one`, 'warn');
}

function seconds(ms) {
  return `${(ms / 1000).toFixed(1)} s`;
}

function onFinal(stream, event) {
  // The server says where its VAD closed the utterance (decided_ms): the wait splits into
  // the VAD's end-silence and what the engine and network added after it.
  const decidedAt = event.decided_ms == null ? null : stream.sentAt(event.decided_ms, false);
  const sentAt = stream.sentAt(event.end_ms);
  // Only live audio has an "end of speech" moment; for a replayed file the number would
  // measure the replay speed.
  if (sentAt !== null && state.mode === 'mic') {
    const now = performance.now();
    showLatency(now - sentAt, decidedAt === null ? null : now - decidedAt);
  }
  clearPartial();
  if (!event.text) return; // a too-short burst: answered, but nothing to show
  const final = {
    start_ms: stream.pageMs(event.start_ms),
    end_ms: stream.pageMs(event.end_ms),
    text: event.text,
    lang: event.lang,
    emotion: event.emotion,
    event: event.event,
  };
  state.finals.push(final);
  const line = finalLine(final);
  line.dataset.uttId = String(event.utt_id); // tests check that none shows twice
  ui.finals.append(line);
  ui.empty.hidden = true;
  updateTranscriptButtons();
  keepScrolledToEnd();
}

// ---- captions --------------------------------------------------------------------------

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

/** An emoji badge with a text alternative (emoji names vary across screen readers). */
function badge(className, emoji, label) {
  const node = el('span', className, emoji);
  node.title = label;
  node.setAttribute('role', 'img');
  node.setAttribute('aria-label', label);
  return node;
}

function finalLine(final) {
  const li = el('li', 'final');
  const time = el('time', 'time', mmss(final.start_ms));
  time.dateTime = `PT${(final.start_ms / 1000).toFixed(2)}S`;
  li.append(time);
  const emo = emotionEmoji(final.emotion);
  if (emo) li.append(badge('emotion', emo, `emotion: ${final.emotion}`));
  const evt = eventEmoji(final.event);
  if (evt) li.append(badge('event', evt, `event: ${final.event}`));
  if (final.lang && final.lang !== 'unknown') li.append(el('span', 'lang', final.lang));
  li.append(el('span', 'text', final.text));
  return li;
}

function liveFor(uttId) {
  if (state.live.utt !== uttId) state.live = { utt: uttId, committed: '', text: '' };
  return state.live;
}

function showPartial(event) {
  liveFor(event.utt_id).text = event.text;
  const [stable, rest] = splitStable(event.text, event.stable_chars);
  drawPartial(stable, rest);
}

/** Committed text is drawn in full ink at once; the last partial's rest stays grey. */
function showCommitted(event) {
  const live = liveFor(event.utt_id);
  live.committed += event.text;
  const rest = live.text.startsWith(live.committed) ? live.text.slice(live.committed.length) : '';
  drawPartial(live.committed, rest);
}

function drawPartial(stable, rest) {
  ui.partial.replaceChildren(el('span', 'stable', stable), el('span', 'unstable', rest));
  ui.partial.classList.remove('speaking');
  ui.empty.hidden = true;
  keepScrolledToEnd();
}

function showSpeaking() {
  ui.partial.replaceChildren(el('span', 'unstable', '…'));
  ui.partial.classList.add('speaking');
}

function clearPartial() {
  ui.partial.replaceChildren();
  ui.partial.classList.remove('speaking');
}

/** A line in the transcript where the stream was away (not a caption: no time, not downloaded). */
function showGap(text) {
  ui.finals.append(el('li', 'gap', text));
  ui.empty.hidden = true;
  keepScrolledToEnd();
}

function keepScrolledToEnd() {
  ui.captions.scrollTop = ui.captions.scrollHeight;
}

function clearCaptions() {
  state.finals = [];
  state.latencies = [];
  ui.finals.replaceChildren();
  clearPartial();
  ui.empty.hidden = false;
  ui.latency.textContent = '–';
  updateTranscriptButtons();
}

// ---- meter, latency, status ------------------------------------------------------------

const METER_FLOOR_DB = -60;

function showLevel(rms) {
  const db = rms > 0 ? Math.max(METER_FLOOR_DB, 20 * Math.log10(rms)) : METER_FLOOR_DB;
  const fraction = (db - METER_FLOOR_DB) / -METER_FLOOR_DB;
  ui.levelBar.style.width = `${(fraction * 100).toFixed(1)}%`;
  ui.levelBar.classList.toggle('hot', db > -6);
  ui.level.setAttribute('aria-valuenow', db.toFixed(0));
  ui.level.setAttribute('aria-valuetext', db <= METER_FLOOR_DB ? 'silent' : `${db.toFixed(0)} dBFS`);
}

function showLatency(ms, afterVadMs) {
  state.latencies.push(ms);
  if (state.latencies.length > 100) state.latencies.shift();
  const med = median(state.latencies);
  const split =
    afterVadMs === null ? '' : `; ${Math.round(afterVadMs)} ms after the VAD decided`;
  ui.latency.textContent =
    `${Math.round(ms)} ms${split} (median ${Math.round(med)} ms over ${state.latencies.length})`;
  ui.latency.dataset.lastMs = String(Math.round(ms));
  if (afterVadMs !== null) ui.latency.dataset.afterVadMs = String(Math.round(afterVadMs));
}

function showStatus(text, kind = '') {
  ui.status.textContent = text;
  ui.status.dataset.kind = kind;
}

/** One place that maps the mode to the button, the options and the file input. */
function setMode(mode) {
  state.mode = mode;
  document.body.dataset.mode = mode;
  const running = mode !== 'idle';
  // The label itself says what the button does next (no aria-pressed as well: a toggle
  // whose name also flips reads as "Stop, pressed", which is ambiguous).
  ui.start.textContent = mode === 'stopping' ? 'Stopping…' : running ? 'Stop' : 'Start';
  ui.start.dataset.running = String(running);
  // aria-disabled, not disabled: a disabled button drops keyboard focus mid-stop.
  ui.start.setAttribute('aria-disabled', String(mode === 'stopping'));
  ui.options.disabled = running;
  ui.language.disabled = running;
  ui.file.disabled = running;
  updateTranscriptButtons();
}

function onStartClick() {
  if (state.mode === 'idle') startMic();
  else if (state.mode === 'mic') stopMic();
  else if (state.mode === 'file') file.cancel = true;
}

// ---- engine panel --------------------------------------------------------------------

/** Poll /stats with a setTimeout chain, so a slow answer never overlaps the next ask. */
async function pollStats() {
  try {
    const headers = auth.token ? { Authorization: `Bearer ${auth.token}` } : {};
    const response = await fetch('/stats', { cache: 'no-store', headers });
    if (response.status === 401) throw new Error('needs an API key');
    if (!response.ok) throw new Error(`HTTP ${response.status}`);
    renderStats(await response.json());
    ui.stat.updated.textContent = `Updated ${new Date().toLocaleTimeString()}`;
  } catch (err) {
    ui.stat.updated.textContent = `Engine unreachable: ${err.message}`;
  } finally {
    setTimeout(pollStats, STATS_INTERVAL_MS);
  }
}

function renderStats(stats) {
  const s = ui.stat;
  s.state.textContent = stats.state ?? '–';
  s.sessions.textContent = String(stats.sessions ?? '–');
  s.queue.textContent = String(stats.queue?.depth ?? '–');
  const b = stats.batches;
  s.batches.textContent = b ? `${b.max_batch} / ${b.count}` : '–';
  const m = stats.memory;
  s.memory.textContent = m ? `${formatBytes(m.in_use_bytes)} / ${formatBytes(m.budget_bytes)}` : '–';
  s.backend.textContent = stats.engine?.backend ?? '–';
  renderGpus(stats.process?.gpus ?? []);
  ui.warning.hidden = !stats.test_model;
  ui.demo.hidden = !stats.demo_model;
}

function renderGpus(gpus) {
  for (const node of document.querySelectorAll('.gpu')) node.hidden = gpus.length === 0;
  if (gpus.length === 0) return;
  // A reading the GPU does not support arrives as null: show a dash, not "null%".
  const reading = (value, unit) => (value === null || value === undefined ? '–' : `${value}${unit}`);
  ui.stat.gpuUtil.textContent = gpus.map((g) => reading(g.utilization_pct, '%')).join(', ');
  // A no-break space: a long list wraps between GPUs, never between 61 and °C.
  ui.stat.gpuTemp.textContent = gpus.map((g) => reading(g.temperature_c, '\u00a0°C')).join(', ');
}

// ---- transcript downloads ------------------------------------------------------------------

function updateTranscriptButtons() {
  const none = state.finals.length === 0;
  ui.downloadTxt.disabled = none;
  ui.downloadSrt.disabled = none;
  ui.clear.disabled = none || state.mode !== 'idle';
}

function download(filename, text) {
  const url = URL.createObjectURL(new Blob([text], { type: 'text/plain;charset=utf-8' }));
  const link = el('a');
  link.href = url;
  link.download = filename;
  document.body.append(link);
  link.click();
  link.remove();
  // The click starts the download synchronously; the URL can go once it has.
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}

function transcriptName(ext) {
  const stamp = new Date().toISOString().slice(0, 19).replace(/[:T]/g, '-');
  return `sensestream-${stamp}.${ext}`;
}

// ---- drag and drop ---------------------------------------------------------------------

function hasFiles(ev) {
  return Array.from(ev.dataTransfer?.types ?? []).includes('Files');
}

function wireDrop() {
  let depth = 0; // dragenter/leave fire for every child: count to know when it really left
  document.addEventListener('dragenter', (ev) => {
    if (!hasFiles(ev)) return;
    depth += 1;
    ui.dropOverlay.hidden = false;
  });
  document.addEventListener('dragleave', () => {
    depth = Math.max(0, depth - 1);
    if (depth === 0) ui.dropOverlay.hidden = true;
  });
  document.addEventListener('dragover', (ev) => {
    if (hasFiles(ev)) ev.preventDefault(); // allow the drop instead of opening the file
  });
  document.addEventListener('drop', (ev) => {
    ev.preventDefault();
    depth = 0;
    ui.dropOverlay.hidden = true;
    const dropped = ev.dataTransfer?.files?.[0];
    if (dropped) transcribeFile(dropped);
  });
}

// ---- wiring --------------------------------------------------------------------------------

function init() {
  ui.start.addEventListener('click', onStartClick);
  ui.file.addEventListener('change', () => {
    const chosen = ui.file.files?.[0];
    ui.file.value = ''; // choosing the same file again must fire `change` again
    if (chosen) transcribeFile(chosen);
  });
  ui.downloadTxt.addEventListener('click', () => download(transcriptName('txt'), toTxt(state.finals)));
  ui.downloadSrt.addEventListener('click', () => download(transcriptName('srt'), toSrt(state.finals)));
  ui.clear.addEventListener('click', clearCaptions);
  ui.keyForm.addEventListener('submit', onKeySubmit);
  wireDrop();
  window.addEventListener('pagehide', () => state.stream?.abort());
  setMode('idle');
  pollStats();
}

// A hook for tests and debugging: drop the socket as a network failure would.
window.sensestream = {
  dropConnection() {
    state.stream?.ws.close(4000, 'simulated drop');
  },
};

init();
