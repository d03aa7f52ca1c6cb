"""Shared SenseVoiceSmall inference: model loading, frontend, backends and decoding."""
