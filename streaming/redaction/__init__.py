"""Redaction of card numbers, account numbers and personal data from transcripts (issue 41)."""
