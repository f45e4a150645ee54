"""pooled."""
