"""Text from outside (error messages, paths, log lines, script output) is printed as it is, never read as rich markup.

gloo's timeout message carries `[/__w/pytorch/.../unbound_buffer.cc:78]`, which rich once read as a closing tag and
raised MarkupError in `ddplab train` (issue 26). Here every command's renderer gets result objects whose free text
is markup-like, in text and in --json; the output must carry it verbatim and nothing may raise. A few real CLI runs
do the same end to end. Last, piped output (issue 32): sentences, paths and URLs whole on their line, no line ending
in spaces, tables still within 80 columns.
"""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

import pytest
from conftest import cli

from ddplab import report

SRC = Path(__file__).resolve().parents[1] / "src" / "ddplab"
MARKS = [
    "[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78]",
    "[bold]",
    "[/]",
    "[link=http://x]y[/link]",
    "[red]not red[/red]",
]
MARK = " ".join(MARKS)


@pytest.fixture(autouse=True)
def wide(monkeypatch):
    # Table cells stay on one line, so the text can be found whole.
    monkeypatch.setenv("COLUMNS", "1000")
    monkeypatch.setenv("NO_COLOR", "1")


def rendered(result, render, capsys) -> tuple[str, object]:
    """(text output, parsed --json output) of one result through one renderer."""
    report.emit(result, False, render)
    text = capsys.readouterr().out
    report.emit(result, True, render)
    return text, json.loads(capsys.readouterr().out)


def assert_verbatim(text: str, data, times: int = 1) -> None:
    assert text.count(MARK) >= times, text
    assert json.dumps(data).count(json.dumps(MARK)[1:-1]) >= times


# ------------------------------------------------------------------------------------------- every renderer


def test_env(capsys):
    from ddplab.commands.env import render
    from ddplab.envinfo import EnvReport

    r = EnvReport(
        python={"version": MARK, "executable": MARK},
        platform={"system": MARK, "release": "", "machine": ""},
        torch={"version": "2.13.0", "build": MARK, "cudnn": None, "nccl": None},
        backends={"gloo": True},
        devices=[],
        driver=MARK,
        cpu={"physical_cores": 2, "logical_cores": 2},
        memory={"total_gib": 1, "shm_mib": 1},
        env_vars={"NCCL_DEBUG": MARK},
        warnings=[{"problem": MARK, "fix": MARK}],
    )
    assert_verbatim(*rendered(r, render, capsys), times=6)


def test_check_failure_and_result(capsys):
    from ddplab.checks import FAIL, PASS, TIMEOUT, StageResult
    from ddplab.commands.check import CheckResult, render

    stages = [
        StageResult(
            "devices", PASS, 1.0, figure=MARK, details={"findings": [{"level": "warn", "what": MARK, "fix": MARK}]}
        ),
        StageResult("collectives", FAIL, 1.0, figure=MARK, cause=MARK, fix=MARK),
        StageResult("ddp", TIMEOUT, 1.0, cause=MARK, fix=MARK),
    ]
    r = CheckResult(
        ok=False,
        verdict=MARK,
        nproc=2,
        device="cpu",
        backend="gloo",
        seconds=1.0,
        stages=stages,
        problems=[{"rank": 1, "phase": MARK, "traceback": MARK}, {"rank": 0, "phase": "x", "stack": MARK}],
    )
    assert_verbatim(*rendered(r, render, capsys), times=9)


def test_bench_result_and_failure(capsys):
    from ddplab.commands.bench import _run_failed, render
    from ddplab.launcher.outcome import RankOutcome, RunResult
    from ddplab.perf.bench import BenchResult

    r = BenchResult(
        status="PASS",
        backend="gloo",
        device="cpu",
        world_size=2,
        dtype="float32",
        iters=1,
        warmup=1,
        in_place=True,
        notes=[MARK],
    )
    assert_verbatim(*rendered(r, render, capsys))
    run = RunResult(
        status="failed",
        seconds=1.0,
        nproc=1,
        master_port=1,
        ranks=[RankOutcome(rank=0, exitcode=1, traceback=MARK)],
        root_cause=0,
    )
    assert _run_failed(run) == 1
    assert MARK in capsys.readouterr().err


def test_train_result_failure_and_notes(capsys):
    from ddplab.train.progress import ProgressView
    from ddplab.train.result import RankStats, TrainFailure, TrainResult, render, render_failure

    ranks = [
        RankStats(
            rank=0,
            samples=1,
            steps=1,
            step_ms=1.0,
            comm_wait_ms=None,
            cpu_percent=1.0,
            gpu_util_percent=None,
            peak_memory_mb=1.0,
            final_loss=1.0,
            digest=MARK,
        )
    ]
    r = TrainResult(
        recipe=MARK,
        parameters=1,
        world_size=1,
        backend="gloo",
        device="cpu",
        batch_size=1,
        grad_accum=1,
        global_batch=1,
        epochs=1,
        steps=1,
        total_steps=1,
        planned_steps=1,
        seconds=1.0,
        timed_steps=1,
        samples=1,
        samples_per_sec=1.0,
        final_loss=1.0,
        params_identical=False,
        ranks=ranks,
        strategy="ddp",
        status="PASS",
        mfu_note=MARK,
        tokens_per_sec=1.0,
        model_file=MARK,
        checkpoint=MARK,
        metrics_file=MARK,
        notes=[MARK],
        warnings=[MARK],
    )
    assert_verbatim(*rendered(r, render, capsys), times=7)
    gloo = (
        "RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] "
        "Timed out waiting 60000ms for recv operation to complete"
    )
    f = TrainFailure(
        "failed",
        MARK + gloo,
        0,
        [{"rank": 0, "phase": "x", "exitcode": 1, "error": MARK, "output_tail": MARK + gloo, "stack": None}],
    )
    text, data = rendered(f, render_failure, capsys)
    assert_verbatim(text, data, times=2)
    assert gloo in text
    view = ProgressView()
    view.start(
        {
            "recipe": MARK,
            "parameters": 1,
            "world_size": 1,
            "backend": "gloo",
            "device": "cpu",
            "global_batch": 1,
            "batch_size": 1,
            "grad_accum": 1,
            "steps_per_epoch": 1,
            "epochs": 1,
            "planned_steps": 1,
            "start_step": 0,
            "start_epoch": 0,
        }
    )
    view.note(MARK)
    view.close()
    assert capsys.readouterr().err.count(MARK) == 2


def test_launch_failure_and_hang(capsys):
    from ddplab.commands.launch import render
    from ddplab.explain.matcher import explain_text as explain
    from ddplab.lint.findings import Finding
    from ddplab.userscript.analysis import LaunchResult, RankReport

    explanation = explain("RuntimeError: Connection closed by peer " + MARK, source=MARK)
    ranks = [
        RankReport(rank=0, local_rank=0, pid=1, exitcode=1, error=MARK, traceback=MARK, log=MARK),
        RankReport(rank=1, local_rank=1, pid=2, exitcode=1, error=MARK),
    ]
    r = LaunchResult(
        status="failed",
        exit_code=1,
        summary=MARK,
        command=[MARK],
        nproc_per_node=2,
        nnodes="1",
        endpoint=None,
        log_dir=MARK,
        seconds=1.0,
        ranks=ranks,
        root_cause=0,
        explanation=explanation,
    )
    assert_verbatim(*rendered(r, render, capsys), times=5)
    hang = LaunchResult(
        status="hang",
        exit_code=3,
        summary=MARK,
        command=[MARK],
        nproc_per_node=2,
        nnodes="1",
        endpoint=None,
        log_dir=MARK,
        seconds=1.0,
        ranks=[RankReport(rank=0, local_rank=0, pid=1, stuck_in=MARK, where=MARK, stack=MARK)],
        related_lint=[Finding(line=1, rule=MARK, level="error", message=MARK, fix=MARK)],
    )
    assert_verbatim(*rendered(hang, render, capsys), times=4)
    from ddplab.sanitize import Finding as Seen
    from ddplab.sanitize.readout import SanitizeReport

    sanitized = LaunchResult(
        status="ok",
        exit_code=0,
        summary=MARK,
        command=[MARK],
        nproc_per_node=2,
        nnodes="1",
        endpoint=None,
        log_dir=None,
        seconds=1.0,
        sanitize=SanitizeReport(50, [0, 1], 50, [Seen(MARK, MARK, MARK, "x.py:1", MARK)]),
    )
    assert_verbatim(*rendered(sanitized, render, capsys), times=5)


def test_explain_and_lint(capsys):
    from ddplab.commands.lint import render as render_lint
    from ddplab.explain.matcher import explain_text as explain
    from ddplab.explain.matcher import render
    from ddplab.lint.findings import Finding, LintResult

    e = explain(f"[rank1]: RuntimeError: {MARK} Connection closed by peer", source=MARK)
    assert e.matches
    assert_verbatim(*rendered(e, render, capsys))
    nothing = explain(MARK, source=MARK)
    render(report.console(), nothing)  # no known error: next steps, nothing raises
    capsys.readouterr()
    lint = LintResult(
        script=MARK,
        findings=[
            Finding(line=1, rule=MARK, level="error", message=MARK, fix=MARK),
            Finding(line=2, rule="x", level="warning", message=MARK, fix=MARK),
        ],
        errors=1,
        warnings=1,
    )
    assert_verbatim(*rendered(lint, render_lint, capsys), times=5)
    clean = LintResult(script=MARK, findings=[])
    assert_verbatim(*rendered(clean, render_lint, capsys))


def test_scale_cost_memory(capsys):
    from ddplab.commands.cost import render as render_cost
    from ddplab.commands.memory import render as render_memory
    from ddplab.commands.scale import render as render_scale
    from ddplab.perf.advice import Advice
    from ddplab.perf.cost import CostResult, Option, Peak, Price
    from ddplab.perf.memory import Fit, MemoryReport
    from ddplab.perf.memory_trace import Part
    from ddplab.perf.memory_trace import Prediction as MemPrediction
    from ddplab.perf.prediction import Point
    from ddplab.perf.study import ScaleResult

    point = Point(
        world_size=2,
        batch_per_rank=1,
        accum_steps=1,
        samples_per_sec=1.0,
        speedup=1.0,
        efficiency=0.1,
        step_ms=1.0,
        compute_ms=1.0,
        exposed_comm_ms=1.0,
        model_samples_per_sec=1.0,
        run_samples_per_sec=1.0,
    )
    model = {
        "compute_fixed_s": 0.0,
        "compute_per_sample_s": 0.0,
        "step_fixed_s": 0.0,
        "latency_s": 0.0,
        "bus_bytes_per_s": None,
        "overlap": 0.0,
    }
    s = ScaleResult(
        recipe=MARK,
        device="cpu",
        backend="gloo",
        strong=False,
        batch_per_rank=1,
        accum_steps=1,
        grad_bytes=1,
        recipe_flags=[MARK],
        points=[point],
        model=model,
        predictions=[],
        interconnects=[],
        advice=[Advice(name=MARK, why=MARK, flags=[MARK], predicted_gain=1.0, note=MARK)],
        plot=MARK,
        notes=[MARK],
    )
    assert_verbatim(*rendered(s, render_scale, capsys), times=4)
    option = Option(
        gpu=MARK,
        offer=0,
        count=1,
        billed_gpus=1,
        samples_per_sec=1.0,
        hours=1.0,
        cost=1.0,
        currency="USD",
        price_per_gpu_hour=1.0,
        speed_ratio=1.0,
        speed_basis="assumed",
        scaling_basis=MARK,
        cheapest=True,
        fastest=True,
    )
    c = CostResult(
        samples=1.0,
        base_samples_per_sec=1.0,
        measured_on=MARK,
        options=[option],
        prices=[Price(MARK, 1.0, "USD", MARK, MARK, 1, MARK, MARK, MARK, MARK)],
        peaks=[Peak(MARK, 1.0, MARK, MARK)],
        assumptions=[MARK],
        notes=[MARK],
        prices_age_days=1,
        prices_oldest=MARK,
    )
    assert_verbatim(*rendered(c, render_cost, capsys), times=12)
    pred = MemPrediction(
        strategy="ddp", nproc=1, batch_size=1, peak_bytes=1, parts=[Part(MARK, 1, MARK)], between_steps_bytes=1
    )
    m = MemoryReport(
        model=MARK,
        settings={},
        parameters=1,
        batch_size=1,
        nproc=1,
        amp=MARK,
        predictions=[pred],
        per_sample_bytes={"ddp": 1.0},
        fits=[Fit(MARK, 1.0, 1, {"ddp": True}, {"ddp": 1}, MARK)],
        cuda_context_source=MARK,
        advice=[MARK],
        basis=[MARK],
    )
    assert_verbatim(*rendered(m, render_memory, capsys), times=6)


def test_monitor_new_slurm(capsys):
    from ddplab.commands import monitor, new
    from ddplab.engines import job as jobs
    from ddplab.observe.monitor import JobView, RankView, Snapshot

    rank = RankView(
        pid=1, rank=0, local_rank=0, status=MARK, cpu_percent=1.0, cpu_seconds=1.0, phase=MARK, progress=1, flags=[MARK]
    )
    snap = Snapshot(
        time=0.0,
        interval_s=1.0,
        jobs=[JobView(id=MARK, launcher="torchrun", agent_pid=None, world_size=1, ranks=[rank])],
        gpus=[],
        nvml=MARK,
        problems=[MARK],
        notes=[MARK],
        verdict=MARK,
        ok=True,
    )
    assert_verbatim(*rendered(snap, monitor.render, capsys), times=7)
    n = new.NewResult(path=MARK, task="classification", lines=1, overwritten=False, run=MARK)
    assert_verbatim(*rendered(n, new.render, capsys), times=2)
    s = jobs.Written(engine="slurm", path=MARK, submit=MARK, nnodes=1, nproc_per_node=1)
    assert_verbatim(*rendered(s, jobs.render, capsys), times=2)


def test_log_and_status_and_finding_print_markup_as_it_is(capsys):
    report.log(MARK)
    with report.console(stderr=True).status(MARK) as status:
        status.update(MARK)
    report.finding(report.console(), "WARN", MARK, MARK)
    captured = capsys.readouterr()
    assert MARK in captured.err
    assert captured.out.count(MARK) == 2


def test_no_module_reads_markup():
    """Structurally: consoles come from report.console() (markup off); nothing parses markup or escapes for it."""
    offenders = []
    for path in SRC.rglob("*.py"):
        source = path.read_text()
        rel = path.relative_to(SRC)
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ImportFrom) and node.module == "rich.markup":
                offenders.append(f"{rel}:{node.lineno} imports rich.markup")
            if isinstance(node, ast.Attribute) and node.attr in ("from_markup", "render_markup"):
                offenders.append(f"{rel}:{node.lineno} {node.attr}")
            if (
                isinstance(node, ast.keyword)
                and node.arg == "markup"
                and not (isinstance(node.value, ast.Constant) and node.value.value is False)
            ):
                offenders.append(f"{rel}:{node.lineno} markup=...")
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "Console"
                and str(rel) != "report.py"
            ):
                offenders.append(f"{rel}:{node.lineno} makes its own Console")
    assert not offenders, offenders
    assert report.console()._markup is False and report.console(stderr=True)._markup is False


# ------------------------------------------------------------------------------------------- real CLI runs


def test_explain_of_a_log_with_markup(tmp_path):
    log = tmp_path / "[bold]run[" / "].log"  # the path holds "[bold]run[/].log"
    log.parent.mkdir()
    log.write_text(f"[rank1]: RuntimeError: {MARK} Connection closed by peer\n")
    for args in ((str(log),), (str(log), "--json")):
        ran = cli("explain", *args, timeout=60)
        assert ran.code in (0, 1), ran.err
        assert "Traceback" not in ran.err and MARK in ran.out


def test_lint_of_a_script_whose_path_and_line_carry_markup(tmp_path):
    folder = tmp_path / "[" / "x.cc:78]"  # the path holds "[/x.cc:78]"
    folder.mkdir(parents=True)
    script = folder / "[bold]train.py"
    script.write_text(
        "import torch.distributed as dist\n"
        "dist.init_process_group('gloo')\n"
        f"if dist.get_rank() == 0:  # {MARK}\n"
        "    dist.all_reduce(x)\n"
    )
    ran = cli("lint", "--all", str(script), timeout=60)  # a collective under a rank test: opt-in
    assert "Traceback" not in ran.err and ran.code == 1, ran.err
    assert f"{script}:4:" in ran.out, ran.out
    data = cli("lint", str(script), "--json", timeout=60).json()
    assert data["script"] == str(script)


def test_launch_of_a_script_that_prints_markup_and_fails(tmp_path):
    script = tmp_path / "fails.py"
    script.write_text(f"import sys\nprint({MARK!r}, file=sys.stderr)\nraise RuntimeError({MARK!r})\n")
    ran = cli("launch", "--nproc-per-node", "1", str(script), timeout=120)
    assert ran.code == 1, ran.err
    assert "MarkupError" not in ran.out + ran.err
    assert f"RuntimeError: {MARK}" in ran.out  # the summary, and the rank's last lines, verbatim
    assert ran.out.count(MARK) >= 2


# ------------------------------------------------------------------------------------------- piped output


def _piped(*args: str) -> str:
    """The CLI's stdout with no terminal anywhere and no COLUMNS: as in `ddplab ... | less` or a CI log."""
    import os
    import subprocess

    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "FORCE_COLOR", "TTY_COMPATIBLE")}
    ran = subprocess.run(
        [sys.executable, "-m", "ddplab", *args],
        env={**env, "NO_COLOR": "1"},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "Traceback" not in ran.stderr, ran.stderr
    return ran.stdout


def test_piped_output_keeps_paths_and_sentences_whole_without_trailing_spaces(tmp_path):
    folder = tmp_path / ("a-folder-name-long-enough-that-the-path-alone-passes-eighty-columns-" * 2)
    folder.mkdir()
    script = folder / "train.py"
    script.write_text(
        "import torch.distributed as dist\n"
        "dist.init_process_group('gloo')\n"
        "if dist.get_rank() == 0:\n"
        "    dist.all_reduce(x)\n"
    )
    lint = _piped("lint", "--all", str(script))  # collective-in-rank-branch is opt-in
    finding = next(line for line in lint.splitlines() if line.startswith(f"{script}:4: error"))
    assert len(finding) > 120  # the path, the rule and the message on one line, as an editor's jump list wants
    log = tmp_path / "run.log"
    log.write_text("[rank1]: RuntimeError: Connection closed by peer [127.0.0.1]:29500\n")
    explain = _piped("explain", str(log))
    matches = json.loads(_piped("explain", str(log), "--json"))["matches"]
    for m in matches:  # each reference (URLs) and cause whole on its line
        assert (
            f"   see:   {m['reference']}" in explain.splitlines() and f"   cause: {m['cause']}" in explain.splitlines()
        )
    assert any(len(m["cause"]) > 80 for m in matches)
    env = _piped("env")  # a table: fits 80 columns, and its padding leaves no spaces at line ends
    for text in (lint, explain, env):
        assert all(line == line.rstrip() for line in text.splitlines()), text
    assert max(len(line) for line in env.splitlines() if not line.startswith(("verdict", "WARN", "  "))) <= 80
