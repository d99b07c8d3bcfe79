"""The job for several nodes on an engine (Slurm, SkyPilot, Kubeflow Trainer): one description (job.py), one small
writer per engine that gives it that engine's syntax and variables."""
