"""Issue 42 points 4 and 6: a run lint knew would hang says so before it starts, and its failure's first screen
holds the cause and the fix. (A crash's first screen: tests/userscript/test_launch.py, on its crash run.)"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import cli

from ddplab.ports import free_port

SCRIPTS = Path(__file__).parents[1] / "scripts"
SCREEN = 24  # a terminal's first screen


def own_port() -> list[str]:
    return ["--master-port", str(free_port())]


@pytest.fixture(scope="module")
def hung():
    """eval_epochs_bn.py: rank 0 evaluates through the DDP wrapper of a BatchNorm model each epoch (45 steps an
    epoch, 2 epochs: ~280 collectives, past the 256 each rank keeps). 15 s: at 5 s a
    loaded machine read a slow DDP start-up (imports under DistributedDataParallel.__init__) as a hang."""
    ran = cli("launch", *own_port(), "--hang-timeout", "15", str(SCRIPTS / "eval_epochs_bn.py"), "45", "2", timeout=150)
    assert ran.code == 3, ran.err[-3000:]
    return ran


def screen(ran) -> list[str]:
    """What a terminal shows, in order: the run's stderr and stdout are both the console (lint and notes on
    stderr before the run; the ranks' output and the report after)."""
    return ran.err.splitlines() + ran.out.splitlines()


def test_a_sure_hang_is_said_at_the_start_and_named_at_the_end(hung):
    lines = screen(hung)
    sure = next(i for i, line in enumerate(lines) if line.startswith("ddplab launch: lint is sure this run hangs"))
    assert "eval_epochs_bn.py:29 [rank0-ddp-forward]" in lines[sure]
    assert sure < next(i for i, line in enumerate(lines) if "1 OpenMP thread per rank" in line)  # before the run
    verdict = next(i for i, line in enumerate(lines) if line.startswith("ddplab launch: TIMEOUT"))
    assert lines[verdict + 1].startswith("  likely cause — eval_epochs_bn.py:29: ")
    assert lines[verdict + 2].startswith("      fix: evaluate the plain module on rank 0")
    assert verdict + 2 < SCREEN
    # The first collective where the ranks' records differ: rank 0's evaluation broadcast against rank 1's barrier.
    disagree = next(line for line in lines if "=> ranks disagree at #" in line)
    assert "rank 0 broadcast" in disagree and "rank 1 barrier" in disagree
    # Rank 0's first evaluation broadcast paired with rank 1's next training broadcast (same op and size: DDP skips
    # the broadcast of a forward that follows a no_grad one), so the records agree up to the end; and they no
    # longer hold the first collectives, which the report says.
    kept = next(line for line in lines if line.startswith("  (the records start at #"))
    assert "TORCH_FR_BUFFER_SIZE (ddplab: 256)" in kept


def test_unused_parameters_are_named_not_numbered():
    """Issue 42 point 7: DDP says "Parameter indices which did not receive grad for rank 0: 2 3"; each rank names
    them (its DDP model's parameters, in the reducer's order), and the diagnosis says them."""
    ran = cli("launch", *own_port(), str(SCRIPTS / "unused_head.py"), timeout=150)
    assert ran.code == 1, ran.err[-3000:]
    console = ran.out + ran.err
    for rank in (0, 1):
        assert (
            f"ddplab: parameters that received no gradient on rank {rank} (DDP's indices 2 3): aux_head.weight, "
            "aux_head.bias" in console
        )
    cause = next(line for line in ran.out.splitlines() if line.startswith("   cause: Some parameters took no part"))
    assert cause.endswith("On ranks 0, 1 they are: aux_head.weight, aux_head.bias.")
