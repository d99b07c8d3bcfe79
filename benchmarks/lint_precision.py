"""Precision and recall of `ddplab lint` on public DDP training scripts, against a reviewer's reading of each.

    python benchmarks/lint_precision.py [CORPUS_DIR]     (default /tmp/lintcorpus)

The scripts themselves are public code and are not in this repository: fetch each one from the source listed in
SCRIPTS (repository, path, commit) and save it in CORPUS_DIR under the name given (any sub-folder will do).
docs/lint.md says how the truth below was decided and records the figures.

Truth per script: the (line, rule) pairs a careful reviewer flags, for the rules lint has; for unguarded-print,
the set of print lines that run once per process without saying which process (one finding names them all).
Judging: a finding is right when its (line, rule) is in the truth; an unguarded-print finding is right when every
line it names is a true one. A truth item is found when a finding has it; the print item is found when the
finding names at least one true print line.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from ddplab.lint import lint_file  # noqa: E402
from lint_heldout_score import statement_starts  # noqa: E402


@dataclass
class Script:
    name: str
    source: str  # repository path @ commit
    group: str  # tuning | held-out-N: when the script was first linted (see docs/lint.md)
    expected: set[tuple[int, str]]
    prints: set[int] = field(default_factory=set)
    # mistakes of the rules issue 28 added (local-rank-argparse, no-set-device, global-rank-device-ids,
    # shared-path-write, ...): the truth above was written for the older rules, so these were judged by reading each
    # line after the new rules first ran on the corpus (docs/lint.md lists them); they count like `expected`
    new: set[tuple[int, str]] = field(default_factory=set)


PE = "pytorch/examples"
SCRIPTS = [
    Script("multigpu_torchrun.py", f"{PE} distributed/ddp-tutorial-series/multigpu_torchrun.py @ 22e5a036", "tuning",
           {(13, "nccl-hardcoded"), (37, "load-no-map-location"), (61, "local-rank-save"),
            (65, "sampler-no-set-epoch")}, {31, 40}),
    Script("multigpu.py", f"{PE} distributed/ddp-tutorial-series/multigpu.py @ 1e81da30", "tuning",
           {(24, "nccl-hardcoded")}),
    Script("multinode.py", f"{PE} distributed/ddp-tutorial-series/multinode.py @ 17f4f9a5", "tuning",
           set(), {25, 49, 59}),
    Script("ddp_example.py", f"{PE} distributed/ddp/example.py @ 08f4d851", "tuning", {(65, "nccl-hardcoded")}),
    Script("ddp_main.py", f"{PE} distributed/ddp/main.py @ 2b456e80", "tuning", set()),
    Script("mingpt_trainer.py", f"{PE} distributed/minGPT-ddp/mingpt/trainer.py @ 1b36393d", "tuning",
           {(137, "local-rank-save")}, {85, 92}),
    Script("mingpt_main.py", f"{PE} distributed/minGPT-ddp/mingpt/main.py @ 3635e8ec", "tuning",
           {(28, "unseeded-random-split")}, {55}),
    Script("nanogpt_train.py", "karpathy/nanoGPT train.py @ e2221318", "tuning",
           set(), {102, 144, 151, 154, 159, 182, 206}),
    Script("yangkky_mnist_distributed.py", "yangkky/distributed_tutorial src/mnist-distributed.py @ 36a7a09b",
           "tuning", {(56, "nccl-hardcoded"), (56, "no-destroy"), (84, "sampler-no-set-epoch")},
           new={(68, "shared-path-write")}),
    Script("tczhangzhi_distributed.py", "tczhangzhi/pytorch-distributed distributed.py @ 0c40e432", "tuning",
           {(97, "nccl-hardcoded"), (97, "no-destroy"), (283, "local-rank-save")}, {100, 103, 277, 321}),
    Script("lambdalabs_train_llm.py", "LambdaLabsML/distributed-training-guide 02-multi-gpu/train_llm.py @ 03f74de0",
           "held-out-1", {(45, "no-destroy"), (142, "sampler-no-set-epoch")},
           new={(70, "global-rank-device-ids")}),
    Script("jiazhuang_ddp_train.py", "jia-zhuang/pytorch-multi-gpu-training ddp_train.py @ 567d8241", "held-out-1",
           {(19, "nccl-hardcoded"), (19, "no-destroy")},
           new={(14, "local-rank-argparse")}),
    Script("rentainhe_distributed_gradient_accumulation.py",
           "rentainhe/pytorch-distributed-training distributed_gradient_accumulation.py @ 7859d617", "held-out-1",
           # the lines of commit 7859d617 (the truth was first written for a copy with a shorter docstring, 4 lines up)
           {(49, "nccl-hardcoded"), (49, "no-destroy"), (90, "grad-accum-no-sync")}),
    Script("hongxin_ddp_launch.py", "HongxinXiang/pytorch-multi-GPU-training-tutorial "
           "single-machine-and-multi-GPU-DistributedDataParallel-launch.py @ 595c750f", "held-out-1",
           {(38, "nccl-hardcoded"), (38, "no-destroy"), (131, "save-ddp-state-dict")},
           new={(95, "shared-path-write"), (96, "shared-path-write"),
                # test(): loss and correct summed over the test loader's DistributedSampler shard, accuracy divided by
                # the whole dataset's size, shown by print_only_rank0 (rank 0 only): 1/N of the accuracy
                (82, "unreduced-metric")}),
    Script("jayroxis_demo.py", "jayroxis/pytorch-DDP-tutorial demo.py @ 16d99b4f", "held-out-2", set()),
    Script("kaiizhang_mnist_env.py", "KaiiZhang/DDP-Tutorial codes/mnist-env.py @ 4d93af5e", "held-out-2",
           {(86, "nccl-hardcoded")},
           new={(86, "no-set-device"), (101, "shared-path-write"), (116, "shared-path-write")}),
    Script("rensortino_cifar_example_ddp.py", "rensortino/DDP-Tutorial cifar_example_ddp.py @ 1c78658d",
           "held-out-2", {(59, "sets-master-env"), (60, "sets-master-env"), (61, "nccl-hardcoded"),
                          (61, "no-destroy"), (121, "save-ddp-state-dict"), (121, "unguarded-save")},
           {114, 118, 137}, new={(71, "shared-path-write"), (77, "shared-path-write")}),
    Script("lambdalabs_grad_accum_train_llm.py",
           "LambdaLabsML/distributed-training-guide 98-gradient-accumulation/train_llm.py @ 03f74de0", "held-out-3",
           {(46, "no-destroy"), (148, "sampler-no-set-epoch")}),
    Script("hongxin_ddp_mp.py", "HongxinXiang/pytorch-multi-GPU-training-tutorial "
           "single-machine-and-multi-GPU-DistributedDataParallel-mp.py @ 655ec2c9", "held-out-3",
           {(22, "nccl-hardcoded"), (22, "no-destroy"), (133, "save-ddp-state-dict")},
           new={(97, "shared-path-write"), (98, "shared-path-write"),
                # test(): loss and correct summed over the test loader's DistributedSampler shard, accuracy divided by
                # the whole dataset's size, shown by print_only_rank0 (rank 0 only): 1/N of the accuracy (as launch)
                (66, "unreduced-metric")}),
    Script("ddiyoung_train.py", "ddiyoung-x4/pytorch-DDP-tutorial train.py @ dd331734", "held-out-3",
           {(131, "loader-without-sampler"), (168, "loader-without-sampler"), (223, "save-ddp-state-dict"),
            (374, "nccl-hardcoded"), (374, "no-destroy"), (410, "unguarded-save")},
           new={(132, "shared-path-write"), (187, "global-rank-device-ids"), (335, "global-rank-device-ids"),
                (336, "global-rank-device-ids"), (380, "global-rank-device-ids"),
                # rank 0 (print filter: local_rank == 0) prints the epoch's loss/top-1 from its own AverageMeters,
                # over its DistributedSampler shard on the first dataset branch: counted as distribuuuu_slurm in
                # lint_heldout and swav in lint_heldout3 (a rank-0 print of its own running train loss)
                (298, "unreduced-metric")}),
    Script("rentainhe_distributed.py", "rentainhe/pytorch-distributed-training distributed.py @ 007b7581",
           "held-out-4", {(42, "nccl-hardcoded"), (42, "no-destroy")}),
    Script("hongxin_ddp_slurm.py", "HongxinXiang/pytorch-multi-GPU-training-tutorial "
           "single-machine-and-multi-GPU-DistributedDataParallel-slurm.py @ 860b1eb3", "held-out-4",
           {(46, "nccl-hardcoded"), (46, "no-destroy"), (139, "save-ddp-state-dict")},
           new={(103, "shared-path-write"), (104, "shared-path-write"),
                # test() as in launch: a shard's sums shown by print_only_rank0 as the whole test set's accuracy
                (90, "unreduced-metric")}),
]


def judge(script: Script, path: Path) -> tuple[int, int, int, int, list[str]]:
    """(findings, right, expected, found, notes on each wrong or missed item)."""
    findings = lint_file(path).findings
    # lines compared by statement, as lint_heldout_score.py does: lint names a statement's first line, the truth
    # was written at whichever line of it the reviewer pointed to
    starts = statement_starts(path)
    script = Script(script.name, script.source, script.group,
                    {(starts.get(n, n), r) for n, r in script.expected}, {starts.get(n, n) for n in script.prints},
                    {(starts.get(n, n), r) for n, r in script.new})
    notes, right = [], 0
    for f in findings:
        ok = ({f.line, *f.also} <= script.prints) if f.rule == "unguarded-print" else \
            (f.line, f.rule) in script.expected | script.new
        right += ok
        if not ok:
            notes.append(f"false alarm {f.line} {f.rule}")
    truth = script.expected | script.new
    got = {(f.line, f.rule) for f in findings}
    printed = {line for f in findings if f.rule == "unguarded-print" for line in (f.line, *f.also)}
    missed = [f"missed {line} {rule}" for line, rule in sorted(truth - got)]
    if script.prints and not printed & script.prints:
        missed.append(f"missed unguarded-print {sorted(script.prints)}")
    expected = len(truth) + bool(script.prints)
    return len(findings), right, expected, expected - len(missed), notes + missed


def main() -> int:
    corpus = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/lintcorpus")
    files = {p.name: p for p in corpus.rglob("*.py")}
    missing = [s.name for s in SCRIPTS if s.name not in files]
    if missing:
        print(f"{corpus}: missing {', '.join(missing)}: fetch them from the sources in SCRIPTS", file=sys.stderr)
        return 2
    totals: dict[str, list[int]] = {}
    print(f"{'script':48} {'group':10} {'findings':>8} {'right':>5} {'expected':>8} {'found':>5}  notes")
    for script in SCRIPTS:
        n, right, expected, found, notes = judge(script, files[script.name])
        print(f"{script.name:48} {script.group:10} {n:8} {right:5} {expected:8} {found:5}  {'; '.join(notes)}")
        for group in (script.group, "all"):
            t = totals.setdefault(group, [0, 0, 0, 0])
            for i, v in enumerate((n, right, expected, found)):
                t[i] += v
    for group, (n, right, expected, found) in totals.items():
        print(f"{group:10} precision {right}/{n} = {right / max(n, 1):.1%}   recall {found}/{expected} = "
              f"{found / max(expected, 1):.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
