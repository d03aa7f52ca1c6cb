"""Whole-file transcription: OpenAI's file API, uploads, the transcription job."""
