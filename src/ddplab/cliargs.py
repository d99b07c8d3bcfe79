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
    group.add_argument("--node-rank", type=int, default=0, help="this machine's number, 0..nnodes-1; 0 hosts the "
                                                                 "rendezvous")
    group.add_argument("--rdzv-endpoint", help="HOST:PORT of node 0, the same on every node (private network only: "
                                               "the store is unauthenticated)")
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
        raise DdplabError(f"--nnodes {args.nnodes} needs --rdzv-endpoint HOST:PORT (node 0's address), the same on "
                          "every node")
    nodes = Nodes.parse(args.nnodes, args.node_rank, args.rdzv_endpoint, args.rdzv_id)
    if nodes.rank == 0:
        from ddplab.report import log

        log(f"warning: the c10d rendezvous store on {nodes.host}:{nodes.port} is unauthenticated: anyone who can "
            "reach that port can join or disturb the job, so keep it on a private network")
    return nodes
