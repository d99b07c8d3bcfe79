"""Wall time of `ddplab check` (2 CPU ranks) against `accelerate test` (2-process CPU config), side by side.

Runs alternate (ddplab, accelerate, ddplab, ...) so that load from anything else on the machine hits both alike;
prints each run, the medians and the ratio. Target: ddplab <= 0.8x accelerate's wall time.

    pip install accelerate            # only this benchmark needs it
    python benchmarks/check_vs_accelerate.py --rounds 5
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ACCELERATE_CONFIG = """\
compute_environment: LOCAL_MACHINE
distributed_type: MULTI_CPU
num_processes: 2
num_machines: 1
machine_rank: 0
main_process_ip: 127.0.0.1
main_process_port: {port}
mixed_precision: 'no'
use_cpu: true
rdzv_backend: static
same_network: true
"""


def timed(cmd: list[str]) -> float:
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed (exit {proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    accelerate = shutil.which("accelerate")
    if accelerate is None:
        sys.exit("accelerate is not installed: pip install accelerate")
    from ddplab.ports import free_port

    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "cpu2.yaml"
        config.write_text(ACCELERATE_CONFIG.format(port=free_port()))
        commands = {
            "ddplab check": [sys.executable, "-m", "ddplab", "check", "--nproc", "2", "--device", "cpu"],
            "accelerate test": [accelerate, "test", "--config_file", str(config)],
        }
        times: dict[str, list[float]] = {name: [] for name in commands}
        for i in range(args.rounds):
            for name, cmd in commands.items():
                times[name].append(timed(cmd))
                print(f"round {i + 1}: {name:16s} {times[name][-1]:6.2f} s", flush=True)
    med = {name: statistics.median(t) for name, t in times.items()}
    for name, m in med.items():
        print(f"median {name:16s} {m:6.2f} s over {len(times[name])} runs")
    print(f"ratio ddplab/accelerate = {med['ddplab check'] / med['accelerate test']:.2f} (target <= 0.80)")


if __name__ == "__main__":
    main()
