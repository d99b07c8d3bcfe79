"""How `ddplab explain` reads logs as they arrive (issue 27 B, issue 32): launchers' rank prefixes, colours, CRLF,
interleaved ranks, restarts, a two-line paste, huge logs streamed, log folders, ddplab's own reports, bad input, and
the structured reading when no rule knows the error.

Every log here is made from a real failing run (torchrun or `ddplab launch` of a script in tests/scripts/ that fails),
then shaped the way another launcher or a terminal would show it. crash_ddp.py's console and ddplab's own reports are
made at every run; the other consoles, which only explain reads, were made the same way by tools/make_test_logs.py
and are kept in tests/logs/made/ (a log whose script changed since is refused: make it again).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest
from conftest import cli, kill_tree
from inproc import here

from ddplab.explain import logread
from ddplab.explain.logread import Prefilter, canonical, read_path, required_literals
from ddplab.explain.matcher import explain_log, explain_text, parse_root_cause
from ddplab.explain.rules import RULES
from ddplab.ports import free_port

SCRIPTS = Path(__file__).parents[1] / "scripts"
MADE = Path(__file__).parents[1] / "logs" / "made"
sys.path.insert(0, str(Path(__file__).parents[2] / "tools"))  # make_test_logs: which script made which log
TORCH_PREFIX = re.compile(r"^(?:\[default(\d+)\]:)?(?:\[rank(\d+)\]:)? ?")


def run_torchrun(script: str, tmp: Path, *options: str, deadline_s: float = 170) -> str:
    """The console of a real 2-rank torchrun run (--tee 3: every rank's lines with `[defaultN]:`), which fails."""
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        "2",
        "--master-port",
        str(free_port()),
        "--log-dir",
        str(tmp),
        "--tee",
        "3",
        *options,
        str(SCRIPTS / script),
    ]
    tag = uuid.uuid4().hex  # every process of this run inherits it: none may survive the run
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "", "DDPLAB_TEST_TAG": tag}
    for var in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(var, None)
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, start_new_session=True
    )
    try:
        out, _ = proc.communicate(timeout=deadline_s)
    except subprocess.TimeoutExpired:
        kill_tree(proc.pid)
        raise AssertionError(f"{script} overstayed {deadline_s}s")
    deadline = time.monotonic() + 5
    while (left := tagged(tag)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not left, f"processes left behind: {left}"
    assert proc.returncode != 0, out[-2000:]
    return out


def tagged(tag: str) -> list[int]:
    found = []
    for p in psutil.process_iter():
        try:
            if p.environ().get("DDPLAB_TEST_TAG") == tag and p.status() != psutil.STATUS_ZOMBIE:
                found.append(p.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def made_console(name: str) -> str:
    """The console of a real run kept in tests/logs/made/NAME.log (tools/make_test_logs.py), without its header;
    refused if the script it ran has changed since (its line numbers and texts would no longer be the script's)."""
    from make_test_logs import LOGS, script_sha256

    header, _, console = (MADE / f"{name}.log").read_text().partition("\n# torch: ")
    made_from = dict(line[2:].split(": ", 1) for line in header.splitlines())["script-sha256"]
    assert made_from == script_sha256(LOGS[name][0]), (
        f"tests/scripts/{LOGS[name][0]} changed since tests/logs/made/{name}.log was made: "
        f"python tools/make_test_logs.py {name}"
    )
    return console.partition("\n")[2]


def test_every_made_log_is_its_scripts_current_run():
    from make_test_logs import LOGS

    assert sorted(p.stem for p in MADE.glob("*.log")) == sorted(LOGS)
    for name, (_, _, must_hold) in LOGS.items():
        assert must_hold in made_console(name), name


@pytest.fixture(scope="module")
def crash_console(tmp_path_factory) -> str:
    """tests/scripts/crash_ddp.py: rank 1 loads a 'module.'-prefixed checkpoint and dies; rank 0's barrier fails."""
    return run_torchrun("crash_ddp.py", tmp_path_factory.mktemp("crash"))


def rank_lines(console: str, failed_first: int = 1) -> list[tuple[int, str]]:
    """(rank, text without torch's prefixes) for each line a rank printed, the rank that failed first's lines first:
    it printed them all before the others could fail (torchrun's tee polls each rank's file in turn, so its console
    may interleave lines that arrived close together)."""
    out = []
    for line in console.splitlines():
        m = TORCH_PREFIX.match(line)
        if m and (m.group(1) or m.group(2)):
            out.append((int(m.group(2) or m.group(1)), line[m.end() :]))
    return sorted(out, key=lambda pair: pair[0] != failed_first)


def explain_file(tmp_path: Path, text: str | bytes, name: str = "run.log"):
    path = tmp_path / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return explain_log(read_path(str(path)))


def assert_rank1_checkpoint(e, summary: bool) -> None:
    assert e.matches and e.matches[0].rule == "module-prefix", [m.rule for m in e.matches]
    assert e.matches[0].rank == 1
    assert e.reading.rank == 1 and e.reading.exception.startswith("RuntimeError: Error(s) in loading state_dict")
    assert e.reading.user_frame is not None and e.reading.user_frame.file.endswith("crash_ddp.py")
    assert e.reading.user_frame.line == 18
    if summary:
        assert e.root_cause is not None and e.root_cause.rank == 1
    peer = [m for m in e.matches if m.rule == "peer-closed"]
    assert peer and peer[0].rank == 0, "rank 0's lost connection is attributed to rank 0"


# ----------------------------------------------------------------------------------------------- prefixes


LAUNCHER_FORMS = {
    "slurm-label": lambda rank, text: f"{rank}: {text}",  # srun --label, a task per rank
    "lightning": lambda rank, text: f"[rank: {rank}] {text}",
    "deepspeed": lambda rank, text: f"[Rank {rank}] {text}",
    "openmpi": lambda rank, text: f"[1,{rank}]<stderr>:{text}",
    "torch-global": lambda rank, text: f"[rank{rank}]:{text}",
}


@pytest.mark.parametrize("form", list(LAUNCHER_FORMS))
def test_every_launchers_rank_prefix_is_read(crash_console, tmp_path, form):
    made = "\n".join(LAUNCHER_FORMS[form](rank, text) for rank, text in rank_lines(crash_console))
    assert_rank1_checkpoint(explain_file(tmp_path, made), summary=False)


def findings(e) -> list:
    return [(m.rule, m.rank, m.line) for m in e.matches]


def test_srun_around_torchrun_keeps_torchs_own_rank(crash_console, tmp_path):
    """srun --label in front of torchrun: the label is the node's task (0), the rank is torch's prefix inside."""
    made = "\n".join(f"0: {line}" for line in crash_console.splitlines())
    plain = explain_file(tmp_path, crash_console, "plain.log")
    labelled = explain_file(tmp_path, made)
    assert findings(labelled) == findings(plain) and labelled.reading == plain.reading
    assert {("module-prefix", 1), ("peer-closed", 0)} <= {(m.rule, m.rank) for m in labelled.matches}


def test_a_harness_echo_of_the_childs_streams_is_read_through(crash_console, tmp_path):
    """accelerate's and transformers' execute_subprocess_async (`accelerate test`) echo each line of the child as
    print(label, line.rstrip()) with label "stderr:" / "stdout:": the same findings and reading as the plain run."""
    import contextlib
    import io

    echoed = io.StringIO()
    with contextlib.redirect_stdout(echoed):
        for line in crash_console.splitlines():
            print("stderr:", line.rstrip())
    plain = explain_file(tmp_path, crash_console, "plain.log")
    labelled = explain_file(tmp_path, echoed.getvalue())
    assert findings(labelled) == findings(plain) and labelled.reading == plain.reading
    assert_rank1_checkpoint(labelled, summary=True)


def test_colours_crlf_and_progress_bars(crash_console, tmp_path):
    coloured = re.sub(r"(RuntimeError|Traceback|Unexpected)", "\x1b[1;31m\\1\x1b[0m", crash_console)
    made = coloured.replace("\n", "\r\n")
    plain = explain_file(tmp_path, crash_console, "plain.log")
    e = explain_file(tmp_path, made)
    assert findings(e) == findings(plain) and e.reading == plain.reading
    assert {("module-prefix", 1), ("peer-closed", 0)} <= {(m.rule, m.rank) for m in e.matches}
    assert not any("\x1b" in m.text or "\r" in m.text for m in e.matches)
    # a progress bar's carriage returns before the failure: its states are lines of their own
    bar = explain_file(
        tmp_path,
        "epoch 1\r 10%|#   |\r 50%|##  |\r" + "\n".join(f"[rank{k}]: {t}" for k, t in rank_lines(crash_console)),
    )
    assert_rank1_checkpoint(bar, summary=False)


def test_interleaved_ranks_line_by_line(crash_console, tmp_path):
    """Both ranks' tracebacks woven line by line: each line still belongs to its rank."""
    lines = rank_lines(crash_console)
    zero = [f"[rank0]: {t}" for r, t in lines if r == 0]
    one = [f"[rank1]: {t}" for r, t in lines if r == 1]
    woven = [line for pair in zip(one, zero) for line in pair] + one[len(zero) :] + zero[len(one) :]
    assert_rank1_checkpoint(explain_file(tmp_path, "\n".join(woven)), summary=False)


def test_a_truncated_two_line_paste(crash_console, tmp_path):
    error = next(t for r, t in rank_lines(crash_console) if r == 1 and t.startswith("RuntimeError"))
    keys = next(t for r, t in rank_lines(crash_console) if r == 1 and "Unexpected key" in t)
    e = explain_file(tmp_path, error[:40] + "\n" + keys[:52])  # both lines cut short, as a hurried paste
    assert e.matches[0].rule == "module-prefix"
    assert e.reading.exception.startswith("RuntimeError: Error(s) in loading")


def test_several_elastic_attempts_in_one_log(tmp_path):
    console = made_console("crash_restart")  # torchrun --max-restarts 1: two attempts of 2 ranks
    e = explain_file(tmp_path, console)
    assert e.reading.attempts == 2, console[-3000:]
    assert ("module-prefix", 1) in {(m.rule, m.rank) for m in e.matches}
    assert e.root_cause is not None and e.reading.rank == e.root_cause.rank  # the last attempt's summary


def test_canonical_prefixes():
    assert canonical("[default1]:[rank1]: x") == "[default1]:[rank1]: x"
    assert canonical("[1,3]<stdout>:hello") == "[rank3]: hello"
    assert canonical("3: hello") == "3: hello"  # not a label unless most lines carry one
    assert canonical("3: hello", slurm=True) == "[rank3]: hello"
    assert canonical(" 0: [default2]:[rank10]: x", slurm="nodes") == "[default2]:[rank10]: x"
    assert canonical("0: torchrun's own line", slurm="nodes") == "torchrun's own line"


# ----------------------------------------------------------------------------------------------- huge logs


def test_every_rule_pattern_has_a_literal_the_prefilter_finds():
    """A pattern without one is still searched (in full, slowly): this keeps the fast path complete."""
    missing = [(r.id, p) for r in RULES for p in r.patterns if not required_literals(p)]
    assert not missing, f"patterns the prefilter cannot narrow (searched in full on every chunk): {missing}"
    assert required_literals(r"Connection (?:closed|reset) by peer") == {"Connection "}
    assert required_literals(r"(?:NCCL|nccl) error") in ({"NCCL", "nccl"}, {" error"})
    assert required_literals(r"\d+") is None


def test_prefilter_finds_every_line_with_a_literal():
    lines = [b"step %d loss 0.1" % i for i in range(4000)]
    lines[7] = b"an Error here"
    lines[3001] = b"x" * 3 + b"Connection closed by peer"
    lines[3999] = b"tail Err"  # a literal cut short is no hit
    buf = b"\n".join(lines) + b"\n"
    found = Prefilter({"Error", "Connection closed"}).lines(buf)
    assert [buf.count(b"\n", 0, s) for s in found] == [7, 3001]


@pytest.mark.parametrize("chunk", [4096, 1 << 16])
def test_streamed_log_explains_like_the_whole_log(crash_console, tmp_path, monkeypatch, chunk):
    """A log far larger than a chunk (step lines, then the real failure): the streamed path, with no head or tail
    kept, names what the whole-file path names, at the same line numbers."""
    steps = "".join(f"[default{i % 2}]:step {i} | loss {1 / (i + 1):.4f} | 12.1 ms/step\n" for i in range(20_000))
    text = steps + crash_console
    whole = explain_file(tmp_path, text)
    monkeypatch.setattr(logread, "STREAM_ABOVE", 0)
    monkeypatch.setattr(logread, "CHUNK", chunk)
    monkeypatch.setattr(logread, "HEAD_LINES", 0)
    monkeypatch.setattr(logread, "TAIL_LINES", 0)
    streamed = explain_file(tmp_path, text)
    assert streamed.lines == whole.lines == text.count("\n")
    assert [(m.rule, m.line) for m in streamed.matches] == [(m.rule, m.line) for m in whole.matches]
    assert streamed.reading == whole.reading
    assert streamed.matches[0].line > 20_000


def test_every_corpus_log_streamed_explains_like_read_whole(tmp_path, monkeypatch):
    """The 97 real logs of tests/logs/, streamed in small chunks (windows cross chunk boundaries, multi-line rules
    such as syncbn-single-process span them) with no head or tail kept: the same findings, lines and reading. Each
    log is read whole once and streamed at two chunk sizes."""
    from explaincase import read_quoted
    from test_explain_corpus import CORPUS

    monkeypatch.setattr(logread, "HEAD_LINES", 0)
    monkeypatch.setattr(logread, "TAIL_LINES", 0)
    for path in CORPUS:
        log = _write(tmp_path / path.name, read_quoted(path)[1])
        monkeypatch.setattr(logread, "STREAM_ABOVE", 1 << 30)
        whole = explain_log(read_path(str(log)))
        monkeypatch.setattr(logread, "STREAM_ABOVE", 0)
        for chunk in (3000, 1 << 16):
            monkeypatch.setattr(logread, "CHUNK", chunk)
            streamed = explain_log(read_path(str(log)))
            assert findings(streamed) == findings(whole), (path.name, chunk)
            assert streamed.reading == whole.reading, (path.name, chunk)


def test_streaming_keeps_memory_bounded_when_every_line_is_a_candidate(tmp_path, monkeypatch):
    monkeypatch.setattr(logread, "STREAM_ABOVE", 0)
    monkeypatch.setattr(logread, "CHUNK", 1 << 16)
    monkeypatch.setattr(logread, "CAP_LINES", 1000)
    text = "".join(f"RuntimeError: step {i} failed\n" for i in range(30_000))
    log = read_path(str(_write(tmp_path / "errors.log", text)))
    assert len(log.text.splitlines()) <= 2 * 1000 + logread.TAIL_LINES
    assert log.skipped > 0 and log.lines_total == 30_000


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


# ----------------------------------------------------------------------------------------------- bad input


def test_bad_input_is_one_line_that_says_which(tmp_path):
    (tmp_path / "empty.log").write_bytes(b"")
    (tmp_path / "blank.log").write_text("\n  \n")
    (tmp_path / "model.pt").write_bytes(b"PK\x03\x04\x00\x00binary\x00" * 100)
    (tmp_path / "nologs").mkdir()
    (tmp_path / "nologs" / "model.pt").write_bytes(b"\x00")
    cases = {
        "empty.log": "is empty",
        "blank.log": "holds only blank lines",
        "model.pt": "is a binary file",
        "nologs": "is a folder with no logs",
        "missing.log": "no such file or folder",
    }
    for name, says in cases.items():
        ran = here("explain", str(tmp_path / name))
        assert ran.code == 2, (name, ran.out, ran.err)
        assert says in ran.err and len(ran.err.strip().splitlines()) == 1, (name, ran.err)
        assert "Traceback" not in ran.err
    piped = here("explain", "-", stdin="")
    assert piped.code == 2 and "<stdin>: is empty" in piped.err


def test_unreadable_file_is_named_as_such(tmp_path):
    """A file that exists but cannot be read: mode 000 for a normal user; as root (who reads anything) a file the
    kernel refuses to read: /proc/self/mem at offset 0 (EIO)."""
    log = tmp_path / "secret.log"
    log.write_text("RuntimeError: x\n")
    log.chmod(0)
    target = "/proc/self/mem" if os.geteuid() == 0 else str(log)
    ran = here("explain", target)
    assert ran.code == 2, (ran.out, ran.err)
    assert f"{target}: cannot read it (" in ran.err and len(ran.err.strip().splitlines()) == 1, ran.err
    assert "Traceback" not in ran.err
    if os.geteuid() != 0:
        assert "permission denied" in ran.err


# ----------------------------------------------------------------------------------------------- no rule matches


def test_a_plain_python_error_is_read_when_no_rule_knows_it(tmp_path):
    console = made_console("name_error")
    e = explain_file(tmp_path, console)
    assert not any(m.root_cause and not m.generic for m in e.matches), "no rule is about a NameError"
    r = e.reading
    assert r.rank == 1 and r.exception == "NameError: name 'compute_accuracy' is not defined"
    assert r.user_code_error and r.layer.startswith("Python")
    assert r.user_frame.file.endswith("name_error.py") and r.user_frame.line == 11
    assert r.user_frame.function == "evaluate" and "compute_accuracy" in r.user_frame.code
    assert "exit code 1" in r.how
    # the same reading from the lines alone, with no torchrun summary and no rule at all
    alone = explain_text("\n".join(f"[rank{k}]: {t}" for k, t in rank_lines(console) if k == 1))
    assert not alone.matches and alone.reading.user_frame.line == 11 and alone.reading.user_code_error
    ran = here("explain", str(_write(tmp_path / "rank1.log", "\n".join(t for k, t in rank_lines(console) if k == 1))))
    assert ran.code == 1
    assert "a plain Python error in your own code: NameError" in ran.out
    assert "name_error.py:11 in evaluate" in ran.out


def tied_summary(script: str, first: int, other: int, exitcode: int = 1) -> str:
    """torchrun's own failure summary (torch's ChildFailedError) when both ranks exited in the same second: it orders
    failures by whole-second timestamps, and a tie goes to the rank listed first."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure

    failures = {
        rank: ProcessFailure(local_rank=rank, pid=1000 + rank, exitcode=exitcode, error_file="<N/A>")
        for rank in (first, other)
    }
    for failure in failures.values():
        failure.timestamp = 1764800000
    return ChildFailedError(script, failures).format_msg()


def test_a_tie_in_torchruns_summary_goes_to_the_rank_with_its_own_error(tmp_path):
    """Seen in CI: rank 1 raised a NameError, rank 0 then lost its peer in a barrier; both exited within one second
    and torchrun named rank 0 first. The rank whose error is its own failed first."""
    console = made_console("name_error")
    ranks = "\n".join(line for line in console.splitlines() if line.startswith("[default"))
    e = explain_file(tmp_path, ranks + "\n" + tied_summary("name_error.py", first=0, other=1))
    assert e.root_cause.rank == 1 and e.reading.rank == 1, (e.root_cause, ranks)
    assert e.reading.exception == "NameError: name 'compute_accuracy' is not defined"
    assert ("peer-closed", 0) in {(m.rule, m.rank) for m in e.matches if not m.root_cause}
    # a second apart, torchrun's order stands (the ranks' own order is its word, not a guess)
    apart = tied_summary("name_error.py", first=0, other=1).replace("time      : ", "time      : X", 1)
    assert explain_file(tmp_path, ranks + "\n" + apart).root_cause.rank == 0


def test_the_rank_that_failed_first_lost_its_peer(tmp_path):
    """Issue 32: rank 0 alone evaluates through the DDP model (tests/scripts/rank0_eval.py) and is the root cause
    with gloo's 'Connection closed by peer': explain names rank 0's evaluation line, not 'find the rank that failed
    first' alone."""
    console = made_console("rank0_eval")
    e = explain_file(tmp_path, console)
    assert e.root_cause.rank == 0 and e.reading.rank == 0
    assert e.reading.user_frame.file.endswith("rank0_eval.py") and e.reading.user_frame.line == 14
    ran = here("explain", str(tmp_path / "run.log"))
    text = " ".join(ran.out.split())
    assert "rank 0 failed first, and what it reports is a lost peer" in text, ran.out
    assert "rank0_eval.py:14 in <module>" in text


def test_a_peer_that_aborted_at_exit_is_not_the_rank_that_failed_first(tmp_path):
    """Seen in CI with rank0_eval.py on a busy machine, made certain here (tests/scripts/rank0_collective_peer_aborts.py):
    rank 1 left after its work and aborted at exit (SIGABRT, no error), rank 0 raised the lost peer and was still
    leaving when torchrun's SIGTERM came, so torchrun's summary names rank 1. Rank 0's uncaught error is its own.
    (The abort at exit is nearly certain, not quite: the kept log is a run where it happened.)"""
    console = made_console("rank0_collective_peer_aborts")
    torchruns = parse_root_cause(console.split("\n"))
    assert (torchruns.rank, torchruns.signal) == (1, "SIGABRT"), console[-3000:]
    e = explain_file(tmp_path, console)
    assert (e.root_cause.rank, e.root_cause.signal) == (0, "SIGTERM") and e.reading.rank == 0, console[-3000:]
    assert e.reading.user_frame.file.endswith("rank0_collective_peer_aborts.py") and e.reading.user_frame.line == 20
    assert "leaving on the uncaught error" in e.root_cause.meaning
    ran = here("explain", str(tmp_path / "run.log"))
    assert "rank 0 failed first, and what it reports is a lost peer" in " ".join(ran.out.split()), ran.out


def test_the_layer_and_the_setting_that_makes_it_say_more():
    """NCCL's layer from a paste; gloo's (its size check, made for real) is read from the one real run of
    tests/scripts/gloo_size_mismatch.py, in test_explain.py::test_gloo_size_mismatch_is_the_root_cause_not_the_peers_reset."""
    paste = "RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled cuda error, NCCL version 2.19.3"
    assert explain_text(paste).reading.layer == "NCCL" and "NCCL_DEBUG=INFO" in explain_text(paste).reading.more


# ----------------------------------------------------------------------------------------------- ddplab's own output


def launch(script: Path, *flags: str) -> tuple[subprocess.CompletedProcess, Path | None]:
    """`ddplab launch --nproc 2 SCRIPT` for real; its output and the log folder it names (any folder it prints)."""
    # its own port: torchrun's default 29500 may be taken by a parallel test between the preflight and the bind
    ran = cli("launch", "--nproc", "2", "--master-port", str(free_port()), *flags, str(script), timeout=240)
    text = ran.out + ran.err
    folders = [Path(p) for p in re.findall(r"(/[^\s:;,()'\"]+)", text) if Path(p).is_dir() and Path(p) != Path("/")]
    folders = [f for f in folders if list(f.rglob("*.log"))]
    return ran, folders[0] if folders else None


def test_the_log_folder_launch_prints_is_explained(tmp_path, no_leftover_workers):
    # launch lints the script itself first (a SyntaxError there is bad input); one in a module it imports is not
    (tmp_path / "helper.py").write_text("def lr():\n    return = 0.1\n")
    script = tmp_path / "broken.py"
    # rank 0 waits outside any collective, so it cannot fail first by itself (torchrun ends it with SIGTERM)
    script.write_text(
        "import time\nimport torch.distributed as dist\ndist.init_process_group('gloo')\n"
        "if dist.get_rank() == 1:\n    import helper\ntime.sleep(120)\n"
    )
    ran, folder = launch(script)
    try:
        assert ran.code == 1 and folder is not None, ran.out + ran.err
        assert "a plain Python error in your own code: SyntaxError" in ran.out + ran.err
        explained = here("explain", str(folder), "--json")
        assert explained.code in (0, 1), explained.err
        data = json.loads(explained.out)
        assert data["reading"]["exception_type"] == "SyntaxError" and data["reading"]["user_code_error"]
        assert data["reading"]["user_frame"]["file"].endswith("helper.py")
        assert data["reading"]["user_frame"]["line"] == 2
        crash, crash_folder = launch(SCRIPTS / "crash_ddp.py")
        assert crash_folder is not None, crash.out + crash.err
        shown = here("explain", str(crash_folder))
        assert shown.code == 0, shown.err
        # (which rank torchrun names first is a race here: both ranks exit 1 within the same second)
        found = [line for line in shown.out.splitlines() if "[module-prefix]" in line]
        assert found and "rank 1" in found[0] and "attempt_0/1/stderr.log" in found[0], shown.out
    finally:
        for f in (folder, locals().get("crash_folder")):
            if f is not None and str(f).startswith(("/tmp/", str(tmp_path))):
                shutil.rmtree(f, ignore_errors=True)


def test_ddplab_own_timeout_reports_are_explained(tmp_path, no_leftover_workers):
    check = cli("check", "--timeout", "5", env={"DDPLAB_FAULT": "hang:1:collectives.all_reduce"}, timeout=240)
    assert check.code == 3, check.out + check.err
    hung, folder = launch(SCRIPTS / "hang_skip.py", "--hang-timeout", "5")
    try:
        assert hung.code == 3, hung.out + hung.err
        for name, report in (("check", check.out + check.err), ("launch", hung.out + hung.err)):
            ran = here("explain", str(_write(tmp_path / f"{name}.txt", report)), "--json")
            assert ran.code == 0, (name, ran.out, ran.err)
            first = json.loads(ran.out)["matches"][0]
            assert first["rule"] == "ddplab-hang" and f"ddplab {name}" in first["title"], first
            assert "rank 1" in first["cause"], first
    finally:
        if folder is not None and str(folder).startswith("/tmp/"):
            shutil.rmtree(folder, ignore_errors=True)


def test_ranking_by_mechanism_when_a_rule_says(monkeypatch):
    """A rule's `mechanism` puts the finding that explains the others first; without it the order is unchanged."""
    from dataclasses import replace

    from ddplab.explain import matcher as explain_module

    log = (
        "[rank0]: RuntimeError: [pair.cc:553] Connection closed by peer [127.0.0.1]:1\n"
        "[rank1]: RuntimeError: Distributed package doesn't have NCCL built in\n"
    )
    before = [m.rule for m in explain_text(log).matches]
    assert before == ["nccl-not-built", "peer-closed"]
    compiled = []
    for rule, patterns in explain_module.COMPILED:
        kind = "difference" if rule.id == "peer-closed" else rule.mechanism
        compiled.append((replace(rule, mechanism=kind), patterns))
    monkeypatch.setattr(explain_module, "COMPILED", compiled)
    after = explain_text(log).matches
    assert [m.rule for m in after] == ["peer-closed", "nccl-not-built"]
    assert after[0].mechanism == "difference"
