"""Watching what runs on this machine: what every rank of a DDP job is doing now (monitor)."""
