"""Benchmarks for django-pgjobs (an installed app in benchmarks.settings, so jobs.py is autodiscovered)."""
