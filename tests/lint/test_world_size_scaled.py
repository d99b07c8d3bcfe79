"""world-size-scaled-twice: an lr or batch size scaled by the world size and then again.

Each test is a minimal script that shows a mechanism and, most often, its twin that must behave the other way;
the section comments say which evaluation round (issue 28) a test came from."""

from __future__ import annotations

from lintcase import HEAD, line_rules
from lintcase import names_time as names
from lintcase import rules_but_nccl as rules

# --------------------------------------------------------------- issue 28's multi-GPU rules (was test_lint_multigpu.py)


def test_lr_or_batch_scaled_by_the_world_size_twice():
    assert rules("""
        world_size = dist.get_world_size()
        lr = 0.1 * world_size
        from torch.optim import SGD
        opt = SGD([], lr=lr * world_size)
    """) == ["world-size-scaled-twice"]
    assert rules("""
        import argparse
        args = argparse.Namespace(batch_size=256, lr=0.1)
        args.batch_size = args.batch_size // int(os.environ["WORLD_SIZE"])
        per_rank_batch = args.batch_size // dist.get_world_size()
    """) == ["world-size-scaled-twice"]
    assert (
        rules("""
        world_size = dist.get_world_size()
        lr = 0.1 * world_size
        batch = 256 // world_size
        eff_batch = batch * 4
        steps = 1000 // world_size
    """)
        == []
    )


# ---------------------------------------------------------- issue 28, second held-out set (was test_lint_mechanisms.py)


def test_a_world_size_that_already_counts_the_gpus_per_node_scaled_by_them_again():
    source = (
        HEAD
        + """\
        def main(args):
            args.world_size = args.ngpus_per_node * args.world_size
            dist.init_process_group("gloo", world_size=args.world_size)
            args.lr = args.lr * float(args.batch_size * args.ngpus_per_node * args.world_size) / 256.
            dist.destroy_process_group()
    """
    )
    assert line_rules(source) == [(7, "world-size-scaled-twice")]
    once = source.replace(" * args.ngpus_per_node * args.world_size", " * args.world_size")
    assert line_rules(once) == []


# ----------------------------------------------------------------- issue 28, fourth pass (was test_lint_mechanisms4.py)


SCALED_HELPER = """
import argparse

def get_lr(args, world_size):
    return args.lr * world_size

p = argparse.ArgumentParser()
p.add_argument("--lr", type=float, default=0.1)
args = p.parse_args()
dist.init_process_group("gloo")
world_size = dist.get_world_size()
args.lr = args.lr * world_size
lr = get_lr(args, world_size)
dist.destroy_process_group()
"""


def test_lr_scaled_again_inside_a_helper():
    """`args.lr = args.lr * world_size`, then `lr = get_lr(args, world_size)` whose return multiplies args.lr by the
    world size again: scaled twice."""
    assert "world-size-scaled-twice" in names(SCALED_HELPER)


def test_lr_scaled_once_by_the_helper_is_quiet():
    """The helper alone scales it once."""
    once = SCALED_HELPER.replace("args.lr = args.lr * world_size\n", "")
    assert "world-size-scaled-twice" not in names(once, show_all=True)


def test_a_name_is_its_functions_own_and_a_fresh_value_starts_afresh():
    """timm's train.py: `global_batch_size` is scaled once in main() for the lr, and in train_one_epoch() another
    variable of that name is set to the batch size and scaled once, in each branch of an if: no value is scaled
    twice. The same names scaled twice within one function, with nothing new assigned between, still are."""
    source = (
        HEAD
        + """\
        def main(args):
            global_batch_size = args.batch_size * args.world_size
            return global_batch_size

        def train_one_epoch(args, batch_size, flexible):
            if flexible:
                global_batch_size = batch_size
                global_batch_size *= args.world_size
            else:
                global_batch_size = batch_size
                global_batch_size *= args.world_size
            return global_batch_size
    """
    )
    assert line_rules(source) == []
    twice = source.replace(
        "global_batch_size = batch_size\n                global_batch_size *= args.world_size\n            return",
        "global_batch_size = batch_size * args.world_size\n                global_batch_size *= args.world_size\n"
        "            return",
        1,
    )
    assert twice != source and line_rules(twice) == [(14, "world-size-scaled-twice")]
