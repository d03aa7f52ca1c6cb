"""The browser client: static files the server serves at `/`, shipped as package data."""
