"""Voice-activity detectors (FSMN, WebRTC) and the VAD work a server runs off its loop."""
