"""`ddplab memory RECIPE [recipe flags]`: the memory one rank needs for a training step, per strategy, and what fits.

    ddplab memory gpt --size medium --batch-size 8 --nproc 2            # GPT-2 medium: ddp, zero1 or fsdp?
    ddplab memory mlp --hidden 4096 --layers 8 --strategy ddp,fsdp --nproc 4 --gpus RTX4090,A100
    ddplab memory gpt --size small --json > small.json && ddplab cost --memory small.json ...

The step is traced on fake tensors (nothing is computed or allocated): see ddplab.perf.memory_trace for what is traced
and what is computed. docs/memory.md has the prediction against the allocator's measured peak.
"""

from __future__ import annotations

import argparse
import time

from rich.table import Table
from rich.text import Text

from ddplab import recipes, report
from ddplab.errors import DdplabError

OWN = (
    "strategy",
    "json",
    "device",
    "checkpoint_dir",
    "checkpoint_every",
    "keep",
    "resume",
    "max_steps",
    "log_every",
    "epochs",
    "compile",
    "comm_hook",
)  # train-only flags, or ones this command defines itself


def add_parser(sub) -> None:
    p = sub.add_parser(
        "memory",
        help="how much memory one rank needs (ddp, zero1, fsdp) and which GPU it fits",
        description="Predict one rank's peak memory for a training step of RECIPE, per strategy, "
        "by tracing the step on fake tensors. `ddplab memory RECIPE --help` lists the "
        "recipe's flags.",
    )
    names = recipes.names()
    p.add_argument("recipe", choices=names, help=" | ".join(names))
    p.add_argument("args", nargs=argparse.REMAINDER, help="memory and recipe flags (see RECIPE --help)")
    p.set_defaults(run=run)


def parser_for(name: str, recipe):
    from ddplab.cliargs import Parser
    from ddplab.train.config import add_arguments

    p = Parser(prog=f"ddplab memory {name}", description=f"Predict the per-rank memory of `ddplab train {name}`.")
    p.add_argument("--strategy", default="ddp,zero1,fsdp", metavar="S,...", help="ddp, zero1, fsdp (default: all)")
    p.add_argument(
        "--nproc-per-node",
        "--nproc",
        dest="nproc",
        type=int,
        default=2,
        metavar="N",
        help="ranks sharing the work (default 2): zero1 and fsdp shards shrink with N",
    )
    p.add_argument(
        "--gpus",
        metavar="A,B,...",
        help="GPUs to check, by name or by size with its unit: 24GiB, 24GB "
        "(10^9 bytes) (default: every GPU in ddplab cost's table)",
    )
    p.add_argument(
        "--margin",
        type=float,
        default=None,
        metavar="F",
        help="fraction of each GPU's memory kept free for the allocator's fragmentation (default 0.10)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    add_arguments(p.add_argument_group(f"{name} recipe"), recipe.config, skip=OWN)
    return p


def run(args) -> int:
    from ddplab.perf import cost, memory
    from ddplab.train.config import from_arguments
    from ddplab.train.loop import load_recipe
    from ddplab.train.strategy import STRATEGIES, check

    recipe = load_recipe(args.recipe)
    ns = parser_for(args.recipe, recipe).parse_args(args.args)
    cfg = from_arguments(recipe.config, argparse.Namespace(**{k: v for k, v in vars(ns).items() if k not in OWN}))
    cfg.check()
    names = [s.strip() for s in ns.strategy.split(",") if s.strip()]
    if not names or any(s not in STRATEGIES for s in names):
        raise DdplabError(f"--strategy {ns.strategy}: give a comma-separated list of {', '.join(STRATEGIES)}")
    for s in names:
        check(s)
    if ns.nproc < 1:
        raise DdplabError(f"--nproc {ns.nproc}: need at least 1 rank")
    margin = memory.MARGIN if ns.margin is None else ns.margin
    if not 0 <= margin < 1:
        raise DdplabError(f"--margin {ns.margin}: a fraction in [0, 1), e.g. 0.1")
    gpus = pick_gpus(ns.gpus, cost.MEMORY)
    # Tracing takes seconds per strategy on CPU (a minute and more for GPT-2 sizes): say what is going on, on stderr.
    start = time.monotonic()
    report.log(f"memory: {args.recipe}: tracing one training step on fake tensors at {ns.nproc} rank(s)")
    spec = memory.recipe_spec(args.recipe, cfg)
    settings = {k: v for k, v in cfg.to_dict().items() if k not in OWN}
    from ddplab.envinfo import cuda_available

    host = None if cuda_available() else memory.host_memory()  # no GPU: the ranks would train on this CPU
    result = memory.plan(
        spec,
        args.recipe,
        settings,
        names,
        ns.nproc,
        gpus,
        margin,
        progress=lambda line: report.log(f"memory: {line}"),
        host=host,
    )
    report.log(f"memory: traced in {time.monotonic() - start:.1f}s")
    report.emit(result, ns.json, render)
    return 0


def pick_gpus(text: str | None, table: dict) -> dict:
    from ddplab.perf.cost import canonical, memory_size

    if not text:
        return dict(table)
    chosen = {}
    for name in (n.strip() for n in text.split(",") if n.strip()):
        if (size := memory_size(name)) is not None:
            chosen[size.gpu] = size
            continue
        key = canonical(name, table)
        if key is None:
            raise DdplabError(
                f"--gpus {name}: ddplab knows the memory of {', '.join(table)} only; or give a size "
                "with its unit, e.g. --gpus 24GiB (2^30 bytes each) or 24GB (10^9)"
            )
        chosen[key] = table[key]
    if not chosen:
        raise DdplabError(f"--gpus {text!r} names no GPU: e.g. --gpus RTX4090,A100")
    return chosen


def gib(n: float) -> str:
    return f"{n / 2**30:.2f}"


def unit_for(r) -> tuple[str, float]:
    """GiB for models that need a GiB or more, else MiB: one unit per table."""
    return ("GiB", 2**30) if max(p.peak_bytes for p in r.predictions) >= 2**30 else ("MiB", 2**20)


def render(con, r) -> None:
    shape = " ".join(
        f"--{k.replace('_', '-')} {v}"
        for k, v in r.settings.items()
        if k in ("size", "n_layer", "n_head", "n_embd", "block_size", "vocab_size", "hidden", "layers", "in_features")
        and v not in ("", 0)
    )
    con.print(
        f"{r.model} {shape}: {r.parameters / 1e6:,.1f}M parameters; batch {r.batch_size} per rank, amp "
        f"{r.amp}, {r.nproc} rank(s)"
    )
    unit, size = unit_for(r)

    def amount(n: float) -> str:
        return f"{n / size:,.2f}"

    t = Table(box=None, pad_edge=False, title=f"one rank at its peak ({unit})", title_justify="left")
    t.add_column("part")
    for p in r.predictions:
        t.add_column(p.strategy, justify="right")
    t.add_column("how")
    from ddplab.perf.memory import PARTS

    for part in PARTS:
        values = [next((x for x in p.parts if x.name == part), None) for p in r.predictions]
        if all(v is None for v in values):
            continue
        basis = next(v.basis for v in values if v is not None)
        t.add_row(part, *(amount(v.bytes) if v else "-" for v in values), basis)
    t.add_row(
        Text("peak (allocator)", style="bold"),
        *(Text(amount(p.peak_bytes), style="bold") for p in r.predictions),
        "traced",
    )
    t.add_row("between steps", *(amount(p.between_steps_bytes) for p in r.predictions), "traced")
    t.add_row("per extra sample", *(amount(r.per_sample_bytes[p.strategy]) for p in r.predictions), "traced")
    con.print(t)
    con.print(
        f"on a GPU, apart from the above: CUDA context {gib(r.cuda_context_bytes)} GiB ({r.cuda_context_source});"
        f" safety margin {100 * r.margin:.0f} % of the GPU's memory for the caching allocator"
    )
    f = Table(
        box=None, pad_edge=False, title=f"fits at batch {r.batch_size}? (largest per-rank batch)", title_justify="left"
    )
    f.add_column("GPU")
    f.add_column("memory", justify="right")  # nvidia-smi's total (see the basis lines)
    f.add_column("usable", justify="right")
    for p in r.predictions:
        f.add_column(p.strategy, justify="right")
    rows = [(fit.gpu, fit.memory_bytes, fit.usable_bytes, fit.fits, fit.largest_batch) for fit in r.fits]
    if r.host:
        rows.append(("this CPU", r.host.ram_bytes, r.host.usable_bytes, r.host.fits, r.host.largest_batch))
    for name, total, usable, fits, largest in rows:
        f.add_row(
            name,
            f"{gib(total)} GiB",
            f"{gib(usable)} GiB",
            *(f"{'yes' if fits[p.strategy] else 'no'} ({largest[p.strategy]})" for p in r.predictions),
        )
    con.print(f)
    if r.host:
        con.print(
            f"this CPU: no GPU is visible, so `ddplab train` runs the {r.host.nproc} rank(s) on the CPU, all "
            f"from its RAM ({gib(r.host.available_bytes)} GiB of it free now): usable = the RAM less the "
            f"margin, divided by {r.host.nproc}"
        )
    for line in r.advice:
        con.print(f"advice: {line}")
    for line in r.basis:
        con.print(f"- {line}")
