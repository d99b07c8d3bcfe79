"""`ddplab explain` on a huge log: speed (MB/s) and peak memory (RSS), streamed reader against the whole-file path.

Makes a log of training-step lines with a real failure at the end (tests/logs/cuda_oom.log's quote) in a temporary
folder (deleted after), then runs, each in a fresh process, side by side in this one run:
  - new:  `python -m ddplab explain LOG` (ddplab.explain.logread streams it through the prefilter), on --size-mb;
  - old:  the whole-file path the command had before (read all, decode, explain_text on the whole text), on
          --baseline-mb (a smaller file of the same lines: the old path needs ~5 bytes of memory per byte of log).
          With --baseline-src, the old path runs from that source tree (a checkout of the commit before).
Prints each one's MB/s and peak RSS and the ratios, and checks that both name the same first finding.

    python benchmarks/explain_speed.py                       # 2048 MB new, 200 MB old
    python benchmarks/explain_speed.py --size-mb 500 --baseline-mb 500 --baseline-src /tmp/before/src
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FAILURE = ROOT / "tests" / "logs" / "cuda_oom.log"
BLOCK_LINES = 40_000

# Runs in a fresh interpreter: one path, then its wall time and peak RSS as JSON on the last line.
CHILD = r"""
import json, resource, sys, time
mode, path = sys.argv[1], sys.argv[2]
t = time.perf_counter()
if mode == "new":
    from ddplab.explain.matcher import explain_log
    from ddplab.explain.logread import read_path
    e = explain_log(read_path(path))
else:
    from ddplab.explain.matcher import explain_text
    with open(path, "rb") as f:
        e = explain_text(f.read().decode("utf-8", errors="replace"), source=path)
seconds = time.perf_counter() - t
use = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"seconds": seconds, "cpu": use.ru_utime + use.ru_stime, "rss": use.ru_maxrss * 1024,
                  "first": e.matches[0].rule if e.matches else None}))
"""
CLI = r"""
import json, resource, subprocess, sys, time
t = time.perf_counter()
p = subprocess.run([sys.executable, "-m", "ddplab", "explain", sys.argv[1]], stdout=subprocess.DEVNULL)
seconds = time.perf_counter() - t
use = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"seconds": seconds, "cpu": use.ru_utime + use.ru_stime, "rss": use.ru_maxrss * 1024,
                  "rc": p.returncode}))
"""


def quoted_failure() -> str:
    return "\n".join(line for line in FAILURE.read_text().splitlines() if not line.startswith("# ")) + "\n"


def make_log(path: Path, megabytes: int) -> int:
    """Step lines (as a training loop prints them under torchrun --tee) up to `megabytes`, then the failure."""
    target = megabytes * 1_000_000
    step = 0
    with open(path, "w") as f:
        while f.tell() < target:
            lines = []
            for _ in range(BLOCK_LINES):
                step += 1
                lines.append(f"[default{step % 8}]:step {step:>9} | loss {2.5 / (1 + step * 1e-5):.4f} | "
                             f"lr 3.00e-04 | {11.0 + step % 7 * 0.3:.1f} ms/step | {81234 + step % 97} tokens/s\n")
            f.write("".join(lines))
        f.write(quoted_failure())
    return path.stat().st_size


def measure(code: str, args: list[str], src: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=str(src))
    out = subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size-mb", type=int, default=2048, help="size of the log the new path reads")
    p.add_argument("--baseline-mb", type=int, default=200, help="size of the log the old whole-file path reads")
    p.add_argument("--baseline-src", type=Path, default=ROOT / "src",
                   help="source tree for the old path (default: this one's explain_text on the whole text)")
    p.add_argument("--dir", type=Path, default=None, help="where to write the logs (default: a temporary folder)")
    a = p.parse_args()
    with tempfile.TemporaryDirectory(dir=a.dir, prefix="explain-speed-") as tmp:
        big, small = Path(tmp) / "big.log", Path(tmp) / "small.log"
        big_bytes = make_log(big, a.size_mb)
        small_bytes = make_log(small, a.baseline_mb)
        print(f"logs: {big_bytes / 1e6:,.0f} MB and {small_bytes / 1e6:,.0f} MB of step lines, the failure at the end "
              f"(page cache warm: the figures are CPU, not disk)", flush=True)
        rows = [("new, streamed", big_bytes, measure(CHILD, ["new", str(big)], ROOT / "src")),
                ("new, streamed", small_bytes, measure(CHILD, ["new", str(small)], ROOT / "src")),
                ("old, whole file", small_bytes, measure(CHILD, ["old", str(small)], a.baseline_src)),
                ("CLI end to end", big_bytes, measure(CLI, [str(big)], ROOT / "src"))]
    # MB per CPU second as well as per wall second: on a shared machine the wall clock also counts others' work
    print(f"load average (1 min) {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPU(s)")
    print(f"{'path':<18}{'MB':>8}{'wall s':>9}{'MB/s':>8}{'CPU s':>8}{'MB/CPU s':>10}{'peak RSS MB':>13}  first finding")
    for name, size, r in rows:
        print(f"{name:<18}{size / 1e6:>8,.0f}{r['seconds']:>9.2f}{size / 1e6 / r['seconds']:>8.1f}{r['cpu']:>8.2f}"
              f"{size / 1e6 / r['cpu']:>10.1f}{r['rss'] / 1e6:>13.0f}  {r.get('first', 'rc=' + str(r.get('rc')))}")
    new_small, old_small = rows[1][2], rows[2][2]
    print(f"same file ({small_bytes / 1e6:,.0f} MB), new/old: speed {old_small['seconds'] / new_small['seconds']:.1f}x "
          f"(CPU {old_small['cpu'] / new_small['cpu']:.1f}x), peak RSS {new_small['rss'] / old_small['rss']:.2f}x")
    same = rows[0][2]["first"] == rows[1][2]["first"] == old_small["first"]
    print("first finding: " + ("the same on every path" if same else "DIFFERS between paths"))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
