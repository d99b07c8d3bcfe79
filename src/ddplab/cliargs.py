"""Argument types and option groups that several commands share, so that each flag means one thing everywhere.

Flag names follow torchrun where they overlap (--nproc-per-node, --nnodes, --node-rank, --rdzv-endpoint, ...).
"""

from __future__ import annotations

import argparse


class Parser(argparse.ArgumentParser):
    """argparse that reports bad input in one line (no usage dump), exit code 2."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def positive_int(text: str) -> int:
    if not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive whole number, e.g. 2")
    return int(text)


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number, e.g. 30")
    return value


# The no-progress timeout: one name (--hang-timeout) and one meaning in every command that starts ranks — no rank made
# progress for S seconds, so the run is declared hung: every rank's stack and Flight Recorder record, every process
# ended, exit 3. The defaults differ because what counts as progress differs (the commands' own ranks mark each step;
# a user's script only prints), each with its reason here, so that --help and the docs say the same thing.
HANG_TIMEOUT_S = {
    "check": 30.0,  # a stage marks progress every few seconds; a first NCCL initialisation takes well under 30 s
    "bench": 120.0,  # one size (up to 64M x 25 calls) is one step of progress: seconds on gloo, more on a slow link
    "train": 300.0,  # one log window of a large model on CPU, or a first torch.compile, can take minutes
    # a user's script prints when it likes: silence alone never fires, it must be confirmed by idle CPU or by every
    # rank seen in the same distributed wait twice, so a long busy step is safe; a minute names a hang while the
    # learner still waits for it (gloo's own timeout is 30 min)
    "launch": 60.0,
}
HANG_TIMEOUT_HELP = "no progress on any rank for S seconds: the run is hung, every rank's stack is shown, exit 3"


def add_hang_timeout(
    parser, command: str, *aliases: str, dest: str | None = None, extra: str = "", off: bool = False
) -> None:
    """--hang-timeout S for `command`, with its default from HANG_TIMEOUT_S shown in --help; `aliases` are the
    command's older names for it (kept working). off: 0 turns the watchdog off (None)."""
    default = HANG_TIMEOUT_S[command]
    parser.add_argument(
        "--hang-timeout",
        *aliases,
        dest=dest or "hang_timeout",
        metavar="S",
        default=default,
        type=hang_seconds if off else positive_float,
        help=f"{HANG_TIMEOUT_HELP}{extra} (default {default:g}" + (", 0: off" if off else "") + ")",
    )


def hang_seconds(text: str) -> float | None:
    """A positive number of seconds, or 0 for no watchdog (None)."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if value == 0:
        return None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds, e.g. 60 (0 turns the watchdog off)")
    return value


def port(text: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise argparse.ArgumentTypeError(f"{text!r} is not a TCP port (1..65535)")
    return int(text)


def counts(text: str, flag: str) -> list[int]:
    """A comma-separated list of device or rank counts (--count, --nproc 1,2,4), duplicates dropped, order kept."""
    from ddplab.errors import DdplabError

    parts = [p.strip() for p in text.split(",") if p.strip()]
    try:
        numbers = [int(p) for p in parts]
    except ValueError:
        raise DdplabError(f"{flag} {text!r} is not a comma-separated list of integers, e.g. 1,2,4,8") from None
    if not numbers or any(n < 1 for n in numbers):
        raise DdplabError(f"{flag} {text!r}: give at least one count, each 1 or more, e.g. 1,2,4,8")
    return list(dict.fromkeys(numbers))


def read_json(path: str, flag: str, how_to_make: str):
    """The JSON in a file a flag names; a missing or broken file is a one-line error saying how to make one."""
    import json
    from pathlib import Path

    from ddplab.errors import DdplabError

    p = Path(path)
    if not p.is_file():
        raise DdplabError(f"{flag} {path}: no such file: write one with `{how_to_make} > {path}`")
    try:
        return json.loads(p.read_text(errors="replace"))
    except json.JSONDecodeError as e:
        raise DdplabError(f"{flag} {path}: not valid JSON (line {e.lineno}: {e.msg})") from None


def add_nodes(parser: argparse.ArgumentParser) -> None:
    """--nnodes/--node-rank/--rdzv-endpoint/--rdzv-id, as torchrun spells them."""
    group = parser.add_argument_group("several machines (torchrun's c10d rendezvous)")
    group.add_argument("--nnodes", type=positive_int, default=1, help="machines taking part (default 1)")
    group.add_argument(
        "--node-rank", type=int, default=0, help="this machine's number, 0..nnodes-1; 0 hosts the rendezvous"
    )
    group.add_argument(
        "--rdzv-endpoint",
        help="HOST:PORT of node 0, the same on every node (private network only: the store is unauthenticated)",
    )
    group.add_argument("--rdzv-id", default="ddplab", help="a name shared by the nodes of one job (default ddplab)")


def nodes_from(args):
    """The Nodes of a multi-machine run, or None for one machine. Bad combinations are one-line errors."""
    from ddplab.errors import DdplabError
    from ddplab.launcher.nodes import Nodes

    if args.nnodes == 1:
        if args.node_rank != 0:
            raise DdplabError(f"--node-rank {args.node_rank} needs --nnodes > 1")
        return None
    if not args.rdzv_endpoint:
        raise DdplabError(
            f"--nnodes {args.nnodes} needs --rdzv-endpoint HOST:PORT (node 0's address), the same on every node"
        )
    nodes = Nodes.parse(args.nnodes, args.node_rank, args.rdzv_endpoint, args.rdzv_id)
    if nodes.rank == 0:
        from ddplab.report import log

        log(
            f"warning: the c10d rendezvous store on {nodes.host}:{nodes.port} is unauthenticated: anyone who can "
            "reach that port can join or disturb the job, so keep it on a private network"
        )
    return nodes


GRACE_S = 30.0  # = ddplab.launcher.preempt.DEFAULT_GRACE_S (not imported here: cliargs stays light)


def add_grace(parser) -> None:
    """--grace S: after SIGTERM/SIGUSR1/SIGUSR2, how long the ranks may take to save before they are ended."""
    parser.add_argument(
        "--grace",
        metavar="S",
        type=_seconds,
        default=GRACE_S,
        help="on SIGTERM/SIGUSR1/SIGUSR2 (a preemption notice) every rank is sent SIGTERM and has "
        "this long to save (ddplab.resume) before it is ended; exit code 4 once the state is "
        f"saved (default {GRACE_S:g})",
    )


def add_preemption_notice(parser) -> None:
    """--preemption-notice aws|gcp|URL: a notice polled from the metadata server, turned into the agreed stop."""
    parser.add_argument(
        "--preemption-notice",
        metavar="aws|gcp|URL",
        type=_notice,
        default=None,
        help="poll the machine's metadata every few seconds for a preemption notice that is no signal (aws: the "
        "spot two-minute warning, spot/instance-action; gcp: instance/preempted; URL: 200 with a body) and stop "
        "as on SIGTERM: every rank saves at the same step, exit code 4",
    )


def _notice(value: str) -> str:
    """The value as given (it travels as JSON from the agent's parser); launcher.notice.parse reads it again."""
    from ddplab.launcher.notice import parse

    try:
        parse(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return value


PROFILE_STEPS = 5  # --profile alone: enough steps to see a pattern, few enough that the window ends early


def add_profile(parser) -> None:
    """--profile [STEPS]: torch.profiler in every rank (ddplab.perf.profhook), the breakdown after the run."""
    parser.add_argument(
        "--profile",
        nargs="?",
        type=positive_int,
        const=PROFILE_STEPS,
        default=None,
        metavar="STEPS",
        help=f"torch.profiler over STEPS optimizer steps (default {PROFILE_STEPS}) in every rank, "
        "after 3 warm-up steps: per-rank breakdown, the causes of lost speed ranked, Chrome "
        "traces and a PNG kept in the run's folder (docs/profile.md)",
    )


SANITIZE_STEPS = 50  # = ddplab.sanitize.DEFAULT_STEPS (not imported here: cliargs stays light)


def add_sanitize(parser) -> None:
    """--sanitize-steps N: the sanitizer's window in every rank (ddplab.sanitize), its findings after the run."""
    parser.add_argument(
        "--sanitize-steps",
        metavar="N",
        type=_whole,
        default=SANITIZE_STEPS,
        help="watch every rank's first N optimizer steps for DDP mistakes: the same samples on "
        "several ranks, an epoch repeating the last one's order, parameters that differ "
        "between ranks, several ranks writing one file; the findings come after the run "
        f"(default {SANITIZE_STEPS}; 0 turns it off; docs/sanitize.md)",
    )


def _whole(text: str) -> int:
    if not text.strip().isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number, e.g. 50 (0 turns it off)")
    return int(text)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds, e.g. 30")
    return value


def add_budget(parser, what: str) -> None:
    """--budget AMOUNT and how it is priced (ddplab.perf.spend): --price, or --gpu/--provider/--tier from the table."""
    parser.add_argument(
        "--budget",
        type=positive_float,
        metavar="AMOUNT",
        help=f"stop {what} once this much has been spent (time x price); a warning at 80 %%",
    )
    parser.add_argument("--price", type=positive_float, metavar="P", help="--budget's rate: P per GPU-hour")
    parser.add_argument("--currency", default="USD", metavar="CODE", help="--price's currency (default USD)")
    parser.add_argument("--gpu", metavar="NAME", help="--budget's rate from ddplab's price table (`ddplab cost`)")
    parser.add_argument("--provider", metavar="NAME", help="with --gpu: the provider's row (RunPod, AWS, ...)")
    parser.add_argument("--tier", metavar="TIER", help="with --gpu: secure, community, spot or on-demand")


# ------------------------------------------------------------------ the engines' commands (slurm, sky, k8s)


def engine_flags(p, defaults: bool = True, nodes_alias: bool = False) -> None:
    """The flags every engine takes (torchrun's names). defaults=False: for flags found after the target, where a
    flag not given must not reset the value given before it."""

    def d(value):
        return value if defaults else argparse.SUPPRESS

    names = ["--nnodes", "--nodes"] if nodes_alias else ["--nnodes"]
    p.add_argument(*names, dest="nnodes", type=positive_int, default=d(None), help="nodes (required)")
    p.add_argument(
        "--nproc-per-node",
        "--gpus-per-node",
        dest="nproc_per_node",
        type=positive_int,
        default=d(None),
        help="processes per node = GPUs per node (required)",
    )
    p.add_argument("--cpu", action="store_true", default=d(False), help="CPU nodes: no GPUs asked for, gloo ranks")
    p.add_argument(
        "--checkpoint-dir",
        default=d(None),
        help="given to the target as --checkpoint-dir: where it saves and a restarted job resumes from",
    )
    p.add_argument(
        "--grace",
        type=positive_int,
        default=d(30),
        help="seconds between the engine's signal and the end, for the save (default 30)",
    )
    p.add_argument(
        "--hang-timeout",
        type=positive_int,
        default=d(None),
        help="ddplab launch's watchdog: no progress for S seconds is a hang, exit 3 (default: launch's)",
    )
    p.add_argument("--rdzv-port", type=port, default=d(29500), help="rendezvous port on node 0 (default 29500)")
    p.add_argument("-o", "--output", default=d(None), help="where to write the job (default: beside the script)")
    p.add_argument("--force", action="store_true", default=d(False), help="overwrite --output if it exists")


def add_engine_parser(sub, engine: str, what: str, description: str, add_own, run) -> None:
    """`ddplab slurm|sky|k8s`: one parser for every engine: its own flags (add_own), the target and its arguments."""
    from ddplab import recipes  # their names only (pkgutil): no torch

    p = sub.add_parser(
        engine,
        help=f"write {what} that runs a recipe or script on several nodes",
        description=description,
        usage=f"ddplab {engine} --nnodes N --nproc-per-node P [options] target [target_args ...]",
        epilog="Own flags may come before or after the target; every other argument goes to the target (after "
        "`--`, even one named like an own flag).",
    )
    add_own(p)
    p.add_argument("target", help=f"a recipe ({', '.join(recipes.names())}) or a training script's path")
    p.add_argument("target_args", nargs=argparse.REMAINDER, help="arguments for the recipe or script")
    p.set_defaults(run=run)


class _EngineFlags(argparse.ArgumentParser):
    """The engine's own flags found after the target: bad values are one line, exit 2, as before the target."""

    def error(self, message: str):
        from ddplab.errors import DdplabError

        raise DdplabError(f"{message}: see `{self.prog} --help`")


def take_engine_flags(args, engine: str, add) -> None:
    """Move the engine's own flags (add(parser, defaults=False)) out of the target's arguments: they may come before
    or after the target; those after `--` stay the target's."""
    rest = list(args.target_args)
    after = []
    if "--" in rest:
        cut = rest.index("--")
        rest, after = rest[:cut], rest[cut + 1 :]
    own = _EngineFlags(prog=f"ddplab {engine}", add_help=False, allow_abbrev=False)
    add(own, defaults=False)
    found, rest = own.parse_known_args(rest)
    vars(args).update(vars(found))
    args.target_args = rest + after
