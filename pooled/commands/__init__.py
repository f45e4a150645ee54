"""`pooled pull`, `list` and `rm`: arguments, output and the running server's routes they call."""
