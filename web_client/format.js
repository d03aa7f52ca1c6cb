// Pure helpers: times, badges, transcript files. No DOM, so tests can import them alone.

export const EMOTION_EMOJI = {
  happy: '😊',
  sad: '😔',
  angry: '😡',
  fearful: '😰',
  disgusted: '🤢',
  surprised: '😮',
};

export const EVENT_EMOJI = {
  bgm: '🎼',
  applause: '👏',
  laughter: '😀',
  cry: '😭',
  sneeze: '🤧',
  cough: '🤧',
};

/** The emoji for an emotion, or '' for neutral, unknown and anything new. */
export function emotionEmoji(emotion) {
  return EMOTION_EMOJI[emotion] ?? '';
}

/** The badge emoji for an audio event, or '' for speech, unknown and the rest. */
export function eventEmoji(event) {
  return EVENT_EMOJI[event] ?? '';
}

function pad(n, width = 2) {
  return String(n).padStart(width, '0');
}

/** 83_456 ms -> "01:23" (minutes keep growing past 59 rather than wrapping). */
export function mmss(ms) {
  const total = Math.max(0, Math.floor(ms / 1000));
  return `${pad(Math.floor(total / 60))}:${pad(total % 60)}`;
}

/** 3_723_004 ms -> "01:02:03,004", the SubRip time format. */
export function srtTime(ms) {
  const t = Math.max(0, Math.round(ms));
  const h = Math.floor(t / 3_600_000);
  const m = Math.floor(t / 60_000) % 60;
  const s = Math.floor(t / 1000) % 60;
  return `${pad(h)}:${pad(m)}:${pad(s)},${pad(t % 1000, 3)}`;
}

/**
 * Split a partial into its settled prefix and the rest. `stable_chars` counts code points
 * (the server is Python), so split by code point, not by UTF-16 unit.
 */
export function splitStable(text, stableChars) {
  const chars = Array.from(text);
  const n = Math.max(0, Math.min(stableChars ?? 0, chars.length));
  return [chars.slice(0, n).join(''), chars.slice(n).join('')];
}

/** Finals ({start_ms, end_ms, text}) as "[mm:ss] text" lines. */
export function toTxt(finals) {
  return finals.map((f) => `[${mmss(f.start_ms)}] ${f.text}\n`).join('');
}

/** Finals as a SubRip file, numbered from 1. */
export function toSrt(finals) {
  return finals
    .map((f, i) => `${i + 1}\n${srtTime(f.start_ms)} --> ${srtTime(f.end_ms)}\n${f.text}\n`)
    .join('\n');
}

/** Bytes for people: 1536 -> "1.5 KiB", with a no-break space so the two stay on one line. */
export function formatBytes(bytes) {
  if (bytes == null || !Number.isFinite(bytes)) return '–';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let value = bytes;
  let unit = 0;
  while (Math.abs(value) >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit++;
  }
  return `${unit === 0 ? value : value.toFixed(1)}\u00a0${units[unit]}`;
}

/** The median of a non-empty list of numbers. */
export function median(values) {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
}
