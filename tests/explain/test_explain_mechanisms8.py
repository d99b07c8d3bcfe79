"""Mechanisms found on real failure text of the eighth and ninth passes (the logs are in tests/logs/, cited there).

Each test names the invariant text it relies on and the program that prints it (NCCL, the OS, Slurm).
"""

from __future__ import annotations

import re
from pathlib import Path

from ddplab.explain.matcher import explain_text
from ddplab.explain.rules import RULES


def rules(text: str) -> list[str]:
    return [m.rule for m in explain_text(text).matches]


def quoted(name: str) -> str:
    """The text a tests/logs/ log quotes, without its `# key: value` header."""
    lines = Path(__file__).parents[1].joinpath("logs", name).read_text().splitlines()
    while lines and re.match(r"# \w+: ", lines[0]):
        lines.pop(0)
    return "\n".join(lines)


# ------------------------------------------------------------------ the OS's words are no layer's own words

# hiyouga/EasyR1#505: NCCL's misc/shmutils.cc prints open()'s strerror; the family of NCCL's plugins claimed it
# because one plugin template (plugin/rma.cc) is the bare text "No such file or directory"
EASYR1_505 = (
    "(WorkerDict pid=30332) [2025-09-18 23:23:41] is-dbtgkffan5rbutzq-devmachine-0:30332:30423 [0] "
    "misc/shmutils.cc:93 NCCL WARN Call to open failed: No such file or directory\n"
    "(WorkerDict pid=30332)\n"
    "(WorkerDict pid=30332) [2025-09-18 23:23:41] is-dbtgkffan5rbutzq-devmachine-0:30332:30423 [0] "
    "misc/shmutils.cc:129 NCCL WARN Error while attaching to shared memory segment /dev/shm/nccl-Ќ (size 0), "
    "error: No such file or directory (2)\n"
)


def test_a_strerror_text_alone_names_no_nccl_layer():
    # strerror(ENOENT) follows any failed open(): a shared-memory, a socket or a config file's
    assert "nccl-plugin" not in rules(EASYR1_505.splitlines()[0])
    families = [r for r in RULES if r.covers and not all(c.startswith("os:") for c in r.covers)]
    for family in families:
        for pattern in family.patterns:
            assert not re.fullmatch(pattern, "No such file or directory"), family.id


def test_attaching_to_a_peers_segment_is_not_a_full_dev_shm():
    # NCCL misc/shmutils.cc: "Error while attaching to shared memory segment %s (size %zu), error: %s (%d)" - the
    # peer created it; opening it allocates nothing
    for text in (EASYR1_505, quoted("nccl_shm_attach_nccl2059.log")):
        found = rules(text)
        assert found[0] == "nccl-shm-attach", found
        assert "shm-too-small" not in found and "nccl-plugin" not in found, found
    # creating one still is the size of /dev/shm
    creating = "misc/shmutils.cc:132 NCCL WARN Error while creating shared memory segment /dev/shm/nccl-WU88OE (size 9637888), error: No space left on device (28)"
    assert rules(creating)[0] == "shm-too-small"


# ------------------------------------------------------------------ a DataLoader worker's exit, its pid cut out


def test_a_dataloader_worker_exit_is_known_by_its_invariant_sentence():
    # pytorch/pytorch#58847 (DDP, mp.spawn): the paste drops "(pid N)"; libtorch_python.so's worker-status check
    # ends "Details are lost due to multiprocessing. Rerunning with num_workers=0 may give better error trace"
    text = (
        "RuntimeError: DataLoader worker exited unexpectedly with exit code 1. \n"
        "Details are lost due to multiprocessing. Rerunning with num_workers=0 may give better error trace"
    )
    assert rules(text)[0] == "dataloader-worker-died"


# ------------------------------------------------------------------ Slurm's memory cgroup


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


# ------------------------------------------------------------------ a keyword setting as the unsupported subject


def test_an_unsupported_keyword_setting_is_named_whole():
    # princeton-nlp/LLM-Shearing#23: FSDP's _state_dict_utils raises it for a NO_SHARD (one GPU) full state_dict
    # offloaded to CPU; the subject was cut at "=" ("True and NO_SHARD")
    match = explain_text("NotImplementedError: offload_to_cpu=True and NO_SHARD is not supported yet").matches[0]
    assert match.title.startswith("offload_to_cpu=True and NO_SHARD "), match.title


# ------------------------------------------------------------------ c10::Error's "Exception raised from" line


def test_the_cpp_location_under_a_known_message_is_that_message_not_a_second_error():
    # huggingface/transformers#7160: reducer.cpp's error, then c10::Error's own "Exception raised from FN at FILE"
    # line naming torch/csrc/distributed/c10d/: one error, not a second "c10d call failed in C++"
    text = (
        "RuntimeError: Expected to mark a variable ready only once. This error is caused by one of the following "
        "reasons: 1) Use of a module parameter outside the `forward` function. Please make sure model parameters "
        "are not shared across multiple concurrent forward-backward passes2) Reused parameters in multiple "
        "reentrant backward passes. For example, if you use multiple `checkpoint` functions to wrap the same part "
        "of your model, it would result in the same set of parameters been used by different reentrant backward "
        "passes multiple times, and hence marking a variable ready multiple times. DDP does not support such use "
        "cases yet.\n"
        "Exception raised from mark_variable_ready at /opt/conda/conda-bld/pytorch_1595629403081/work/torch/csrc/"
        "distributed/c10d/reducer.cpp:453 (most recent call first):\n"
    )
    assert rules(text) == ["ddp-ready-twice"]


# ------------------------------------------------------------------ SyncBatchNorm under a second derivative


def test_a_second_derivative_through_syncbatchnorm_is_named():
    # pytorch/pytorch#61222 (torch 1.8 wording) and today's autograd wording for the same kernel
    assert rules(quoted("syncbn_double_backward_pytorch61222.log"))[0] == "syncbn-double-backward"
    now = "RuntimeError: the derivative for 'batch_norm_backward_elemt' is not implemented."
    assert rules(now)[0] == "syncbn-double-backward"


# ------------------------------------------------------------------ Slurm's time limit


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


def test_sruns_list_of_task_ranges_names_the_signal():
    # srun (launch/slurm _task_finish): "%s: task(s) %s: %s" with the tasks as ranges, "tasks 0-1,3,6: Terminated"
    assert rules("srun: error: nid01934: tasks 2,4-5,7: Terminated")[0] == "worker-terminated"
    assert rules("srun: error: node107: tasks 0-3: Killed")[0] == "worker-killed"
    assert rules("srun: error: Orion-18-69: task 289: Bus error")[0] == "worker-bus-error"
