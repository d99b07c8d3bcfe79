"""grad-accum-no-sync: gradient accumulation that all-reduces on every backward.

Each test is a minimal script that shows a mechanism and, most often, its twin that must behave the other way;
the section comments say which evaluation round (issue 28) a test came from."""

from __future__ import annotations

import textwrap

import pytest
from lintcase import END, names, pair
from lintcase import PG_OPEN as PG
from lintcase import rules_after as rules

# ----------------------------------------------------------------------------------- the first rules (was test_lint.py)


@pytest.mark.parametrize("accumulate", ["modulo", "inner-loop"])
def test_gradient_accumulation_without_no_sync(accumulate):
    setup = (
        PG + "from torch.nn.parallel import DistributedDataParallel as DDP\nmodel = DDP(torch.nn.Linear(1, 1))\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\nx = torch.ones(2, 1)\naccum = 4\n"
    )
    loops = {
        "modulo": (
            """
            for i in range(8):
                {sync}model(x).sum().backward()
                if (i + 1) % accum == 0:
                    opt.step()
            """,
            "model.require_backward_grad_sync = (i + 1) % accum == 0\n                ",
        ),
        "inner-loop": (
            """
            for step in range(2):
                for micro in range(accum):
                    {sync}model(x).sum().backward()
                opt.step()
            """,
            "model.require_backward_grad_sync = micro == accum - 1\n                    ",
        ),
    }
    loop, sync = loops[accumulate]
    bad, good = pair(loop.replace("{sync}", ""), loop.replace("{sync}", sync), setup)
    assert bad == ["grad-accum-no-sync"] and good == []
    if accumulate == "inner-loop":
        with_no_sync = loop.replace(
            "{sync}model(x).sum().backward()", "with model.no_sync():\n" + " " * 24 + "model(x).sum().backward()"
        )
        assert rules(setup, textwrap.dedent(with_no_sync) + END) == []


def test_gradient_accumulation_is_found_by_its_shape_not_its_names():
    setup = (
        PG + "from torch.nn.parallel import DistributedDataParallel as DDP\nmodel = DDP(torch.nn.Linear(1, 1))\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\nx = torch.ones(2, 1)\nk = 4\n"
    )
    bad, good = pair(
        """
        for batch in range(2):
            for j in range(k):
                model(x).sum().backward()
            opt.step()
        """,
        """
        for batch in range(2):
            for j in range(k):
                model(x).sum().backward()
                opt.step()
        """,
        setup,
    )
    assert bad == ["grad-accum-no-sync"] and good == []


# ------------------------------------------------------------------ issue 28, sixth pass (was test_lint_mechanisms6.py)


def test_accumulation_written_as_an_early_skip():
    """`loss.backward(); if i % k != 0: continue; optimizer.step()`: the step every k-th batch, the backward on
    all of them, no no_sync. A `% k` skip before the backward (a logging stride) is no accumulation."""
    src = """
    dist.init_process_group("gloo")
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(2, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for i in range(10):
        loss = model(torch.ones(2)).sum()
        loss.backward()
        if i % 4 != 0:
            continue
        opt.step()
        opt.zero_grad()
    dist.destroy_process_group()
    """
    assert "grad-accum-no-sync" in names(src)
    twin = src.replace("        loss.backward()\n", "").replace(
        "            continue\n", "            continue\n        loss.backward()\n"
    )
    assert "grad-accum-no-sync" not in names(twin)
