"""Genesys Cloud AudioHook (v2)."""
