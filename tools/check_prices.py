"""Check a price file before it ships or before `ddplab cost --prices` reads it: one line per problem, exit 1.

    python tools/check_prices.py src/ddplab/data/prices.csv
    python tools/check_prices.py my_quotes.csv --today 2026-12-05      # dates after that day are refused

Checked (the same rules `ddplab cost` applies, ddplab.perf.cost.parse_prices): the header names every required
column and no unknown one; every row has them all, a known tier (secure, community, spot, on-demand), a positive
price per GPU-hour, a 3-letter currency code, a whole gpus_per_box of 1 or more, a date_read as YYYY-MM-DD that is
not in the future, and no offer twice. Exit 0: fine; 1: problems (listed); 2: the file or --today cannot be read.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from ddplab.errors import DdplabError  # noqa: E402
from ddplab.perf import cost  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file", help="the price file (CSV)")
    ap.add_argument(
        "--today",
        metavar="YYYY-MM-DD",
        help=f"the day dates may not pass (default: ${cost.TODAY_ENV}, else the clock's)",
    )
    args = ap.parse_args(argv)
    try:
        on = cost.today() if args.today is None else cost.iso_date(args.today)
        if on is None:
            raise DdplabError(f"--today {args.today!r} is not a date: give YYYY-MM-DD")
        text = Path(args.file).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError, DdplabError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    offers, problems = cost.parse_prices(text, args.file, on)
    for line in problems:
        print(line)
    if problems:
        return 1
    read = cost.age(offers, on)
    print(f"{args.file}: {len(offers)} offer(s), fine; the oldest read {read[0]} day(s) before {on} ({read[1].name})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
