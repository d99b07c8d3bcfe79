"""Tables keep ids and numbers whole when the output is not a terminal: at COLUMNS=80, and through a pipe with no
terminal at all (rich then assumes 80 columns; sentences are not wrapped there, so that they can be copied). Checked on `ddplab monitor --once` while a real ddplab job runs
(its table is the widest: marks and phase columns), and on fit_table itself at widths down to 40."""

from __future__ import annotations

import io
import os
import subprocess
import sys

from conftest import alive, cli
from rich.console import Console
from test_monitor import slow_rank_job, wait_for

from ddplab import report

BOX = "│┃┏┓┗┛┡┩└┘┣┫╇╋━─┳┻┬┴┼"


def rows_of(text: str) -> list[list[str]]:
    return [line.translate({ord(c): " " for c in BOX}).split() for line in text.splitlines()]


def shows_whole(text: str, rank: int, local: int, pid: int) -> bool:
    """rank, local rank and pid side by side and whole on one line of the table."""
    want = [str(rank), str(local), str(pid)]
    return any(row[i : i + 3] == want for row in rows_of(text) for i in range(len(row)))


def _monitor_piped(pids: list[int]) -> str:
    """monitor's text with no terminal anywhere (stdin, stdout, stderr) and no COLUMNS: as in a CI log."""
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    ran = subprocess.run(
        [sys.executable, "-m", "ddplab", "monitor", "--once", "--interval", "0.5", "--pids", *map(str, pids)],
        env={**env, "NO_COLOR": "1"},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return ran.stdout


def test_monitor_keeps_rank_local_and_pid_whole_at_80_columns_and_in_a_pipe(tmp_path, no_leftover_workers):
    with slow_rank_job(tmp_path) as pids:
        wait_for(lambda: (tmp_path / "ahead").exists(), 90, "some marks, so that the marks and phase columns show")
        texts = {
            "COLUMNS=80": cli(
                "monitor", "--once", "--interval", "0.5", "--pids", *map(str, pids), env={"COLUMNS": "80"}, timeout=60
            ).out,
            "pipe": _monitor_piped(pids),
        }
    for how, text in texts.items():
        assert "ddplab:" in text, f"{how}: no job in the table\n{text}"
        assert "…" not in text, f"{how}: something was cut\n{text}"
        for rank, pid in enumerate(pids):
            assert shows_whole(text, rank, rank, pid), f"{how}: rank {rank} (pid {pid}) not whole\n{text}"
        prose = ("WARN ", "note: ", "verdict: ", "ddplab monitor ")  # a pipe gets each sentence on one line
        table = [line for line in text.splitlines() if not line.startswith(prose)]
        assert max(len(line) for line in table) <= 80, f"{how}: a table wider than 80 columns\n{text}"
        if how == "pipe":
            assert all(line == line.rstrip() for line in text.splitlines()), f"trailing spaces\n{text}"
            assert not [
                line
                for line in text.splitlines()
                if line.startswith(" ") and len(line.split()) > 3 and not line.split()[0].isdigit()
            ], f"a sentence wrapped\n{text}"
    assert not alive(pids)


def test_fit_table_never_cuts_an_id_however_narrow():
    Column = report.Column
    columns = [
        Column("job", justify="left", fold_last=True),
        Column("rank"),
        Column("local"),
        Column("pid"),
        Column("CPU %"),
        Column("CPU s", drop=2),
        Column("RSS MiB", drop=1),
        Column("phase", "text", drop=3),
        Column("flags", "text"),
    ]
    rows = [
        [
            "ddplab:ddplab-run-abc123xy" if r == 0 else "",
            str(r),
            str(r),
            str(4194301 + r),
            "100",
            "12345.6",
            "23456",
            "train.step.backward",
            "behind idle",
        ]
        for r in range(3)
    ]
    for width in (200, 80, 60, 40):
        table, left_out = report.fit_table(width, columns, rows)
        out = io.StringIO()
        Console(file=out, width=width, no_color=True).print(table)
        text = out.getvalue()
        assert "…" not in text, f"{width}:\n{text}"
        for r in range(3):
            assert shows_whole(text, r, r, 4194301 + r), f"{width}:\n{text}"
        assert max(len(line) for line in text.splitlines()) <= width, f"{width}:\n{text}"
        if width >= 80:
            assert "ddplab:ddplab-run-abc123xy" in text  # an id folds only when nothing else fits (40 columns)
        if width == 200:
            assert left_out == [] and table.box is not None  # room enough: the usual boxed table, every column
        if width == 40:
            assert "phase" in left_out  # the least useful column went first


def test_one_jobs_table_keeps_every_column_at_80(capsys):
    """Issue 42 point 9: at 80 columns monitor left a column out ("note: left out for a 80-column output: phase").
    One job's id is said once above the table, so a ddplab job's ranks fit whole, marks and phase included."""
    from ddplab.commands.monitor import _view
    from ddplab.observe.monitor import JobView, RankView, Snapshot

    ranks = [
        RankView(4194301 + r, r, r, "sleeping", 71.0, 1234.5, 32768.0, progress=12345, phase="train.step")
        for r in range(2)
    ]
    snap = Snapshot(0.0, 2.1, [JobView("ddplab:g1_co_09ab", "ddplab train", 4194300, 2, ranks)], [], "no driver")
    Console(file=(out := io.StringIO()), width=80, no_color=True).print(_view(snap, 80))
    text = out.getvalue()
    assert "left out" not in text and "…" not in text, text
    assert "\njob ddplab:g1_co_09ab\n" in text
    for header in ("rank", "local", "pid", "state", "CPU", "RSS", "marks", "phase", "flags"):
        assert header in text, header
    assert shows_whole(text, 1, 1, 4194302) and "train.step" in text, text
