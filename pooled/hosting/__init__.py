"""Hosting the model: its lifecycle (load, switch, idle unload, drain), the load step, process groups and LoRA admin."""
