"""Registered applications (OAuth clients) and their webhook outbox."""
