"""Committed pieces: an utterance's text settled at the pauses inside it, each decoded once."""
