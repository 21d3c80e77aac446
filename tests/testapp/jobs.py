"""Handlers the tests enqueue; imported by autodiscovery like a user's jobs.py."""
