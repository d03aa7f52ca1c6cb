"""scripts/soak.py: thousands of short sessions; the server's resources must come back."""
