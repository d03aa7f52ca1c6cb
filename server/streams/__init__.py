"""Live streams by id, their subscribers and webhooks."""
