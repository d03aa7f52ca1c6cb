"""Resumable streams (issue 52): what lets a client whose socket dropped take its stream up."""
