"""How long `ddplab lint` takes on a 100-file project (issue 28: at most 2 s).

    python benchmarks/lint_speed.py [--files 100] [--repeat 3]

The project: a folder of FILES real Python modules (ddplab's own source, copied), plus a training script beside them
that imports every one, so that lint follows all the imports. Measured side by side in one run: lint of the script
(it reads the project through its imports), lint of the folder (every script of it), and the end-to-end CLI
(`python -m ddplab lint FOLDER`, interpreter start included); each the best of REPEAT, in wall-clock seconds and in
CPU seconds (what the lint itself costs: on a machine shared with other work the wall clock also counts the waits for
a core; `os.getloadavg()` is printed beside), with its ratio to the 2 s budget. docs/lint.md records the figures.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
from ddplab.lint import lint_file  # noqa: E402

BUDGET = 2.0


def project(folder: Path, files: int) -> Path:
    sources = sorted((ROOT / "src" / "ddplab").rglob("*.py"))
    if len(sources) < files:
        sources = (sources * (files // len(sources) + 1))
    names = []
    for i, src in enumerate(sources[:files]):
        name = f"mod{i:03d}_{src.stem}"
        shutil.copy(src, folder / f"{name}.py")
        names.append(name)
    script = folder / "train.py"
    bad = (ROOT / "tests" / "scripts" / "lint_bad.py").read_text()
    script.write_text("".join(f"import {n}\n" for n in names) + bad)
    return script


def cpu() -> float:
    mine, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return mine.ru_utime + mine.ru_stime + children.ru_utime + children.ru_stime


def best(fn, repeat: int) -> tuple[float, float]:
    """(wall, cpu) seconds: the best of `repeat` runs each."""
    walls, cpus = [], []
    for _ in range(repeat):
        start, start_cpu = time.perf_counter(), cpu()
        fn()
        walls.append(time.perf_counter() - start)
        cpus.append(cpu() - start_cpu)
    return min(walls), min(cpus)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="ddplab-lint-speed-") as tmp:
        folder = Path(tmp)
        script = project(folder, args.files)
        read = lint_file(script).files
        rows = [("script + its imports", best(lambda: lint_file(script), args.repeat), read),
                ("folder, script by script", best(lambda: lint_file(folder), args.repeat), lint_file(folder).files),
                ("CLI end to end (python -m ddplab lint FOLDER)",
                 best(lambda: subprocess.run([sys.executable, "-m", "ddplab", "lint", str(folder)],
                                             capture_output=True, env={"PYTHONPATH": str(ROOT / "src"),
                                                                       "PATH": "/usr/bin:/bin"}), args.repeat),
                 lint_file(folder).files)]
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"{'what':48} {'files':>5} {'wall s':>7} {'of 2 s':>7} {'cpu s':>7} {'of 2 s':>7}")
    for what, (wall, used), n in rows:
        print(f"{what:48} {n:5} {wall:7.3f} {wall / BUDGET:7.2f} {used:7.3f} {used / BUDGET:7.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
