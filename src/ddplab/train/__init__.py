"""What the recipes share: the loop (loop.py), checkpoints, data batching, per-rank metrics and settings."""
