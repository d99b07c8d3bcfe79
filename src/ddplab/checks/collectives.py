"""collectives: every collective DDP and its relatives use, with inputs whose exact result is known.

Like nccl-tests' verifiable inputs, every value is a small integer, so float32 sums, products and averages are exact
and a single wrong element is a real error, not rounding. Wrong elements are counted per op and rank.
An op this backend lacks is SKIP with the backend's own words, never FAIL.
Each op passes what its rank contributes through `feed` (ddplab.faults), so that DDPLAB_FAULT=corrupt:RANK:PHASE
can make a rank send wrong data for real and prove that the others count it.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from ddplab import faults
from ddplab.checks import Skip, unsupported
from ddplab.launcher.progress import mark

# Odd on purpose: an element count that no world size divides catches padding and chunking mistakes.
COUNT = 1031
PATTERN = 7  # values cycle through 1..PATTERN: sums over 1000+ ranks stay far below float32's exact 2**24


def _pattern(count: int, device) -> torch.Tensor:
    return (torch.arange(count, device=device) % PATTERN + 1).float()


def _wrong(got: torch.Tensor, want, exact: bool = True) -> int:
    if exact:
        return int((got != want).sum().item())
    return int((~torch.isclose(got, torch.as_tensor(want, device=got.device).expand_as(got), rtol=1e-6)).sum().item())


def _all_reduce(op_name: str):
    def run(rank: int, n: int, dev, feed) -> int:
        base = _pattern(COUNT, dev)
        op = getattr(dist.ReduceOp, op_name.upper())
        if op_name == "sum":
            x, want = base * (rank + 1), base * (n * (n + 1) // 2)
        elif op_name == "avg":  # NCCL averages by pre-multiplying with 1/n: exact only up to rounding
            x, want = base * (rank + 1), base * ((n + 1) / 2)
        elif op_name == "max":
            x, want = base + rank, base + (n - 1)
        elif op_name == "min":
            x, want = base + rank, base
        else:  # product of 1s and 2s: a power of two, exact in float32 for any world size
            i = torch.arange(COUNT, device=dev)
            x = ((i + rank) % 2 + 1).float()
            want = torch.stack([((i + r) % 2 + 1).float() for r in range(n)]).prod(0)
        dist.all_reduce(feed(x), op=op)
        return _wrong(x, want, exact=op_name != "avg")

    return run


def _broadcast(rank: int, n: int, dev, feed) -> int:
    wrong = 0
    for root in range(n):  # from every root: a rank that can send but not receive shows up here
        want = _pattern(COUNT, dev) + 100 * root
        x = feed(want.clone()) if rank == root else torch.zeros(COUNT, device=dev)
        dist.broadcast(x, src=root)
        wrong += _wrong(x, want)
    return wrong


def _all_gather(rank: int, n: int, dev, feed) -> int:
    parts = [torch.zeros(COUNT, device=dev) for _ in range(n)]
    dist.all_gather(parts, feed(_pattern(COUNT, dev) + rank))
    return sum(_wrong(p, _pattern(COUNT, dev) + r) for r, p in enumerate(parts))


def _reduce_scatter(rank: int, n: int, dev, feed) -> int:
    chunk = COUNT // n + 1
    inputs = [_pattern(chunk, dev) * (rank + 1) + r for r in range(n)]  # chunk r goes to rank r
    feed(inputs[0])
    out = torch.zeros(chunk, device=dev)
    dist.reduce_scatter(out, inputs)
    return _wrong(out, _pattern(chunk, dev) * (n * (n + 1) // 2) + n * rank)


def _all_to_all(rank: int, n: int, dev, feed) -> int:
    chunk = COUNT // n + 1
    inputs = [_pattern(chunk, dev) + 10 * rank + dst for dst in range(n)]  # what rank sends to dst
    feed(inputs[0])
    outputs = [torch.zeros(chunk, device=dev) for _ in range(n)]
    dist.all_to_all(outputs, inputs)
    return sum(_wrong(outputs[src], _pattern(chunk, dev) + 10 * src + rank) for src in range(n))


def _send_recv_ring(rank: int, n: int, dev, feed) -> int:
    if n < 2:
        raise Skip("send/recv needs at least 2 ranks")
    right, left = (rank + 1) % n, (rank - 1) % n
    out = torch.zeros(COUNT, device=dev)
    # One batch, not an isend then an irecv: NCCL needs a rank's concurrent send and receive grouped
    # (ncclGroupStart/End), or with 2 ranks both block in their send (NVIDIA/nccl#479), and with more each pair's
    # lazily created 2-rank communicator waits on the next rank in a cycle. batch_isend_irecv groups them on NCCL,
    # and on gloo it is the same isend/irecv pair.
    ops = [dist.P2POp(dist.isend, feed(_pattern(COUNT, dev) + rank), right), dist.P2POp(dist.irecv, out, left)]
    for req in dist.batch_isend_irecv(ops):
        req.wait()
    return _wrong(out, _pattern(COUNT, dev) + left)


def _barrier(rank: int, n: int, dev, feed) -> int:
    dist.barrier()
    return 0


OPS = {
    **{f"all_reduce.{op}": _all_reduce(op) for op in ("sum", "avg", "max", "min", "product")},
    "broadcast": _broadcast,
    "all_gather": _all_gather,
    "reduce_scatter": _reduce_scatter,
    "all_to_all": _all_to_all,
    "send_recv_ring": _send_recv_ring,
    "barrier": _barrier,
}


def on_rank(ctx, opts: dict) -> dict:
    ops = {}
    for name, op in OPS.items():
        phase = f"collectives.{name}"
        mark(phase)
        try:
            ops[name] = {"wrong": op(ctx.rank, ctx.world_size, ctx.device, faults.feed(phase))}
        except Exception as e:
            if not unsupported(e):
                raise
            ops[name] = {"skipped": str(e).splitlines()[0][:200]}
    return {"rank": ctx.rank, "ops": ops, "count": COUNT}
