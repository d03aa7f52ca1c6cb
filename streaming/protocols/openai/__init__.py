"""OpenAI's Realtime transcription protocol and its file API's formats."""
