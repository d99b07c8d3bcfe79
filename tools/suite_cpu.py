"""Where the test suite's CPU goes, every process counted and charged to the test that started it.

    python tools/suite_cpu.py                       # the whole suite (as CI runs it), then the tables
    python tools/suite_cpu.py tests/launcher -n 0   # any pytest arguments
    python tools/suite_cpu.py --top 40 -- -m e2e

Linux, as root, with BSD process accounting (Debian: `apt-get install acct`). The kernel writes one record for every
process that ends, killed or not, with its CPU time: a parent's rusage misses the ranks of an agent killed before it
reaped them. Each new interpreter also logs its pid, its parent and PYTEST_CURRENT_TEST (which every subprocess
inherits), through a .pth file put in this interpreter's site-packages for the run and removed after (PYTHONPATH
would not do: some tests set their own); a process that is not Python (slurmd, a compiler) or a forked rank is
charged through its parents. Printed: CPU by kind of process, by test file, and the tests that cost most, with the
number of interpreters each started.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

HOOK_NAME = "ddplab_suite_cpu_hook"
HOOK = """\
import os, sys
_log = os.environ.get("DDPLAB_SUITE_CPU_LOG")
if _log:
    try:
        _fd = os.open(_log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        _test = os.environ.get("PYTEST_CURRENT_TEST", "-").replace(" ", "_")
        try:  # the real command line: at this point `python -m MODULE` has no module name in sys.argv yet
            with open("/proc/self/cmdline", "rb") as _f:
                _words = _f.read().decode(errors="replace").split("\\0")[1:]
        except OSError:
            _words = sys.argv
        _argv = " ".join(_words).replace("\\n", " ")[:200]
        os.write(_fd, f"{os.getpid()} {os.getppid()} {_test} {_argv}\\n".encode())
        os.close(_fd)
    except OSError:
        pass
"""


def accounting(path: Path | None) -> None:
    """Turn process accounting on into `path`, or off (None)."""
    subprocess.run(["accton", str(path) if path else "off"], check=True, stdout=subprocess.DEVNULL)


def records(pacct: Path) -> list[tuple[str, float, int, int]]:
    """(command, CPU seconds, pid, parent pid) per ended process, read by dump-acct (the acct package's)."""
    out = subprocess.run(["dump-acct", str(pacct)], capture_output=True, text=True, check=True).stdout
    rows = []
    for line in out.splitlines():
        f = [x.strip() for x in line.split("|")]
        if len(f) > 10:  # command|version|utime|stime|etime|uid|gid|mem|io|pid|ppid|...; times in 1/100 s (AHZ)
            rows.append((f[0], (float(f[2]) + float(f[3])) / 100, int(f[9]), int(f[10])))
    return rows


def kind(argv: str, parent_argv: str) -> str:
    if "launcher/bootstrap.py" in argv:
        return "ranks of user scripts (ddplab launch)"
    if "ddplab-spec.json" in argv:  # `-m ddplab.launcher.agent SPEC` or `-m ddplab.launcher.worker SPEC`
        return "ddplab's ranks, new interpreters (bench)" if "ddplab-spec.json" in parent_argv else "agents"
    if "execnet" in argv or "xdist" in argv:
        return "pytest workers"
    words = argv.split()
    if len(words) > 1 and (os.path.basename(words[0]) == "ddplab" or words[:2] == ["-m", "ddplab"]):
        sub = words[2] if words[:2] == ["-m", "ddplab"] and len(words) > 2 else words[1]
        return f"ddplab {sub} (the CLI)"
    if "torch.distributed.run" in argv or "torchrun" in argv:
        return "torchrun's agents"
    return "other Python (scripts, their ranks, pytest)"


def report(log: Path, pacct: Path, top: int) -> None:
    started = {}
    for line in log.read_text().splitlines():
        pid, ppid, test, *argv = line.split(" ", 3)
        test = re.sub(r"_\((setup|call|teardown)\)$", "", test)
        started[int(pid)] = (int(ppid), test, argv[0] if argv else "")
    rows = records(pacct)
    parent = {pid: ppid for _, _, pid, ppid in rows}
    parent.update({pid: ppid for pid, (ppid, _, _) in started.items()})

    def test_of(pid: int) -> str:
        for _ in range(64):  # pids are reused over a long run: a bounded walk up
            if pid in started and started[pid][1] != "-":
                return started[pid][1]
            pid = parent.get(pid, 0)
            if not pid:
                break
        return "(no test: pytest itself, its workers)"

    by_kind, by_file, by_test, count = (collections.Counter() for _ in range(4))
    for command, cpu, pid, _ in rows:
        test = test_of(pid)
        if pid in started:
            argv = started[pid][2]
            by_kind[kind(argv, started.get(started[pid][0], (0, "", ""))[2])] += cpu
            count[test] += 1
        else:
            by_kind["forked, or not Python: " + command] += cpu
        by_file[test.split("::")[0]] += cpu
        by_test[test] += cpu
    total = sum(cpu for _, cpu, _, _ in rows)
    print(f"{total:,.0f} CPU s in {len(rows):,} processes")
    for title, table, n in (("kind", by_kind, 12), ("test file", by_file, top), ("test", by_test, top)):
        print(f"\nCPU s by {title}" + ("  (processes it started)" if title == "test" else ""))
        for name, cpu in table.most_common(n):
            extra = f"  ({count[name]})" if title == "test" else ""
            print(f"{cpu:9.1f}  {name}{extra}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--top", type=int, default=25, help="rows of the file and test tables (default %(default)s)")
    args, pytest_args = p.parse_known_args()
    pytest_args = [a for a in pytest_args if a != "--"]
    missing = [tool for tool in ("accton", "dump-acct") if shutil.which(tool) is None]
    if missing or os.geteuid() != 0:
        print(
            f"suite_cpu: needs root and BSD process accounting ({', '.join(missing) or 'not root'}): "
            "run as root after `apt-get install acct`",
            file=sys.stderr,
        )
        return 2
    site = Path(sysconfig.get_paths()["purelib"])
    module, pth = site / f"{HOOK_NAME}.py", site / f"{HOOK_NAME}.pth"
    with tempfile.TemporaryDirectory(prefix="ddplab-suite-cpu-") as folder:
        log, pacct = Path(folder) / "started.log", Path(folder) / "pacct"
        pacct.touch()
        env = {**os.environ, "DDPLAB_SUITE_CPU_LOG": str(log)}
        module.write_text(HOOK)
        pth.write_text(f"import {HOOK_NAME}\n")
        accounting(pacct)
        try:
            code = subprocess.run([sys.executable, "-m", "pytest", "-q", *pytest_args], env=env).returncode
        finally:
            accounting(None)
            pth.unlink(missing_ok=True)
            module.unlink(missing_ok=True)
        report(log, pacct, args.top)
    return code


if __name__ == "__main__":
    sys.exit(main())
