"""Which model, and where the engine runs: in this process or replicas elsewhere."""
