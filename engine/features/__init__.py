"""Audio in and features out: reading audio files, and SenseVoice's fbank frontend."""
