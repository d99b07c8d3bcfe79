"""The price a --budget counts with: `--price P` (per GPU-hour, USD unless --currency says otherwise), or the offer in
ddplab's price table (perf.cost) that `--gpu NAME [--provider P] [--tier T]` names, with the day it was read."""

from __future__ import annotations

import time
from dataclasses import dataclass

from ddplab.errors import DdplabError
from ddplab.launcher.budget import Budget
from ddplab.perf import cost


@dataclass
class Rate:
    per_gpu_hour: float
    currency: str
    label: str  # where it comes from, for people
    gpus_per_box: int = 1

    def billed(self, gpus: int) -> int:
        return -(-max(gpus, 1) // self.gpus_per_box) * self.gpus_per_box


def rate(args) -> Rate | None:
    """From the parsed --budget/--price/--currency/--gpu/--provider/--tier; None without --budget. Bad input is a
    DdplabError (one line, exit 2)."""
    pricing = [flag for flag, value in (("--price", args.price), ("--gpu", args.gpu)) if value is not None]
    extra = [flag for flag, value in (("--provider", args.provider), ("--tier", args.tier)) if value is not None]
    if args.budget is None:
        if pricing or extra:
            raise DdplabError(f"{(pricing + extra)[0]} prices a --budget: add --budget AMOUNT, e.g. --budget 20")
        return None
    if len(pricing) == 2:
        raise DdplabError("give --price or --gpu, not both: --price is your own rate, --gpu looks one up")
    if not pricing:
        raise DdplabError(
            "--budget needs a price: --price PER_GPU_HOUR (e.g. --price 3.99), or --gpu NAME [--provider P] from "
            "ddplab's price table (`ddplab cost` lists it)"
        )
    if args.price is not None:
        if extra:
            raise DdplabError(f"{extra[0]} goes with --gpu (a table row), not with --price: drop one")
        return Rate(args.price, args.currency, f"{args.price:g} {args.currency}/GPU-hour (--price)")
    offers = cost.shipped()
    gpu = cost.canonical(args.gpu, {o.gpu for o in offers})
    if gpu is None:
        names = ", ".join(sorted({o.gpu for o in offers}))
        raise DdplabError(f"--gpu {args.gpu}: not in ddplab's price table ({names}); or give --price PER_GPU_HOUR")
    found = [
        o
        for o in offers
        if o.gpu == gpu
        and (args.provider is None or o.provider.lower() == args.provider.lower())
        and (args.tier is None or o.tier == args.tier.lower())
    ]
    if len(found) != 1:
        rows = [o for o in offers if o.gpu == gpu]
        choices = "; ".join(f"--provider {o.provider} --tier {o.tier} ({cost.format_price(o)})" for o in rows)
        what = "no offer matches" if not found else "several offers match"
        raise DdplabError(f"--gpu {gpu}: {what}: choose one of {choices}")
    o = found[0]
    return Rate(
        o.price_per_gpu_hour,
        o.currency,
        f"{o.price_per_gpu_hour:g} {o.currency}/GPU-hour ({o.name}, read {o.date_read})",
        o.gpus_per_box,
    )


def budget(args, gpus: int, since: float | None = None) -> Budget | None:
    """The Budget for `gpus` GPUs in use (billed in whole boxes), counted from `since` (time.time(); default now)."""
    r = rate(args)
    if r is None:
        return None
    billed = r.billed(gpus)
    return Budget(
        args.budget,
        r.per_gpu_hour * billed,
        r.currency,
        f"{r.label} x {billed} GPU(s)",
        time.time() if since is None else since,
    )


def since(text: str) -> float:
    """time.time() of --since: 'boot', a duration ago, a date-time or a time of today (local)."""
    import datetime

    import psutil

    from ddplab.observe.idle import parse_duration

    text = text.strip()
    if text.lower() == "boot":
        return psutil.boot_time()
    try:
        return time.time() - parse_duration(text)
    except ValueError:
        pass
    try:
        when = datetime.datetime.fromisoformat(text)
    except ValueError:
        try:
            when = datetime.datetime.combine(datetime.date.today(), datetime.time.fromisoformat(text))
        except ValueError:
            raise DdplabError(
                f"--since {text!r} is not a time: give 'boot', 2026-12-05T09:00, 09:00 (today) or 90m (ago)"
            ) from None
    at = when.timestamp()
    if at > time.time():
        raise DdplabError(f"--since {text!r} is in the future: give when the spending began")
    return at


def gpus_here() -> int:
    """GPUs this machine pays for: NVML's count; a machine without GPUs is priced as one (--price per machine-hour)."""
    from ddplab.observe.monitor import Sampler

    sampler = Sampler()
    try:
        gpus, _ = sampler.nvml.read()
    finally:
        sampler.close()
    return max(len(gpus), 1)
