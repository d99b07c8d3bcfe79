"""torch's FSDPMemTracker, with two corrections that make a fake-tensor trace of an FSDP2 step match the real step.

Both were found by setting the tracker's count beside the CPU allocator's own events (the profiler) on one step of
one Linear layer under fully_shard (docs/memory.md, "Where it missed, and how that was found"):

1. DTensor's sharding propagation was counted as memory. DTensor works out each op's output shape by running the
   op on fake tensors in the fake mode that is active (torch.distributed.tensor._sharding_prop:
   `detect_fake_mode() or FakeTensorMode()`). In a real step that is a mode of its own, which the tracker skips;
   in a fake trace it is the trace's own mode, so the propagation's fake inputs and output were counted as
   allocations: one to three parameter-sized tensors at each DTensor op of the optimizer step that were never
   allocated. Here ops run while DTensor propagates metadata are not tracked.
2. The last unsharded gradient of each FSDP group was kept alive. torch's post-backward wrapper reads
   `fsdp_param._unsharded_param.grad` into a local variable, which lives until FSDP's post-backward (copy into the
   reduce-scatter buffer, reduce-scatter) returns: one more gradient than an untracked step holds. Here the wrapper
   holds no tensor.
"""

from __future__ import annotations

import contextlib
import threading
from functools import wraps

from torch.distributed._tools import fsdp2_mem_tracker as torch_tracker

# The second correction rewrites a private method of torch's tracker; on a torch whose tracker is built otherwise,
# torch's own method stays (its count may then be high by one gradient: on the safe side).
_REWRITABLE = hasattr(torch_tracker.FSDPMemTracker, "_fsdp_param_group_post_backward") and all(
    hasattr(torch_tracker, n) for n in ("_FSDPModState", "_FSDPRefType", "_FSDPState")
)

_propagating = threading.local()  # >0 while DTensor runs an op on fake tensors only to learn its output's shape


@contextlib.contextmanager
def metadata_ops_untracked():
    """While active, ops DTensor runs for sharding propagation are invisible to ExactFSDPMemTracker (which enters
    this itself)."""
    try:
        from torch.distributed.tensor._sharding_prop import ShardingPropagator
    except ImportError:  # no DTensor: nothing to propagate
        yield
        return
    name = next(
        (n for n in ("_propagate_tensor_meta_non_cached", "_propagate_tensor_meta") if hasattr(ShardingPropagator, n)),
        None,
    )
    if name is None:
        yield
        return
    original = getattr(ShardingPropagator, name)

    @wraps(original)
    def propagate(*args, **kwargs):
        _propagating.depth = getattr(_propagating, "depth", 0) + 1
        try:
            return original(*args, **kwargs)
        finally:
            _propagating.depth -= 1

    setattr(ShardingPropagator, name, propagate)
    try:
        yield
    finally:
        setattr(ShardingPropagator, name, original)


class ExactFSDPMemTracker(torch_tracker.FSDPMemTracker):
    def __enter__(self):
        self._untracked = contextlib.ExitStack()
        self._untracked.enter_context(metadata_ops_untracked())
        return super().__enter__()

    def __exit__(self, *args):
        try:
            super().__exit__(*args)
        finally:
            self._untracked.close()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if getattr(_propagating, "depth", 0):
            return func(*args, **(kwargs or {}))
        return super().__torch_dispatch__(func, types, args, kwargs)

    if _REWRITABLE:

        def _fsdp_param_group_post_backward(self, fsdp_mod, orig_fsdp_param_group_post_backward):
            # torch's version, less its local reference to the last unsharded gradient (the snapshots it takes
            # are kept, so the per-module statistics stay as torch's).
            ref, state, when = torch_tracker._FSDPRefType, torch_tracker._FSDPState, torch_tracker._FSDPModState

            @wraps(orig_fsdp_param_group_post_backward)
            def inner(*args, **kwargs):
                group = fsdp_mod._get_fsdp_state()._fsdp_param_group
                for fsdp_param in group.fsdp_params if group else ():
                    if fsdp_param._unsharded_param.grad is not None:
                        self._update_and_maybe_create_winfos(
                            fsdp_param._unsharded_param.grad, ref.UNSHARDED_GRAD, update_existing=True
                        )
                snapshots = self.memory_tracking[fsdp_mod].snapshots
                snapshots.setdefault(when.BEF_POST_BW, []).append(self.get_tracker_snapshot())
                self._fsdp_state = state.POST_BW
                orig_fsdp_param_group_post_backward(*args, **kwargs)
                for fsdp_param in group.fsdp_params if group else ():
                    if fsdp_param.sharded_param.grad is not None:
                        self._update_and_maybe_create_winfos(fsdp_param.sharded_param.grad, ref.SHARDED_GRAD)
                snapshots.setdefault(when.AFT_POST_BW, []).append(self.get_tracker_snapshot())

            return inner
