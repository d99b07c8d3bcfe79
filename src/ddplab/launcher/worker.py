"""What every ddplab-owned rank runs: the target `module:function(payload)` of its run, with progress and outcome
written where the caller looks for them (run folder: events/, stacks/, errors/, results/).

Started by the elastic agent either as a fork of the agent (torch already imported: quick to start) or as a new
interpreter, `python -m ddplab.launcher.worker SPEC`, as torchrun starts a script's ranks. Either way a rank starts the
same: default signal handlers, and the hooks ddplab's bootstrap installs in a script's ranks (boot/sitecustomize.py;
those above this layer, as perf's --profile hook, named by the caller in the spec's "hooks").
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
from ddplab.sanitize import paramnames, rankside
from ddplab.stamps import stamp


def resolve(target: str):
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


def default_signals() -> None:
    """The handlers a new interpreter starts with. A forked rank inherits the agent's instead: torch's agent turns
    SIGTERM, SIGINT, SIGHUP and SIGQUIT into an exception, ddplab's ignores SIGUSR1/2, and a rank must die of them."""
    for name in ("SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2"):
        signal.signal(getattr(signal, name), signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)


def main(spec_path: str, forked: bool = True) -> None:
    if forked:
        default_signals()
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
    # A forked rank never ran the bootstrap's sitecustomize (a new one did when the run records collectives): each
    # hook installs once, only where the caller asked for it, in the bootstrap's order.
    rankdump.install()  # answer Flight Recorder requests
    for hook in spec["hooks"]:  # the caller's own, e.g. train's --profile (perf/profhook.py)
        resolve(hook)()
    rankside.install()  # the sanitizer: `ddplab check` and `ddplab train` ask for it
    paramnames.install()  # DDP's unused-parameter indices given their names
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
        if forked:  # torch's fork wrapper sends the traceback to the agent alone: the rank's log must show it too
            traceback.print_exc()
        raise
    progress.mark("done")
    write_atomic(run_dir / "results" / f"local{local}.json", value)
    stamp("rank", "result written")


if __name__ == "__main__":
    # Through the package module, not __main__: the target must share the progress module that main() opened.
    from ddplab.launcher.worker import main as _main

    _main(sys.argv[1], forked=False)
