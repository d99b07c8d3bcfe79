"""The tutorial mistake: the script sets MASTER_PORT itself, overriding the launcher's rendezvous port.

Under torchrun every rank then looks for the rendezvous on a port nobody serves and waits in init_process_group.
"""

import os

import torch.distributed as dist

os.environ["MASTER_PORT"] = "12355"  # line 10: tests/userscript/test_launch.py expects `ddplab launch` to name this line
dist.init_process_group("gloo")
dist.destroy_process_group()
