"""Replay audio files to a SenseStream server as live streams and print or save the captions.

Examples:
    python scripts/stream_file.py talk.wav --url ws://127.0.0.1:8765/ws
    python scripts/stream_file.py calls/*.wav --speed 0 --format srt --out subs/ --concurrency 8
    python scripts/stream_file.py call.wav --multichannel --channel-labels agent,customer

stdout carries only the chosen --format; every diagnostic goes to stderr. An input's
captions are written (to stdout or --out) only when its stream ended with `end` and no
error; a failed input gets one `FILE: error [code]: message` line and no output.
The work is done by sensestream.stream.
"""

from sensestream.stream.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
