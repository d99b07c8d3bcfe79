"""ddplab: check, practise, run, measure and debug PyTorch data-parallel training."""

__version__ = "0.1.0"
