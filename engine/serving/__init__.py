"""The engine that serves many sessions: the batch scheduler, memory budget, devices and metrics."""
