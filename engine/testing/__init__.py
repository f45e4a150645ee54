"""Helpers for tests and reference tools (no torch needed)."""
