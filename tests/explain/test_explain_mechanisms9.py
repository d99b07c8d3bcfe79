"""Mechanisms found on real failure text of the ninth pass (the logs are in tests/logs/, cited there).

Each test names the invariant text it relies on and which program prints it.
"""

from __future__ import annotations

import re
from pathlib import Path

from ddplab.explain.matcher import explain_text


def rules(text: str) -> list[str]:
    return [m.rule for m in explain_text(text).matches]


def quoted(name: str) -> str:
    """The text a tests/logs/ log quotes, without its `# key: value` header."""
    lines = Path(__file__).parents[1].joinpath("logs", name).read_text().splitlines()
    while lines and re.match(r"# \w+: ", lines[0]):
        lines.pop(0)
    return "\n".join(lines)


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
