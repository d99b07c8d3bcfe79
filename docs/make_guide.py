"""Run every command in docs/guide.md and write its real output into the guide.

A block in the guide looks like this (the output between the fences is rewritten on every run):

    <!-- run exit=3 shows="verdict: NOT READY": DDPLAB_FAULT=... ddplab check --hang-timeout 5 -->
    ```console
    $ DDPLAB_FAULT=... ddplab check --hang-timeout 5
    ...output...
    ```

Options: `exit=N` (the expected exit code, default 0), `slow` (skipped with --fast), `shows="TEXT"` (repeatable:
text the output must contain, compared with runs of white space folded, so that wrapping does not matter). There is
no hidden environment: what a command needs is written in it, so that pasting it into a shell from the repository
root does what the guide shows. The blocks run one after another with bash, in a stand-in for the repository root
(the checkout's top-level entries under version control linked into a scratch folder: the files the guide writes,
such as train.py, land there and not in the checkout), with NO_COLOR=1 and 100 columns, and with TMPDIR naming a
scratch folder of its own, so that what a command leaves in the temporary folder can be seen. A block fails when
its exit code or its `shows` text differs from the guide, when it prints a Python traceback, or when a process it
started outlives it: the guide never shows output that its commands no longer produce. A ddplab-* folder left in the temporary folder that the block's
output does not name as the logs of a failed run is warned about here (the guide's text is still right) and fails
tests/test_guide.py. Paths in the output are written relative to the project, or as
<site-packages>, <python> and /tmp (relative_paths).

    python docs/make_guide.py            # run everything, rewrite docs/guide.md
    python docs/make_guide.py --check    # run and compare, write nothing (tests/test_guide.py runs the blocks)
    python docs/make_guide.py --fast     # skip blocks marked slow
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import site
import subprocess
import sys
import sysconfig
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
GUIDE = DOCS / "guide.md"
BLOCK = re.compile(
    r'<!-- run(?P<opts>(?: [a-z]+(?:=(?:"[^"]*"|\S+))?)*): (?P<cmd>.+?) -->\n```console\n.*?```', re.DOTALL
)
OPTION = re.compile(r' ([a-z]+)(?:=("[^"]*"|\S+))?')
TIMEOUT_S = 600
TRACEBACK = "Traceback (most recent call last)"
# The sanitizer's heading when it saw a DDP mistake (ddplab/sanitize/readout.py render): the guide's scripts, ddplab's
# recipes and check run sanitized, and a finding the guide does not print is a mistake in what the guide teaches.
SANITIZED = re.compile(r"sanitizer \(ranks [^)]*watched\): ")
SANITIZER_SAID = re.compile(r"DDP mistakes? seen|the run failed on what the sanitizer saw")


@dataclass
class Block:
    command: str
    exit: int = 0
    slow: bool = False
    shows: list[str] = field(default_factory=list)


def parse(match: re.Match) -> Block:
    block = Block(match.group("cmd"))
    for name, value in OPTION.findall(match.group("opts")):
        if name == "exit":
            block.exit = int(value)
        elif name == "slow":
            block.slow = True
        elif name == "shows":
            block.shows.append(value.strip('"'))
        else:  # env= once hid variables from the reader: a command must be complete as printed
            raise ValueError(
                f"unknown option {name!r} in the guide's block `{block.command}`: use exit=N, slow or "
                'shows="TEXT" (write environment variables inline in the command)'
            )
    return block


class Sandbox:
    """A stand-in for the repository root: the checkout's top-level entries linked into a scratch folder, so that
    relative paths (docs/examples/...) resolve as in the checkout while the files the guide writes stay out of it;
    and a temporary folder of its own (TMPDIR), to see what the commands leave behind."""

    def __init__(self, base: Path):
        self.root, self.tmp = base / "repo", base / "tmp"
        self.root.mkdir()
        self.tmp.mkdir()
        for name in tracked_entries():
            (self.root / name).symlink_to(ROOT / name)

    def leftovers(self) -> set[str]:
        return {p.name for p in self.tmp.glob("ddplab-*")}


def tracked_entries() -> list[str]:
    """The checkout's top-level files and folders under version control: not what a user or an earlier guide run
    left there (train.py, runs/), which the guide's commands would otherwise find or overwrite."""
    try:
        listed = subprocess.run(["git", "-C", str(ROOT), "ls-files"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        listed = None
    if listed is None or listed.returncode != 0 or not listed.stdout.strip():  # not a git checkout: all but dotfiles
        return sorted(p.name for p in ROOT.iterdir() if not p.name.startswith("."))
    return sorted({line.split("/", 1)[0] for line in listed.stdout.splitlines() if not line.startswith(".")})


@dataclass
class Outcome:
    code: int  # -1: the command overstayed its deadline and was killed
    output: str  # with paths made relative (relative_paths)
    left: list[str]  # ddplab-* folders the command left in the temporary folder
    seconds: float
    survived: bool = False  # a process of the block was still running after it ended (then killed)


def run_block(block: Block, sandbox: Sandbox, timeout: float = TIMEOUT_S) -> Outcome:
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "100", "TERM": "dumb", "TMPDIR": str(sandbox.tmp)}
    env.pop("DOCS", None)  # an old guide's variable: a command using it must fail here as it does for a reader
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    before, start = sandbox.leftovers(), time.monotonic()
    proc = subprocess.Popen(
        ["bash", "-c", block.command],
        cwd=sandbox.root,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
        code = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, code = proc.communicate()[0] + f"\n[killed: overstayed {timeout:.0f}s]", -1
    finally:
        survived = end_group(proc.pid)
    left = sorted(sandbox.leftovers() - before)
    return Outcome(code, relative_paths(out, sandbox).rstrip(), left, time.monotonic() - start, survived)


def end_group(pgid: int, grace_s: float = 5.0) -> bool:
    """Nothing the block started may outlive it (a `cmd &` it did not wait for): True when something of its
    process group was still running after grace_s, and then killed."""
    deadline = time.monotonic() + grace_s
    while True:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        if time.monotonic() > deadline:
            os.killpg(pgid, signal.SIGKILL)
            return True
        time.sleep(0.1)


def relative_paths(text: str, sandbox: Sandbox) -> str:
    """The guide reads the same whoever generates it: this machine's paths become <site-packages> (installed
    packages), <python> (the interpreter's prefix: the venv's, the base install's), /tmp (the scratch TMPDIR: what
    a reader's default temporary folder shows), paths relative to the project (its root, and the stand-in root
    the commands run in) and `.` (the root itself)."""
    names = {str(sandbox.tmp): "/tmp"}
    for root in (ROOT, sandbox.root):
        names.update({f"{root}{os.sep}": "", str(root): "."})
    for prefix in {sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix}:
        names[prefix] = "<python>"
    for key in ("purelib", "platlib"):
        names[sysconfig.get_paths()[key]] = "<site-packages>"
    for site_dir in site.getsitepackages():
        names[site_dir] = "<site-packages>"
    for path in sorted(names, key=len, reverse=True):  # the longest first: site-packages lies inside a prefix
        text = text.replace(path, names[path])
    return text


def problems(block: Block, outcome: Outcome) -> list[str]:
    """How a block's run differs from what the guide shows: its exit code, its `shows` text, a traceback."""
    found = []
    if outcome.code == -1:
        found.append(f"overstayed its deadline (exit code {block.exit} expected)")
    elif outcome.code != block.exit:
        found.append(f"exited {outcome.code}, the guide says {block.exit}")
    flat = " ".join(outcome.output.split())
    found += [f"does not show {text!r}" for text in block.shows if " ".join(text.split()) not in flat]
    if TRACEBACK in outcome.output:
        found.append("printed a Python traceback")
    if SANITIZED.search(outcome.output) and not any(SANITIZER_SAID.search(text) for text in block.shows):
        found.append("the sanitizer saw a DDP mistake the guide does not show")
    if outcome.survived:
        found.append("left a process running after it ended")
    return found


def strays(block: Block, outcome: Outcome) -> list[str]:
    """ddplab folders the run left in /tmp that the user was not told about: only a run that failed (as the guide
    says it does) may keep its logs there, and its output must name the folder."""
    told = outcome.code != 0 and outcome.code == block.exit
    return [
        f"left /tmp/{name} behind" + ("" if outcome.code == 0 else " without naming it in its output")
        for name in outcome.left
        if not (told and f"/tmp/{name}" in outcome.output)
    ]


def evidence(block: Block, outcome: Outcome, sandbox: Sandbox, tail: int = 1500) -> str:
    """For a failed block: the end of each file its command redirected output into (`> runs/check.log`), and of
    each log in the ddplab folders it left: what a run in the background said, which its output does not show."""
    paths = [sandbox.root / name for name in re.findall(r"(?:^|\s)\d?>>?\s*([\w./-]+)", block.command)]
    paths += sorted(p for name in outcome.left for p in (sandbox.tmp / name).rglob("*.log"))
    parts = []
    for path in paths:
        try:
            text = path.read_text(errors="replace")
        except OSError:
            continue
        name = path.relative_to(sandbox.root if path.is_relative_to(sandbox.root) else sandbox.tmp)
        parts.append(f"--- {name} (its last {tail} characters):\n{relative_paths(text[-tail:], sandbox)}")
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="run and compare with the guide; write nothing")
    parser.add_argument("--fast", action="store_true", help="skip blocks marked slow")
    parser.add_argument("--guide", type=Path, default=GUIDE)
    args = parser.parse_args(argv)
    text = args.guide.read_text()
    failures, pieces, last = [], [], 0
    with tempfile.TemporaryDirectory(prefix="ddplab-guide-") as tmp:
        sandbox = Sandbox(Path(tmp))
        for match in BLOCK.finditer(text):
            block = parse(match)
            pieces.append(text[last : match.start()])
            last = match.end()
            if block.slow and args.fast:
                pieces.append(match.group(0))
                continue
            outcome = run_block(block, sandbox)
            print(f"[{outcome.seconds:5.1f}s exit {outcome.code}] {block.command}", file=sys.stderr, flush=True)
            if found := problems(block, outcome):
                failures.append(
                    f"`{block.command}` {'; '.join(found)}:\n{outcome.output[-2000:]}\n{evidence(block, outcome, sandbox)}"
                )
            # Not the guide's text but the tool's hygiene: tests/test_guide.py fails on it, the guide is still written.
            for stray in strays(block, outcome):
                print(f"WARNING `{block.command}` {stray}", file=sys.stderr, flush=True)
            header = match.group(0).split("\n", 1)[0]
            pieces.append(f"{header}\n```console\n$ {block.command}\n{outcome.output}\n```")
    pieces.append(text[last:])
    for failure in failures:
        print(f"FAIL {failure}", file=sys.stderr)
    if not args.check and not failures:
        args.guide.write_text("".join(pieces))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
