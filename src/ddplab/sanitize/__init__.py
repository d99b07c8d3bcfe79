"""The DDP sanitizer: what each rank of a user's script actually did in its first optimizer steps, compared across
ranks after the run (`ddplab launch`, on by default; `--sanitize-steps N`, 0 = off; docs/sanitize.md).

- `rankside`    the rank's side: installed at start-up by ddplab/boot/sitecustomize.py; counts optimizer steps (a
                global optimizer step hook, as --profile's perf/profhook.py) and ends every check's hooks after the
                window; writes DIR/rank<RANK>.json
- one module per check, each with its rank-side `Observer` and its `judge(ranks, world)` that turns the ranks'
  observations into findings:
  `samebatch`   the ranks read the same samples (no DistributedSampler, or one given the same rank everywhere)
  `epochorder`  an epoch repeats the previous one's order (DistributedSampler.set_epoch never called)
  `paramsync`   the parameters differ between ranks after an optimizer step (the gradients were not averaged)
  `sharedwrite` several ranks wrote the same file
  `placement`   GPUs only: two ranks on one GPU, parameters on another rank's GPU, torch.load onto cuda:0 everywhere
  `sameprint`   every rank printed or logged the same line (minor: noise)
- `userframe`   which frame is the user's code (file:line of a finding)
- `readout`     the launcher's side: asks for the window, reads the ranks' files, the findings, their rendering

This file and the rank-side modules import only the standard library at start-up: every rank imports them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

DIR_ENV = "DDPLAB_SANITIZE_DIR"  # the folder each rank writes its observations to (set by `ddplab launch`)
OWNER_ENV = "DDPLAB_SANITIZE_OWNER"  # pid of the rank that installed: a process it starts is no rank until it joins
CONFIG = "config.json"  # written by the caller before the ranks start: {"steps": N}; absent = off
DEFAULT_STEPS = 50  # long enough for a small script's second epoch, short enough that a real run pays nothing after
# the check modules, in the order findings print
CHECKS = ("samebatch", "epochorder", "paramsync", "sharedwrite", "placement", "sameprint")


@dataclass
class Finding:
    """One observation that is a DDP mistake: what was seen (with the numbers), where in the user's code, the fix."""

    check: str  # the check's id, e.g. "same-samples"
    observed: str  # one sentence with the evidence, e.g. "ranks 0 and 1 read the same 50 batches (3200 samples)"
    fix: str
    where: str | None = None  # "train.py:40": the user's line (a loader's or sampler's construction, a write)
    code: str | None = None  # that line's source
    evidence: dict = field(default_factory=dict)  # the numbers behind `observed`: ranks, step, counts, names, paths
    minor: bool = False  # noise, not a wrong result (every rank printing the same line)


def short(where: str | None) -> str:
    """'train.py:40' for a file under the current folder, else its full path; 'an unknown line' for None."""
    import os

    if not where:
        return "an unknown line"
    path, _, line = where.rpartition(":")
    rel = os.path.relpath(path) if path else path
    return f"{path if rel.startswith('..') else rel}:{line}"


def ranks_text(ranks: list[int]) -> str:
    """'0', '0 and 1', '0, 1 and 2'."""
    ranks = sorted(ranks)
    return ", ".join(map(str, ranks[:-1])) + f" and {ranks[-1]}" if len(ranks) > 1 else str(ranks[0])


def by_key(ranks: dict[int, dict], kind: str, key: str) -> dict[str, dict[int, dict]]:
    """The ranks' records of one kind gathered by a key: {value of key: {rank: record}} (a path written, a line of
    code printed at), the reader's first step wherever the ranks are compared record by record."""
    gathered: dict[str, dict[int, dict]] = {}
    for rank, data in sorted(ranks.items()):
        for record in data.get(kind, []):
            gathered.setdefault(record[key], {})[rank] = record
    return gathered
