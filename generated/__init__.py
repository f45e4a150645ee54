"""Code generated from spec/ by tools/generate.py; do not edit."""
