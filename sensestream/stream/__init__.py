"""scripts/stream_file.py: replay audio files as live streams and write their captions."""
