"""Rank side: DDP's "Parameter indices which did not receive grad for rank 0: 2 3", given the parameters' names
(issue 42 point 7: `aux_head.weight`, `aux_head.bias`, not 2 and 3).

DDP names them only under TORCH_DISTRIBUTED_DEBUG=INFO or DETAIL, which also changes what it checks and costs. The
rank that raises the error knows its DDP models, so it reads the names itself: the indices count the parameters
DDP's reducer holds, in the wrapped module's named_parameters() order, each shared parameter once, frozen ones and
`_ddp_params_and_buffers_to_ignore` left out (torch/nn/parallel/distributed.py, _build_params_for_reducer; the same
order in torch 2.6-2.10). Installed by ddplab/boot/sitecustomize.py in every rank of `ddplab launch`: it notes each
DDP model made (a weak reference) and, after Python has printed an uncaught error, adds one stderr line when the
error is that one. The launcher puts the names into its diagnosis (userscript/analysis.py)."""

from __future__ import annotations

import functools
import os
import re
import sys
import weakref

from ddplab import afterimport
from ddplab.sanitize.userframe import call_through

PATTERN = re.compile(r"Parameter indices which did not receive grad for rank (\d+): ([\d ]+)")
LINE = "ddplab: parameters that received no gradient on rank {rank} (DDP's indices {indices}): {names}"
NAMED = re.compile(r"ddplab: parameters that received no gradient on rank (\d+) \(DDP's indices [\d ]+\): (.+)")

_models: weakref.WeakSet = weakref.WeakSet()
_installed = False


def install() -> bool:
    """In a torchrun worker: watch DDP models once the script imports torch. False when not a worker."""
    global _installed
    if _installed or "LOCAL_RANK" not in os.environ:
        return _installed
    _installed = True
    afterimport.when_imported("torch", _attach, "DDP parameter names")
    return True


def _attach(torch) -> None:
    ddp = torch.nn.parallel.DistributedDataParallel
    init = ddp.__init__

    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        call_through(init, self, *args, **kwargs)
        _models.add(self)

    ddp.__init__ = __init__
    hook = sys.excepthook

    def excepthook(kind, value, tb):
        hook(kind, value, tb)
        try:
            line = note(str(value))
        except Exception:  # noqa: BLE001 - never a second traceback after the user's
            line = None
        if line:
            sys.stderr.write(line + "\n")
            sys.stderr.flush()

    sys.excepthook = excepthook


def reducer_names(model) -> list[str]:
    """The names of the parameters DDP's reducer holds, in its order (the indices its errors give)."""
    ignored = set(getattr(model, "parameters_to_ignore", ()) or ())
    seen, names = set(), []
    for name, p in model.module.named_parameters():
        if name in ignored or not p.requires_grad or id(p) in seen:
            continue
        seen.add(id(p))
        names.append(name)
    return names


def note(message: str, models=None) -> str | None:
    """The line naming the parameters of DDP's message, or None when the message is another, or no DDP model of
    this rank has that many parameters."""
    m = PATTERN.search(message)
    if m is None:
        return None
    indices = [int(i) for i in m[2].split()]
    for model in list(_models if models is None else models):
        names = reducer_names(model)
        if indices and max(indices) < len(names):
            return LINE.format(
                rank=m[1], indices=" ".join(map(str, indices)), names=", ".join(names[i] for i in indices)
            )
    return None
