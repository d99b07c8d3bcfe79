"""`ddplab COMMAND ...`: registers the subcommands and maps ddplab errors to exit codes (see docs/guide.md).

Exit codes: 0 pass, 1 a check or run failed, 2 bad input or usage, 3 timeout or hang, 130 Ctrl-C.
Command modules keep heavy imports (torch) inside run(), so `ddplab --help` stays instant; `ddplab COMMAND ...`
imports that command's module alone (`ddplab launch` starts its agent sooner).
"""

from __future__ import annotations

import importlib
import signal
import sys

from ddplab import __version__, discover
from ddplab.cliargs import Parser
from ddplab.errors import DdplabError

# Help lists commands in the order a learner meets them; any other module in ddplab/commands comes after.
ORDER = (
    "env",
    "check",
    "bench",
    "train",
    "launch",
    "explain",
    "lint",
    "scale",
    "cost",
    "memory",
    "new",
    "monitor",
    "slurm",
    "sky",
    "k8s",
)


def command_names() -> list[str]:
    import ddplab.commands

    return discover.modules(ddplab.commands.__path__, ORDER)


def build_parser(argv: list[str] | None = None) -> Parser:
    """Every command's parser; only COMMAND's when argv starts with a command's name (the others' modules import
    rich, psutil, the perf models...: a tenth of a second that every start of a command would pay)."""
    parser = Parser(prog="ddplab", description="Check, practise, run, measure and debug PyTorch DDP training.")
    parser.add_argument("--version", action="version", version=f"ddplab {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    names = command_names()
    for name in argv[:1] if argv and argv[0] in names else names:
        importlib.import_module(f"ddplab.commands.{name}").add_parser(sub)
    _describe(sub)
    return parser


def _describe(sub) -> None:
    """`ddplab COMMAND --help` opens with what the command does: its line in `ddplab --help` when the module gave
    no longer description."""
    for action in sub._choices_actions:  # argparse keeps each subcommand's help= here
        parser = sub.choices[action.dest]
        if not parser.description and action.help:
            parser.description = action.help[0].upper() + action.help[1:] + "."


def _terminate(signum, frame):
    # SIGTERM (a scheduler's kill, a CI timeout) unwinds like Ctrl-C, so every `finally` ends the workers.
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    signal.signal(signal.SIGTERM, _terminate)
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    args.typed = argv  # as typed: what a written file says it was written by
    if not args.command:
        parser.print_help(sys.stderr)
        return 2
    try:
        return args.run(args)
    except DdplabError as e:
        print(f"ddplab {args.command}: error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print(f"ddplab {args.command}: interrupted", file=sys.stderr)
        return 130
