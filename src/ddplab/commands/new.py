"""`ddplab new PATH`: write a correct, commented DDP training script to start from.

The script is ddplab's template (ddplab/templates/train_ddp.py.tmpl) with the chosen task's blocks kept:
lines between `#@ TASK` and the next `#@ ...` marker belong to that task only; `{{name}}` fills in a value.
It imports only torch, so it keeps working where ddplab is not installed.
"""

from __future__ import annotations

import contextlib
import os
import shlex
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from ddplab import report
from ddplab.errors import DdplabError

TEMPLATE = "train_ddp.py.tmpl"
TASKS = ("regression", "classification")


@dataclass
class NewResult:
    path: str
    task: str
    lines: int
    overwritten: bool
    run: str  # the command that starts it


def add_parser(sub) -> None:
    p = sub.add_parser("new", help="write a correct, commented DDP training script to start from")
    p.add_argument("path", help="file to write, e.g. train.py")
    p.add_argument("--task", choices=TASKS, default="regression", help="what the example learns (default: regression)")
    p.add_argument("--force", action="store_true", help="overwrite PATH if it exists")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    p.set_defaults(run=run)


def render_script(task: str, filename: str = "train.py") -> str:
    """The template with `task`'s blocks kept, the other tasks' dropped, and the placeholders filled in.

    `filename` is the name the docstring's runbook uses to start the script.
    """
    if task not in TASKS:
        raise DdplabError(f"unknown task {task!r}: use one of {', '.join(TASKS)}")
    text = (resources.files("ddplab") / "templates" / TEMPLATE).read_text(encoding="utf-8")
    kept, block = [], None  # block: the task of the marked block we are in, None outside blocks
    for line in text.splitlines(keepends=True):
        marker = line.strip()
        if marker.startswith("#@ "):
            name = marker[3:].strip()
            block = None if name == "end" else name
            continue
        if block is None or block == task:
            kept.append(line)
    script = "".join(kept).replace("{{task}}", task).replace("{{filename}}", filename)
    assert "{{" not in script and "#@" not in script, "template placeholder left unfilled"
    return script


def write_script(path: str, task: str, force: bool = False) -> NewResult:
    target = Path(path)
    if target.is_dir():
        raise DdplabError(f"{path} is a directory: give a file name, e.g. {target / 'train.py'}")
    existed = target.exists()
    if existed and not force:
        raise DdplabError(f"{path} already exists: pass --force to overwrite it, or choose another path")
    blocking = next((p for p in target.parents if p.exists() and not p.is_dir()), None)
    if blocking is not None:
        raise DdplabError(f"cannot write {path}: {blocking} is a file, not a directory: choose another path")
    script = render_script(task, target.name)
    # Through a temporary file and a rename: an interrupted write never leaves half a script behind,
    # and with --force the old file stays intact until the new one is complete.
    tmp = target.with_name(f".{target.name}.ddplab-new.tmp")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(script, encoding="utf-8")
        os.replace(tmp, target)
    except OSError as e:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise DdplabError(f"cannot write {path}: {e.strerror or e}: choose a path in a writable directory") from None
    run_it = f"ddplab launch --nproc-per-node 2 {shlex.quote(path)}"
    return NewResult(str(target), task, script.count("\n"), existed, run_it)


def run(args) -> int:
    result = write_script(args.path, args.task, args.force)
    report.emit(result, args.json, render)
    return 0


def render(con, r: NewResult) -> None:
    verb = "overwrote" if r.overwritten else "wrote"
    con.print(
        f"{verb} {r.path}: a {r.task} DDP training script ({r.lines} lines, needs torch and ddplab.resume)",
        soft_wrap=True,
    )
    con.print(f"run it:  {r.run}", soft_wrap=True)
    con.print("its docstring lists the other ways to start it: GPUs, several machines, resuming")
