"""Watching what runs on this machine: what every rank of a DDP job is doing now (monitor), and a guard that acts
once nothing has run for a while (idle)."""
