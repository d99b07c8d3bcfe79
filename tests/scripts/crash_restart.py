"""Rank 1 loads a checkpoint saved from the DDP wrapper ("module." keys) into the plain model and fails; rank 0 waits
until torchrun ends it. No process group: under torchrun --max-restarts, a restarted gloo group can read the previous
attempt's addresses from the agent's store (torch 2.13 keeps one store across attempts, with no prefix per attempt)
and wait for them forever - this script is for a log with several attempts, not for that."""

import os
import time

import torch

saved = {f"module.{k}": v for k, v in torch.nn.Linear(2, 2).state_dict().items()}  # what DDP's state_dict() holds
if os.environ["RANK"] == "1":
    torch.nn.Linear(2, 2).load_state_dict(saved)
time.sleep(120)
