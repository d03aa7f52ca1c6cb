// AudioWorklet: microphone -> mono -> 16 kHz -> int16 frames for the WebSocket.
//
// It runs on the audio rendering thread, so it allocates nothing per render quantum
// except the frame it hands over (transferred, not copied) and keeps the work to one
// downmix and one FIR pass. The main thread only forwards the frames.

import { Resampler } from './resampler.js';

const OUT_RATE = 16000;

class CaptureProcessor extends AudioWorkletProcessor {
  constructor(options) {
    super();
    const frameMs = options?.processorOptions?.frameMs ?? 40;
    // `sampleRate` is the AudioContext's rate, a global of the worklet scope.
    this.resampler = new Resampler(sampleRate, OUT_RATE);
    this.frameSize = Math.round((OUT_RATE * frameMs) / 1000);
    this.mono = new Float32Array(128);
    this.newFrame();
    this.port.onmessage = (event) => {
      // On stop the main thread asks for the last, partly filled frame.
      if (event.data === 'flush') {
        this.post();
        this.port.postMessage({ flushed: true });
      }
    };
  }

  newFrame() {
    this.frame = new Int16Array(this.frameSize);
    this.fill = 0;
    this.sumSquares = 0;
  }

  // Average the channels: a stereo mic must not be read as its left side only.
  downmix(channels) {
    const n = channels[0].length;
    if (this.mono.length !== n) this.mono = new Float32Array(n);
    const mono = this.mono;
    mono.set(channels[0]);
    if (channels.length > 1) {
      for (let c = 1; c < channels.length; c++) {
        const ch = channels[c];
        for (let i = 0; i < n; i++) mono[i] += ch[i];
      }
      const scale = 1 / channels.length;
      for (let i = 0; i < n; i++) mono[i] *= scale;
    }
    return mono;
  }

  process(inputs) {
    const channels = inputs[0];
    // No channels means the source is not connected (yet, or any more): keep alive.
    if (!channels || channels.length === 0) return true;
    const samples = this.resampler.push(this.downmix(channels));
    for (let i = 0; i < samples.length; i++) {
      const s = Math.max(-1, Math.min(1, samples[i]));
      this.sumSquares += s * s;
      this.frame[this.fill++] = s < 0 ? s * 0x8000 : s * 0x7fff;
      if (this.fill === this.frameSize) this.post();
    }
    return true;
  }

  // Hand the frame to the main thread with its RMS level (for the meter).
  post() {
    if (this.fill === 0) return;
    const pcm = this.fill === this.frameSize ? this.frame : this.frame.slice(0, this.fill);
    const rms = Math.sqrt(this.sumSquares / this.fill);
    this.port.postMessage({ pcm: pcm.buffer, rms }, [pcm.buffer]);
    this.newFrame();
  }
}

registerProcessor('capture', CaptureProcessor);
