"""Live latency with and without a long file upload, side by side in one run."""
