// A streaming band-limited resampler (any rate -> 16 kHz), shared by the AudioWorklet
// and the tests.
//
// Why windowed sinc and not linear interpolation: microphones run at 44.1 or 48 kHz,
// and everything between 8 kHz and the input Nyquist folds back into the 0-8 kHz band
// that the recogniser's filterbank sees. Plain linear interpolation has almost no
// stop-band (its sinc^2 response leaves aliases at -10 to -30 dB), so it would need
// a separate low-pass anyway. One windowed-sinc kernel does both jobs at once: its
// cutoff (0.45 x the output rate, i.e. 7.2 kHz) is the anti-alias low-pass, and
// evaluating it at the fractional input position of each output sample is the
// interpolation. That handles non-integer ratios (44.1k -> 16k) without a rational
// polyphase bank. A Kaiser window (beta 8.6, 16 zero crossings each side) puts the
// stop-band below about -80 dB, and the kernel is tabulated at 512 sub-sample phases
// so the audio thread does only multiply-adds. At 48 kHz that is 108 taps per output
// sample, about 1.7 M multiply-adds per second: nothing for a modern CPU, and the
// group delay is 1.1 ms.

const DEFAULTS = { zeros: 16, phases: 512, rolloff: 0.9, beta: 8.6 };

// Modified Bessel function of the first kind, order 0 (for the Kaiser window).
function besselI0(x) {
  let sum = 1;
  let term = 1;
  const q = (x * x) / 4;
  for (let k = 1; k < 50; k++) {
    term *= q / (k * k);
    sum += term;
    if (term < sum * 1e-12) break;
  }
  return sum;
}

function sinc(x) {
  if (x === 0) return 1;
  const px = Math.PI * x;
  return Math.sin(px) / px;
}

export class Resampler {
  /**
   * @param {number} inRate input sample rate (the AudioContext's)
   * @param {number} outRate output sample rate (16000 for the server)
   */
  constructor(inRate, outRate = 16000, options = {}) {
    const { zeros, phases, rolloff, beta } = { ...DEFAULTS, ...options };
    this.inRate = inRate;
    this.outRate = outRate;
    this.step = inRate / outRate; // input samples per output sample
    // Cutoff in cycles per *input* sample: below the lower of the two Nyquists.
    this.cutoff = 0.5 * Math.min(1, outRate / inRate) * rolloff;
    this.half = Math.ceil(zeros / (2 * this.cutoff)); // kernel half-width, input samples
    this.taps = 2 * this.half;
    this.phases = phases;
    this.table = this.buildTable(beta);
    // History: `half` zeros first, so output sample 0 sits exactly on input sample 0
    // and the output clock stays locked to the input clock (n_out = n_in / step).
    this.buf = new Float32Array(this.taps + 4096);
    this.len = this.half;
    this.pos = this.half; // position of the next output sample, in buffer coordinates
    this.out = new Float32Array(0);
  }

  // Row p holds the kernel for a fractional offset p / phases, normalised to unit DC gain
  // so silence stays silence and a constant stays constant.
  buildTable(beta) {
    const { taps, half, phases, cutoff } = this;
    const table = new Float32Array((phases + 1) * taps);
    const norm = besselI0(beta);
    for (let p = 0; p <= phases; p++) {
      const frac = p / phases;
      let sum = 0;
      const row = new Float64Array(taps);
      for (let j = 0; j < taps; j++) {
        const d = j - half + 1 - frac; // distance from the output position to the tap
        const x = d / half;
        const w = Math.abs(x) >= 1 ? 0 : besselI0(beta * Math.sqrt(1 - x * x)) / norm;
        row[j] = 2 * cutoff * sinc(2 * cutoff * d) * w;
        sum += row[j];
      }
      for (let j = 0; j < taps; j++) table[p * taps + j] = row[j] / sum;
    }
    return table;
  }

  // Append input, growing the history buffer only when a bigger block arrives.
  append(input) {
    if (this.len + input.length > this.buf.length) {
      const bigger = new Float32Array(2 * (this.len + input.length));
      bigger.set(this.buf.subarray(0, this.len));
      this.buf = bigger;
    }
    this.buf.set(input, this.len);
    this.len += input.length;
  }

  /**
   * Feed a block of input samples; returns the output samples it completes (a view that
   * is only valid until the next call).
   * @param {Float32Array} input
   * @returns {Float32Array}
   */
  push(input) {
    this.append(input);
    const { buf, table, taps, half, phases, step } = this;
    const maxOut = Math.ceil((this.len - this.pos) / step) + 1;
    if (this.out.length < maxOut) this.out = new Float32Array(2 * maxOut);
    const out = this.out;
    let n = 0;
    let pos = this.pos;
    // An output at `pos` needs input samples floor(pos)-half+1 .. floor(pos)+half.
    while (Math.floor(pos) + half < this.len) {
      const i0 = Math.floor(pos);
      const row = Math.round((pos - i0) * phases) * taps;
      const first = i0 - half + 1;
      let acc = 0;
      for (let j = 0; j < taps; j++) acc += buf[first + j] * table[row + j];
      out[n++] = acc;
      pos += step;
    }
    // Drop the history no future output can reach, keeping positions small.
    const keepFrom = Math.floor(pos) - half + 1;
    if (keepFrom > 0) {
      buf.copyWithin(0, keepFrom, this.len);
      this.len -= keepFrom;
      pos -= keepFrom;
    }
    this.pos = pos;
    return out.subarray(0, n);
  }
}
