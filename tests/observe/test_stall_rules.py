"""observe.stall's rules on GPU ranks, where CPU time proves nothing (a host spins in a CUDA sync while its GPU
waits in NCCL): step marks decide, and without them the GPUs' utilisation alone, said as such. In-process: the
ranks are this test's own process (alive, its CPU time busy or not, which must not count on a GPU rank)."""

from __future__ import annotations

import os

from ddplab.observe.monitor import JobView, RankView, _Job, _Member
from ddplab.observe.stall import StallWatch


def _job(last_mark, phase="step.7"):
    member = _Member(os.getpid(), 0, 0, 1, progress=3, phase=phase, last_mark=last_mark)
    return _Job("ddplab:run", "ddplab runner", None, [member])


def _view(util):
    rank = RankView(os.getpid(), 0, 0, "running", gpu=0, gpu_from="nvml", gpu_util_percent=util)
    return JobView("ddplab:run", "ddplab runner", None, 1, [rank])


def test_on_a_gpu_a_new_step_mark_is_progress_and_none_is_a_stall_whatever_the_gpu_reads():
    watch = StallWatch()
    assert watch.look(_job(100.0), _view(100.0), now=101.0).moving  # first sight
    look = watch.look(_job(102.0, "step.8"), _view(100.0), now=103.0)
    assert look.moving and look.how == "step mark step.8" and look.since == 102.0
    stuck = watch.look(_job(102.0, "step.8"), _view(100.0), now=200.0)
    assert not stuck.moving and stuck.since == 102.0 and stuck.gpus == {0}
    assert stuck.how == "no new step mark, GPU 100 % (a rank waiting in NCCL keeps its GPU busy too)"
    assert stuck.last == "step marks rank 0 step.8"


def test_a_gpu_job_without_marks_is_judged_by_utilisation_alone_and_says_so():
    watch = StallWatch()
    watch.look(_job(None), _view(97.0), now=1.0)
    busy = watch.look(_job(None), _view(97.0), now=2.0)
    assert busy.moving and busy.cannot_tell and busy.how == "GPU 97 % busy"
    quiet = watch.look(_job(None), _view(0.0), now=3.0)
    assert not quiet.moving and "utilisation alone: cannot tell" in quiet.how
