"""Twilio Media Streams."""
