"""Run every command in docs/guide.md and write its real output into the guide.

A block in the guide looks like this (the output between the fences is rewritten on every run):

    <!-- run: ddplab check --nproc 2 -->            options: `exit=N` (expected exit code, default 0),
    ```console                                      `slow` (skipped with --fast), `env=K=V` (repeatable)
    $ ddplab check --nproc 2
    ...output...
    ```

Commands run with bash, one after another, in one scratch directory (so `ddplab new train.py` can be followed by
`torchrun ... train.py`), with NO_COLOR=1, 100 columns and $DOCS naming this folder. A command whose exit code
differs from the documented one fails the run: the guide never shows output that its commands no longer produce.
Paths in the output are written relative to the project, or as <site-packages> and <python> (relative_paths).

    python docs/make_guide.py            # run everything, rewrite docs/guide.md
    python docs/make_guide.py --check    # run, compare exit codes, write nothing (the tests do this)
    python docs/make_guide.py --fast     # skip blocks marked slow
"""

from __future__ import annotations

import argparse
import os
import re
import site
import subprocess
import sys
import sysconfig
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

DOCS = Path(__file__).resolve().parent
GUIDE = DOCS / "guide.md"
BLOCK = re.compile(r"<!-- run(?P<opts>(?: [a-z]+(?:=\S+)?)*): (?P<cmd>.+?) -->\n```console\n.*?```", re.DOTALL)
TIMEOUT_S = 600


@dataclass
class Block:
    command: str
    exit: int
    slow: bool
    env: dict[str, str]


def parse(match: re.Match) -> Block:
    opts = match.group("opts").split()
    env = dict(o[4:].split("=", 1) for o in opts if o.startswith("env="))
    code = next((int(o[5:]) for o in opts if o.startswith("exit=")), 0)
    return Block(match.group("cmd"), code, "slow" in opts, env)


def run_block(block: Block, cwd: Path) -> tuple[int, str]:
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "100", "TERM": "dumb", "DOCS": str(DOCS), **block.env}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    proc = subprocess.run(["bash", "-c", block.command], cwd=cwd, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=TIMEOUT_S)
    return proc.returncode, relative_paths(proc.stdout, cwd).rstrip()


def relative_paths(text: str, cwd: Path) -> str:
    """The guide reads the same whoever generates it: this machine's paths become <site-packages> (installed
    packages), <python> (the interpreter's prefix: the venv's, the base install's), paths relative to the project
    (its root is the folder above docs/) and `.` (the scratch directory the commands run in)."""
    root = DOCS.parent
    names = {str(cwd): ".", f"{root}{os.sep}": "", str(root): "."}
    for prefix in {sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix}:
        names[prefix] = "<python>"
    for key in ("purelib", "platlib"):
        names[sysconfig.get_paths()[key]] = "<site-packages>"
    for site_dir in site.getsitepackages():
        names[site_dir] = "<site-packages>"
    for path in sorted(names, key=len, reverse=True):  # the longest first: site-packages lies inside a prefix
        text = text.replace(path, names[path])
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="run and compare exit codes; write nothing")
    parser.add_argument("--fast", action="store_true", help="skip blocks marked slow")
    parser.add_argument("--guide", type=Path, default=GUIDE)
    args = parser.parse_args(argv)
    text = args.guide.read_text()
    failures, pieces, last = [], [], 0
    with tempfile.TemporaryDirectory(prefix="ddplab-guide-") as tmp:
        for match in BLOCK.finditer(text):
            block = parse(match)
            pieces.append(text[last:match.start()])
            last = match.end()
            if block.slow and args.fast:
                pieces.append(match.group(0))
                continue
            start = time.monotonic()
            code, output = run_block(block, Path(tmp))
            print(f"[{time.monotonic() - start:5.1f}s exit {code}] {block.command}", file=sys.stderr, flush=True)
            if code != block.exit:
                failures.append(f"`{block.command}` exited {code}, the guide says {block.exit}:\n{output[-2000:]}")
            header = match.group(0).split("\n", 1)[0]
            pieces.append(f"{header}\n```console\n$ {block.command}\n{output}\n```")
    pieces.append(text[last:])
    for failure in failures:
        print(f"FAIL {failure}", file=sys.stderr)
    if not args.check and not failures:
        args.guide.write_text("".join(pieces))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
