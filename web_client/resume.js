// Resuming a dropped v1 stream (docs/protocol.md, "Resuming a stream"): what the page keeps
// to take its stream up on a new socket. No DOM and no sockets, so tests can import it
// alone; app.js does the connecting. sensestream/resuming.py is the Python twin.
//
// Samples are counted in the stream's own format: the page sends 16 kHz mono int16, so
// one Int16Array element is one sample, and sample 0 is the first the stream was sent.

export const RESUME_BASE_MS = 100; // a blip mends in a tenth of a second: try at once
export const RESUME_MAX_MS = 3200;
// The audio kept for a resend is bounded: past this much since the server's last ack, the
// oldest goes, and a resume would leave a hole in the stream, so the page starts afresh.
export const KEEP_MAX_SAMPLES = 60 * 16000;

/** Exponential back-off, capped, with ±20 % jitter so many clients do not return in step. */
export function backoffMs(attempt, baseMs, maxMs, random = Math.random) {
  const delay = Math.min(baseMs * 2 ** attempt, maxMs);
  return Math.round(delay * (0.8 + 0.4 * random()));
}

/**
 * The stream's audio from its last acknowledged sample on: sent, or captured while the
 * socket was down and not sent yet. Chunks are kept whole (no copying); `start` is where
 * the oldest kept chunk begins, `end` the stream's next sample.
 */
export class KeptAudio {
  constructor(maxSamples = KEEP_MAX_SAMPLES) {
    this.maxSamples = maxSamples;
    this.chunks = []; // {at: its first sample, pcm: Int16Array}
    this.start = 0;
    this.end = 0;
  }

  append(pcm) {
    if (pcm.length === 0) return;
    this.chunks.push({ at: this.end, pcm });
    this.end += pcm.length;
    // Over the bound: the oldest chunks go, whole (a resume from before them is lost).
    while (this.chunks.length && this.end - this.chunks[0].at > this.maxSamples) {
      this.chunks.shift();
    }
    this.start = this.chunks[0]?.at ?? this.end;
  }

  /** The server has everything before `sample`: the chunks wholly before it can go. */
  forget(sample) {
    while (this.chunks.length && this.chunks[0].at + this.chunks[0].pcm.length <= sample) {
      this.chunks.shift();
    }
    this.start = this.chunks[0]?.at ?? this.end;
  }

  /** Whether a resend from `sample` is possible without a hole. */
  covers(sample) {
    return sample >= this.start && sample <= this.end;
  }

  /** The kept audio from `sample` on, as views into the kept chunks (null: not kept). */
  from(sample) {
    if (!this.covers(sample)) return null;
    const out = [];
    for (const { at, pcm } of this.chunks) {
      if (at + pcm.length <= sample) continue;
      out.push(at >= sample ? pcm : pcm.subarray(sample - at));
    }
    return out;
  }
}

/**
 * The microphone's resume state across its sockets: the stream's token, the server's last
 * ack, the last final shown and the kept audio; and the gap the page is in, if any.
 */
export class Resumer {
  constructor(maxSamples = KEEP_MAX_SAMPLES) {
    this.maxSamples = maxSamples;
    this.droppedAt = null; // when the current gap began (ms, the caller's clock)
    this.gapMs = null; // how long the last gap lasted, once a stream answered after it
    this.fresh();
  }

  /**
   * A new stream: nothing of the old one carries over (its samples and utt_ids start
   * again at 0). The gap goes on until the new stream's `ready` closes it.
   */
  fresh() {
    this.token = null; // from `ready`, renewed by each `resumed`
    this.acked = 0; // samples the server has taken, by its last `ack`
    this.lastUttId = null; // the last final received on this stream
    this.kept = new KeptAudio(this.maxSamples);
    this.attempt = 0; // resume tries in a row that got no `resumed`
  }

  /** Whether the next socket should resume: a token, and audio kept back to the ack. */
  get canResume() {
    return this.token !== null && this.kept.covers(this.acked);
  }

  /** The first message of a resuming socket; its audio resends from `acked`. */
  startMessage() {
    return {
      type: 'start',
      resume: { token: this.token, samples: this.acked, last_utt_id: this.lastUttId },
    };
  }

  /** The socket dropped (only the first drop of a gap counts: retries prolong it). */
  dropped(now) {
    if (this.droppedAt === null) this.droppedAt = now;
  }

  /** The wait before the next resume try; each call counts a try. */
  nextDelayMs(random = Math.random) {
    const delay = backoffMs(this.attempt, RESUME_BASE_MS, RESUME_MAX_MS, random);
    this.attempt += 1;
    return delay;
  }

  /**
   * Take a server event in (`now` on the clock `dropped` was given). Returns false for a
   * final already received (a replay the server should not have sent: dropped, never
   * shown twice), true otherwise. `ready` and `resumed` set `gapMs`: how long the page
   * was away, or null when it was not.
   */
  take(event, now) {
    switch (event.type) {
      case 'ready':
        this.token = event.resume_token ?? null; // none: the server does not resume
        this.closeGap(now);
        return true;
      case 'ack':
        this.acked = event.samples;
        this.kept.forget(event.samples);
        return true;
      case 'resumed':
        this.token = event.resume_token ?? this.token;
        this.closeGap(now);
        this.attempt = 0;
        return true;
      case 'final':
        // utt_ids rise within a stream, one final each: an old id is a second copy.
        if (this.lastUttId !== null && event.utt_id <= this.lastUttId) return false;
        this.lastUttId = event.utt_id;
        return true;
      default:
        return true;
    }
  }

  closeGap(now) {
    this.gapMs = this.droppedAt === null ? null : now - this.droppedAt;
    this.droppedAt = null;
  }
}
