"""Tests of the embedded PostgreSQL engine itself (real binaries, real servers, real processes)."""
