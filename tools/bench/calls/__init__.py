"""Concurrent stereo calls against the same load as mono streams, side by side in one run."""
