"""What every ddplab-owned rank runs: the target `module:function(payload)` of its run, with progress and outcome
written where the caller looks for them (run folder: events/, stacks/, errors/, results/).

Started by the elastic agent either as a fork of the agent (torch already imported: quick to start) or as a new
interpreter, `python -m ddplab.launcher.worker SPEC`, as torchrun starts a script's ranks.
"""

from __future__ import annotations

import faulthandler
import importlib
import json
import os
import signal
import sys
import time
import traceback
from pathlib import Path

from ddplab.flight import rankdump
from ddplab.launcher import progress
from ddplab.launcher.files import read_json, write_atomic
from ddplab.launcher.lifeline import die_with_parent
from ddplab.sanitize import rankside
from ddplab.stamps import stamp


def resolve(target: str):
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


def main(spec_path: str) -> None:
    die_with_parent()
    spec = json.loads(Path(spec_path).read_text())
    run_dir = Path(spec["run_dir"])
    # Files are per local rank: on several nodes each caller sees only its own ranks, and global ranks are
    # assigned by the rendezvous. The global rank travels in the "start" event.
    local = int(os.environ["LOCAL_RANK"])
    # After an elastic restart, what this rank wrote in an earlier attempt is not this run's outcome.
    for kind in ("results", "errors"):
        (run_dir / kind / f"local{local}.json").unlink(missing_ok=True)
    progress.open_events(run_dir / "events" / f"local{local}.jsonl")
    stack_file = open(run_dir / "stacks" / f"local{local}.txt", "w")
    faulthandler.register(signal.SIGUSR1, file=stack_file, all_threads=True)  # the caller's stack request
    rankdump.install()  # a forked rank never ran the bootstrap's sitecustomize: answer Flight Recorder requests here
    rankside.install()  # nor armed the sanitizer: `ddplab check` asks for it (a no-op unless the caller did)
    progress.mark(
        "start",
        pid=os.getpid(),
        rank=int(os.environ["RANK"]),
        attempt=int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")),
    )
    try:
        value = resolve(spec["target"])(read_json(run_dir / "payload.json"))
    except BaseException as e:
        text = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}".rstrip(": ")
        # dist.session() stamps the moment it saw the error, before its shutdown made the other ranks fail too.
        failed_at = getattr(e, "ddplab_failed_at", time.time())
        write_atomic(
            run_dir / "errors" / f"local{local}.json",
            {"error": text, "traceback": traceback.format_exc(), "time": failed_at},
        )
        raise
    progress.mark("done")
    write_atomic(run_dir / "results" / f"local{local}.json", value)
    stamp("rank", "result written")


if __name__ == "__main__":
    # Through the package module, not __main__: the target must share the progress module that main() opened.
    from ddplab.launcher.worker import main as _main

    _main(sys.argv[1])
