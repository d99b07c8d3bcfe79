"""Every rank writes its lines to one file (shared-path-write): both open it for writing, so both write from offset
0 and one rank's lines are lost. Plain script: python -m torch.distributed.run --standalone --nproc-per-node 2
lint_shared_write.py"""

import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
dist.barrier()
log = open("run.log", "w")  # expect: shared-path-write
dist.barrier()  # both have opened (and truncated) it before anyone writes
log.write("".join(f"rank {rank} line {i:04d}\n" for i in range(1000)))
log.flush()
dist.barrier()
log.close()
dist.destroy_process_group()
