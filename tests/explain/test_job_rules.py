"""What a job's processes died of, as the launcher, Slurm, DDP and the device runtime report it: a signal, Slurm's
memory cgroup and time limit, srun's task ranges, DDP's model checks, a device ordinal, a double backward through
SyncBatchNorm. Each text is the software's own (made here, or quoted from the public logs cited)."""

from __future__ import annotations

import re
import shutil
import signal
from pathlib import Path

import pytest
from conftest import traceback_of
from explaincase import first_rule, quoted, rules

from ddplab.explain import catalogue
from ddplab.explain.matcher import explain_text


def test_sigterm_stays_worker_terminated_though_its_traceback_shows_the_raise_line():
    # the traceback's source line `raise SignalException(f"Process ...", sigval=sigval)` is in every signal's
    # traceback; it must not make SIGTERM a worker-signal
    from torch.distributed.elastic.multiprocessing import api

    text = traceback_of(lambda: api._terminate_process_handler(signal.SIGTERM, None))
    assert "raise SignalException(" in text, text
    assert first_rule(text) == "worker-terminated", text


def test_sruns_list_of_task_ranges_names_the_signal():
    # srun (launch/slurm _task_finish): "%s: task(s) %s: %s" with the tasks as ranges, "tasks 0-1,3,6: Terminated"
    assert rules("srun: error: nid01934: tasks 2,4-5,7: Terminated")[0] == "worker-terminated"
    assert rules("srun: error: node107: tasks 0-3: Killed")[0] == "worker-killed"
    assert rules("srun: error: Orion-18-69: task 289: Bus error")[0] == "worker-bus-error"


def test_slurms_oom_kill_message_names_the_memory_slurm_granted():
    # slurmstepd's wordings across releases, quoted from real jobs (lanl/PyBNF#118, ArjunaCluster/ArjunaUsers#52,
    # nextflow-io/nextflow#5932) and srun's per-task line
    for text in (
        "slurmstepd: error: Detected 2 oom-kill event(s) in step 3756240.batch cgroup.",
        "slurmstepd: error: Detected 1 oom-kill event(s) in StepId=191.batch cgroup. Some of your processes may "
        "have been killed by the cgroup out-of-memory handler.",
        "slurmstepd: error: Detected 1 oom_kill event in StepId=11300781.0. Some of the step tasks have been OOM "
        "Killed. srun: error: sdumont6156: task 0: Out Of Memory",
        quoted("slurm_oom_kill_brainscore950.log"),
    ):
        assert rules(text)[0] == "slurm-oom-kill", text


def test_slurms_time_limit_is_the_cause_of_the_terminated_tasks():
    # slurmstepd (req.c): "*** %s ON %s CANCELLED AT %s DUE TO TIME LIMIT ***" for the job and each step, and the
    # older "*** JOB %u CANCELLED AT %s DUE TO TIME LIMIT ***"; srun then reports the tasks it saw end
    for text in (
        "slurmstepd: error: *** JOB 494583 ON node12 CANCELLED AT 2024-04-20T09:09:37 DUE TO TIME LIMIT ***",
        "slurmstepd: error: *** STEP 494583.0 ON node12 CANCELLED AT 2024-04-20T09:09:37 DUE TO TIME LIMIT ***",
        "slurmd[node3]: *** JOB 81 CANCELLED AT 2013-05-02T10:11:12 DUE TO TIME LIMIT ***",
        quoted("slurm_time_limit_desitarget628.log"),
        quoted("slurm_time_limit_zetta671.log"),
    ):
        assert rules(text)[0] == "slurm-time-limit", text
    # before the ranks it stopped (a consequence), and never for a step cancelled without that reason (scancel)
    assert rules(quoted("slurm_time_limit_desitarget628.log"))[:2] == ["slurm-time-limit", "worker-terminated"]
    assert "slurm-time-limit" not in rules(
        "slurmstepd: error: *** STEP 6053.0 ON n20 CANCELLED AT 2024-04-23T12:18:08 ***"
    )


@pytest.mark.parametrize("what", ["sizes", "strides"])
def test_ddp_param_check_across_processes_is_a_model_mismatch(what):
    # reducer.cpp verify_params_across_processes (catalogue: torch-native), with its fields filled as torch does
    templates = [
        t["text"]
        for t in catalogue.load("torch-native")["templates"]
        if t["text"] == f"appears not to match {what} of the same param in process 0."
    ]
    assert templates
    text = f"RuntimeError: params[182] in this process with sizes [256, 256, 1, 1] {templates[0]}"
    assert first_rule(text) == "ddp-model-mismatch"


# slurmstepd's reasons for ending a job, each in its own line: "*** %s ON %s CANCELLED AT %s DUE TO <REASON> ***"
CANCEL_REASONS = {
    "TIME LIMIT": "slurm-time-limit",
    "PREEMPTION": "slurm-preempted",
    "JOB REQUEUE": "slurm-preempted",
    "NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS": "slurm-node-failure",
    "": "slurm-cancelled",  # no reason: scancel
}
SLURMSTEPD = Path(shutil.which("slurmstepd") or "/usr/sbin/slurmstepd")


def test_every_reason_slurmstepd_gives_for_a_cancel_is_named():
    """The templates as the installed slurmstepd holds them (Debian's slurm-wlm; CI installs it), filled in as
    slurmstepd fills them: a reason a newer Slurm adds fails here rather than reading as another reason."""
    if not SLURMSTEPD.is_file():
        pytest.skip(f"no slurmstepd here to read its texts from ({SLURMSTEPD}; Debian: apt-get install slurm-wlm)")
    found = set(re.findall(rb"\*\*\* %s ON %s CANCELLED AT %s(?: DUE TO ([^*]+?))? \*\*\*", SLURMSTEPD.read_bytes()))
    reasons = {r.decode() for r in found}
    assert {"TIME LIMIT", "PREEMPTION", ""} <= reasons, reasons
    for reason in reasons:
        assert reason in CANCEL_REASONS, f"slurmstepd cancels {reason!r}: name it in explain's rules"
        due = f" DUE TO {reason}" if reason else ""
        for what in ("JOB 494583", "STEP 494583.0"):
            line = f"slurmstepd: error: *** {what} ON node12 CANCELLED AT 2026-12-06T09:09:37{due} ***"
            assert rules(line + "\nsrun: error: node12: tasks 0-3: Terminated") == [
                CANCEL_REASONS[reason],
                "worker-terminated",
            ], line


def test_a_second_derivative_through_syncbatchnorm_is_named():
    # pytorch/pytorch#61222 (torch 1.8 wording) and today's autograd wording for the same kernel
    assert rules(quoted("syncbn_double_backward_pytorch61222.log"))[0] == "syncbn-double-backward"
    now = "RuntimeError: the derivative for 'batch_norm_backward_elemt' is not implemented."
    assert rules(now)[0] == "syncbn-double-backward"


def test_an_invalid_ordinal_names_the_global_rank_used_as_the_device():
    # MzeroMiko/VMamba#115: set_device(rank) on two machines of 5 GPUs; fixed with rank % device_count()
    m = explain_text(quoted("invalid_ordinal_vmamba115.log")).matches[0]
    assert m.rule == "invalid-device-ordinal"
    assert "global RANK" in m.cause and "LOCAL_RANK" in m.fix
