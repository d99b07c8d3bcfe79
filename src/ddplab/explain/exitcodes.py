"""What a worker's exit code or signal means, in one line: `describe_exit(-9)`, `describe_exit(137)`,
`describe_exit("exitcode  : -7 (pid: 42)")`, `describe_exit("Signal 9 (SIGKILL) received by PID 42")`.

Exit codes arrive in three forms: Python's subprocess and torchrun report a death by signal N as -N; a shell reports
it as 128+N; torchrun's failure summary prints "exitcode : -N" and "Signal N (SIGNAME) received by PID". The signal
numbers are Linux's (where torchrun runs), not the host's, so a log from a Linux node reads the same anywhere.
"""

from __future__ import annotations

import re

# Linux signal numbers -> (name, what it usually means for a training worker)
SIGNALS: dict[int, tuple[str, str]] = {
    1: ("SIGHUP", "hung up: its terminal or SSH session closed; start long runs under nohup, tmux or the scheduler"),
    2: ("SIGINT", "interrupted (Ctrl-C, or torchrun passing an interrupt on)"),
    4: ("SIGILL", "illegal instruction: a binary built for a newer CPU (AVX-512) or GPU than this one"),
    6: (
        "SIGABRT",
        "aborted: a C++ exception nobody caught or a failed native assertion (the NCCL watchdog aborts "
        "after a failed or timed-out collective); the `what():` line that rank printed says why",
    ),
    7: (
        "SIGBUS",
        "bus error: shared memory ran out, usually /dev/shm too small (Docker's default is 64 MB: "
        "--shm-size=8g or --ipc=host; check `df -h /dev/shm`)",
    ),
    8: ("SIGFPE", "arithmetic error in native code (an integer division by zero)"),
    9: (
        "SIGKILL",
        "killed: usually the kernel's out-of-memory killer (host RAM, not GPU memory) or the scheduler's "
        "time/memory limit; look at `dmesg -T | grep -i -e oom -e killed` or the job's accounting",
    ),
    11: (
        "SIGSEGV",
        "segmentation fault: a crash in native code (an extension built for another torch/CUDA, a "
        "driver or library bug); rerun with PYTHONFAULTHANDLER=1 to see the Python frame",
    ),
    13: ("SIGPIPE", "broken pipe: the process its output went to (`| head`, a closed log collector) went away"),
    15: (
        "SIGTERM",
        "terminated from outside: torchrun stops the other ranks once one fails (look for the rank that "
        "failed first), or the scheduler/user stopped the job",
    ),
}
SHELL_SIGNAL_BASE = 128  # a shell reports "killed by signal N" as exit status 128 + N
_TEXT_FORMS = (
    re.compile(r"Signal (\d+) \((SIG\w+)\)"),  # torchrun: "Signal 9 (SIGKILL) received by PID 42"
    re.compile(r"Signals\.SIG\w+: (\d+)"),  # subprocess: "died with <Signals.SIGKILL: 9>"
)
_EXITCODE = re.compile(r"exit(?:ed)?(?:\s+with)?\s*(?:code|status)?\s*[:=]?\s*(-?\d+)", re.IGNORECASE)


def _code_from_text(text: str) -> int | None:
    """The exit code a line of launcher output states, as a Popen returncode (signals negative)."""
    for form in _TEXT_FORMS:
        m = form.search(text)
        if m:
            return -int(m.group(1))
    m = _EXITCODE.search(text) or re.fullmatch(r"\s*(-?\d+)\s*", text)
    return int(m.group(1)) if m else None


def describe_exit(code: int | str) -> str:
    """One line saying what a worker's exit code (or a launcher's text stating one) means."""
    if isinstance(code, str):
        parsed = _code_from_text(code)
        if parsed is None:
            return f"no exit code found in {code.strip()[:60]!r}"
        code = parsed
    if code < 0:
        return _signal_line(-code, f"exit code {code}")
    if SHELL_SIGNAL_BASE < code <= SHELL_SIGNAL_BASE + 64:
        return _signal_line(
            code - SHELL_SIGNAL_BASE, f"exit code {code} = {SHELL_SIGNAL_BASE} + {code - SHELL_SIGNAL_BASE}"
        )
    if code == 0:
        return "exit code 0: it finished normally"
    if code == 1:
        # No "above": ddplab prints the rank's traceback after this line, a torchrun log before it.
        return "exit code 1: it raised an exception; the Python traceback in its output says why"
    if code == 2:
        return (
            "exit code 2: usually a command-line usage error (argparse prints which argument), or python could not "
            "open the script path"
        )
    return f"exit code {code}: the program chose it (sys.exit({code}) or its launcher); its own output says why"


def _signal_line(number: int, prefix: str) -> str:
    name, meaning = SIGNALS.get(number, (f"signal {number}", "killed by a signal"))
    return f"{prefix} ({name}): {meaning}"
