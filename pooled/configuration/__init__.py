"""Settings: the table of every setting, how values are parsed, the config file, live settings and /v1/config."""
