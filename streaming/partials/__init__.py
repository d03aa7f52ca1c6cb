"""Partial decodes: when to ask for one, and how much of a long utterance it takes."""
