"""ddplab's worker bootstrap: on PYTHONPATH, Python imports this at start-up (site.py), so every torchrun worker
starts ddplab's Flight Recorder dump thread with no change to the user's script (see ddplab/flight/rankdump.py),
arms `--profile`'s hook (ddplab/perf/profhook.py, idle unless asked) and the sanitizer's checks
(ddplab/sanitize/rankside.py: on under `ddplab launch` unless --sanitize-steps 0).
It then runs the sitecustomize it shadows, if the environment has one, so that one keeps working.

A rank's entry point, like the CLI's: it imports the hooks it installs and nothing imports it (flight.reader puts this
folder on the ranks' PYTHONPATH by path). This folder holds nothing else: all of it is importable in the ranks."""

import importlib.machinery
import importlib.util
import os
import sys

try:
    from ddplab.flight import rankdump

    rankdump.install()
except Exception as e:  # noqa: BLE001 - the bootstrap must never stop the user's script
    sys.stderr.write(f"ddplab: Flight Recorder bootstrap not installed: {e}\n")
try:  # `--profile`: torch.profiler over a window of steps (ddplab/perf/profhook.py); off unless asked
    from ddplab.perf import profhook

    profhook.install()
except Exception as e:  # noqa: BLE001
    sys.stderr.write(f"ddplab: --profile hook not installed: {e}\n")
try:  # the sanitizer: what each rank did in its first optimizer steps (ddplab/sanitize/); off unless asked
    from ddplab.sanitize import rankside

    rankside.install()
except Exception as e:  # noqa: BLE001
    sys.stderr.write(f"ddplab: sanitizer not installed: {e}\n")

try:  # DDP's unused-parameter indices given their names (ddplab/sanitize/paramnames.py)
    from ddplab.sanitize import paramnames

    paramnames.install()
except Exception as e:  # noqa: BLE001
    sys.stderr.write(f"ddplab: DDP parameter names not installed: {e}\n")

_here = os.path.dirname(os.path.abspath(__file__))
_rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != _here]
_spec = importlib.machinery.PathFinder.find_spec("sitecustomize", _rest)
if _spec is not None and _spec.loader is not None and _spec.origin != os.path.abspath(__file__):
    _shadowed = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_shadowed)
