"""What each rank of a user's script runs first, under `ddplab launch`: die with the agent, then run the script.

    python -u bootstrap.py SCRIPT ARGS...        as `python -u SCRIPT ARGS...`
    python -u bootstrap.py -m MODULE ARGS...     as `python -u -m MODULE ARGS...`
    python -u bootstrap.py --exec PROGRAM ARGS...  as torchrun --no-python runs PROGRAM

The elastic agent starts every rank in a session of its own; without this, `kill -9` of the agent (or of ddplab)
would leave the script's ranks running and holding their GPUs. The script runs unchanged, as `__main__`, with the
sys.argv and sys.path[0] Python itself would give it. Started by path and written with the standard library only, so
it works with whatever interpreter torchrun was told to use (PYTHON_EXEC).
"""

import functools
import os
import runpy
import sys

PREEMPTED_EXIT = 4  # = ddplab.resume.PREEMPTED_EXIT (this file imports no ddplab module: see above)


@functools.cache
def _sibling(relative: str):
    """A standard-library-only ddplab module, loaded from its file under a private name: this rank's sys.path and
    sys.modules stay the script's (a module of the script's own named like it is not shadowed)."""
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), relative)
    name = "_ddplab_bootstrap_" + os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _die_with_parent() -> None:
    _sibling("lifeline.py").die_with_parent()


def main(argv: list) -> None:
    _die_with_parent()
    if not argv:
        sys.exit("usage: bootstrap.py [-m MODULE | --exec PROGRAM | SCRIPT] ARGS...")
    if argv[0] == "--exec":
        os.execvp(argv[1], argv[1:])  # the kernel keeps the parent-death signal across exec
    sys.path.pop(0)  # this file's folder: the script must see the path it would have seen
    try:
        if argv[0] == "-m":
            sys.argv = [argv[1], *argv[2:]]
            sys.path.insert(0, os.getcwd())
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = list(argv)
            sys.path.insert(0, os.path.dirname(os.path.abspath(argv[0])))
            runpy.run_path(argv[0], run_name="__main__")
    except SystemExit as e:
        if e.code == PREEMPTED_EXIT and _saved_on_notice():
            _leave_now(PREEMPTED_EXIT)
        raise
    except Exception as e:  # SystemExit and Ctrl-C go on as Python's own
        # What Python prints for an uncaught error, less the frames of this file and runpy: the user's traceback
        # starts in the user's script, as under plain torchrun (and a hook the script set still gets it).
        tb = _without_launcher_frames(e.__traceback__)
        sys.excepthook(type(e), e.with_traceback(tb), tb)  # Python 3.11+ prints e.__traceback__, older ones tb
        sys.exit(1)


def _saved_on_notice() -> bool:
    """ddplab.resume saved this rank's state on the machine's notice (it says so in `saved_on_notice`)."""
    resume = sys.modules.get("ddplab.resume")
    return bool(getattr(resume, "saved_on_notice", False))


def _leave_now(code: int) -> None:
    """Exit at once after a save on the notice, as Python would, less the interpreter's teardown: with torch loaded,
    freeing every module took 2-3 s of a 2-core machine's time per rank (benchmarks/preempt_trials.py), on a
    machine that is being taken away. What a normal exit does for the user still runs: the script's atexit
    handlers (logging's flush among them), then every file open() returned has its buffer flushed (the teardown
    would have)."""
    import atexit
    import gc
    import io

    _stamp("leaving")
    try:
        getattr(atexit, "_run_exitfuncs", lambda: None)()  # CPython's (ddplab.compat.PRIVATE_APIS)
        _stamp("atexit done")
        # The buffered file types open() returns, by exact type: a set lookup per object, where issubclass() over
        # the ~170,000 objects of a process with torch took 0.07-0.18 s of CPU, over a second of a loaded 2-core
        # machine (ddplab/stamps.py measured it). type(), not isinstance: isinstance reads obj.__class__, which
        # some module proxies answer with a deprecation warning (torch.distributed.reduce_op).
        buffered = {io.TextIOWrapper, io.BufferedWriter, io.BufferedRandom}
        for obj in gc.get_objects():
            if type(obj) in buffered:
                try:
                    if not obj.closed and obj.writable():
                        obj.flush()
                except Exception:  # noqa: BLE001 - one file that cannot be flushed must not keep the rank here
                    pass
    finally:
        _stamp("left")
        os._exit(code)


def _stamp(stage: str) -> None:
    """ddplab/stamps.py's stamp (for benchmarks/preempt_trials.py), loaded only when stamps are asked for. A
    measurement never changes the run: nothing it raises leaves _leave_now before its os._exit."""
    if os.environ.get("DDPLAB_PREEMPT_STAMPS"):
        try:
            _sibling(os.path.join(os.pardir, "stamps.py")).stamp("rank", stage)
        except Exception:  # noqa: BLE001
            pass


def _without_launcher_frames(tb):
    while tb is not None and (
        tb.tb_frame.f_code.co_filename == __file__ or "runpy" in os.path.basename(tb.tb_frame.f_code.co_filename)
    ):
        tb = tb.tb_next
    return tb


if __name__ == "__main__":
    main(sys.argv[1:])
