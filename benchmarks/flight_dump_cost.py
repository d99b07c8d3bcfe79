"""What one Flight Recorder dump costs a rank, by buffer size: the figure behind flight.BUFFER_SIZE.

    python benchmarks/flight_dump_cost.py                  # sizes 64 256 1000 2000, 10 dumps each, 1 gloo rank
    python benchmarks/flight_dump_cost.py --sizes 256 --dumps 30

Each size runs in a fresh single-rank gloo process (TORCH_FR_BUFFER_SIZE is read when the recorder is created):
it fills the ring with all_reduces, then times torch._C._distributed_c10d._dump_fr_trace_json(), which is what
ddplab's worker bootstrap calls for every dump request and at every rank's exit. Printed: entries, JSON bytes,
median milliseconds per dump. The machine is shared: read the ratio between sizes, not the absolute figure.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time


def worker(dumps: int) -> None:
    import torch
    import torch._C._distributed_c10d as c10d
    import torch.distributed as dist

    dist.init_process_group("gloo", rank=0, world_size=1)
    x = torch.ones(1024)
    for _ in range(int(os.environ["TORCH_FR_BUFFER_SIZE"]) + 100):
        dist.all_reduce(x)
    time.sleep(1)  # let the last entries retire
    times, raw = [], b""
    for _ in range(dumps):
        start = time.perf_counter()
        raw = c10d._dump_fr_trace_json()
        times.append(time.perf_counter() - start)
    print(json.dumps({"entries": len(json.loads(raw)["entries"]), "bytes": len(raw),
                      "ms": statistics.median(times) * 1e3}))
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[64, 256, 1000, 2000])
    parser.add_argument("--dumps", type=int, default=10)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args.dumps)
    print(f"{'buffer':>7} {'entries':>8} {'bytes':>9} {'ms/dump':>8}")
    for size in args.sizes:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        env = {**os.environ, "TORCH_FR_BUFFER_SIZE": str(size), "OMP_NUM_THREADS": "1",
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
        out = subprocess.run([sys.executable, __file__, "--worker", "--dumps", str(args.dumps)], env=env,
                             capture_output=True, text=True, timeout=600, check=True)
        row = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"{size:>7} {row['entries']:>8} {row['bytes']:>9} {row['ms']:>8.1f}")


if __name__ == "__main__":
    main()
