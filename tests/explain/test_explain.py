"""ddplab explain: every rule against real error text.

Errors a CPU can produce are produced here, by running the failing code (in this process, or in a real 2-rank
torchrun group); GPU-only errors are quoted from the public reports cited in tests/logs/*.log.
"""

from __future__ import annotations

import datetime
import io
import json
import os
import socket
import subprocess
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from conftest import cli, kill_tree
from explaincase import first_rule, read_quoted
from torch import nn

from ddplab.explain.matcher import explain_text
from ddplab.explain.rules import BY_ID, RULES
from ddplab.ports import free_port

HERE = Path(__file__).parents[1]
LOGS = HERE / "logs"


def raised(make_error) -> str:
    """The traceback `make_error()` raises, as a log shows it."""
    try:
        make_error()
    except BaseException:
        return traceback.format_exc()
    raise AssertionError(f"{make_error.__name__} raised nothing")


# ----------------------------------------------------------------------------------------------- in this process


def _nccl_on_cpu():
    dist.init_process_group("nccl", store=dist.HashStore(), rank=0, world_size=1)


def _collective_without_group():
    dist.all_reduce(torch.ones(1))


def _init_twice():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    finally:
        dist.destroy_process_group()


def _no_launcher(monkeypatch):
    for var in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK"):
        monkeypatch.delenv(var, raising=False)
    return lambda: dist.init_process_group("gloo")


def _rank_beyond_world():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=2, world_size=2)


def _ddplab_rank_beyond_world():
    from ddplab.dist import read_launcher_env

    read_launcher_env({"RANK": "2", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"})


def _store_missing_a_client():
    dist.TCPStore("127.0.0.1", 0, 2, True, timeout=datetime.timedelta(seconds=1), wait_for_workers=True)


def _group_missing_rank1():
    store = dist.TCPStore("127.0.0.1", 0, 2, True, timeout=datetime.timedelta(seconds=1), wait_for_workers=False)
    dist.init_process_group("gloo", store=store, rank=0, world_size=2, timeout=datetime.timedelta(seconds=1))


def _port_taken():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        dist.TCPStore("127.0.0.1", s.getsockname()[1], 1, True, timeout=datetime.timedelta(seconds=5))


def _nobody_listening():
    dist.TCPStore("127.0.0.1", free_port(), 2, False, timeout=datetime.timedelta(seconds=1))


class _TwoHeads(nn.Module):
    def __init__(self):
        super().__init__()
        self.used, self.unused = nn.Linear(2, 2), nn.Linear(2, 2)

    def forward(self, x):
        return self.used(x)


def _unused_parameters():
    model = nn.parallel.DistributedDataParallel(_TwoHeads())
    for _ in range(2):
        model(torch.randn(3, 2)).sum().backward()


def _device_ids_on_cpu():
    nn.parallel.DistributedDataParallel(nn.Linear(2, 2), device_ids=[0])


def _load_with_prefix(prefix):
    def load():
        state = {prefix + k: v for k, v in nn.Linear(2, 2).state_dict().items()}
        nn.Linear(2, 2).load_state_dict(state)

    return load


def _ddp_checkpoint_into_plain_model():
    model = nn.parallel.DistributedDataParallel(nn.Linear(2, 2))
    nn.Linear(2, 2).load_state_dict(model.state_dict())


@dataclass
class TrainConfig:
    lr: float = 0.1


def _pickled_object_checkpoint():
    buffer = io.BytesIO()
    torch.save({"model": nn.Linear(2, 2).state_dict(), "config": TrainConfig()}, buffer)
    buffer.seek(0)
    torch.load(buffer)


def _cuda_on_cpu_build():
    torch.zeros(1).cuda()


no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine where CUDA is absent")
no_nccl = pytest.mark.skipif(dist.is_nccl_available(), reason="needs a torch build without NCCL")

IN_PROCESS = [
    pytest.param("nccl-not-built", _nccl_on_cpu, marks=no_nccl, id="nccl-not-built"),
    pytest.param("pg-not-initialized", _collective_without_group, id="pg-not-initialized"),
    pytest.param("pg-initialized-twice", _init_twice, id="pg-initialized-twice"),
    pytest.param("rank-out-of-range", _rank_beyond_world, id="rank-out-of-range-gloo"),
    pytest.param("rank-out-of-range", _ddplab_rank_beyond_world, id="rank-out-of-range-ddplab"),
    pytest.param("rendezvous-incomplete", _store_missing_a_client, id="rendezvous-incomplete-store"),
    pytest.param("rendezvous-incomplete", _group_missing_rank1, id="rendezvous-incomplete-group"),
    pytest.param("port-in-use", _port_taken, id="port-in-use"),
    pytest.param("master-unreachable", _nobody_listening, id="master-unreachable"),
    pytest.param("module-prefix", _load_with_prefix("module."), id="module-prefix"),
    pytest.param("compile-prefix", _load_with_prefix("_orig_mod."), id="compile-prefix"),
    pytest.param("weights-only-load", _pickled_object_checkpoint, id="weights-only-load"),
    pytest.param("cuda-not-compiled", _cuda_on_cpu_build, marks=no_cuda, id="cuda-not-compiled"),
]
IN_GROUP = [
    pytest.param("unused-parameters", _unused_parameters, id="unused-parameters"),
    pytest.param("ddp-device-ids-cpu", _device_ids_on_cpu, id="ddp-device-ids-cpu"),
    pytest.param("module-prefix", _ddp_checkpoint_into_plain_model, id="module-prefix-from-ddp"),
]


@pytest.mark.parametrize("rule, make_error", IN_PROCESS)
def test_rule_matches_the_error_it_is_for(rule, make_error):
    text = raised(make_error)
    assert first_rule(text) == rule, text[-1500:]


def test_launcher_env_missing(monkeypatch):
    text = raised(_no_launcher(monkeypatch))
    assert first_rule(text) == "launcher-env-missing", text[-1500:]


@pytest.mark.parametrize("rule, make_error", IN_GROUP)
def test_rule_matches_the_ddp_error_it_is_for(rule, make_error, one_process_group):
    text = raised(make_error)
    assert first_rule(text) == rule, text[-1500:]


# ----------------------------------------------------------------------------------------------- 2 real ranks

MULTI_RANK = ["syncbn-cpu", "ddp-model-mismatch", "collective-timeout", "peer-closed", "worker-killed"]
TORCHRUN_RUNS = ["gloo-size-mismatch", "worker-abort", "worker-exception"]  # the two torchrun_2_ranks tests


@pytest.fixture(scope="module")
def torchrun_log(tmp_path_factory) -> str:
    """The console log of a real 2-rank torchrun run of tests/scripts/explain_failures.py (tee'd, as users see it)."""
    logs = tmp_path_factory.mktemp("torchrun")
    out = torchrun_2_ranks("explain_failures.py", "--log-dir", str(logs), "--redirects", "3", "--tee", "3")
    (logs / "console.log").write_text(out)
    return out


def test_multi_rank_errors_each_match_their_rule(torchrun_log):
    e = explain_text(torchrun_log)
    found = {m.rule: m for m in e.matches}
    assert set(MULTI_RANK) <= set(found), (sorted(found), torchrun_log[-3000:])
    assert "SyncBatchNorm expected input tensor to be on GPU" in found["syncbn-cpu"].text
    assert "DDP expects same model across all ranks" in found["ddp-model-mismatch"].text
    assert "Timed out waiting 2000ms" in found["collective-timeout"].text
    assert "Connection closed by peer" in found["peer-closed"].text
    assert found["peer-closed"].rank == 0 and found["peer-closed"].consequence


def test_root_cause_comes_first_then_order_of_appearance(torchrun_log):
    e = explain_text(torchrun_log)
    assert e.root_cause is not None and e.root_cause.rank == 1 and e.root_cause.exitcode == -9
    assert e.root_cause.signal == "SIGKILL"
    assert e.matches[0].rule == "worker-killed" and e.matches[0].root_cause
    rest = e.matches[1:]
    specific = [m for m in rest if not BY_ID[m.rule].covers]  # family rules (a whole layer) come after these
    assert [m.line for m in specific] == sorted(m.line for m in specific)
    assert rest[: len(specific)] == specific
    assert not any(m.root_cause for m in rest)


def test_cli_explains_a_log_file_and_stdin(torchrun_log, tmp_path):
    log = tmp_path / "train.log"
    log.write_text(torchrun_log)
    ran = cli("explain", str(log))
    assert ran.code == 0, ran.err
    assert ran.out.index("root cause: rank 1") < ran.out.index("[worker-killed]") < ran.out.index("[peer-closed]")
    assert "fix:" in ran.out and "https://" in ran.out

    piped = subprocess.run(
        [sys.executable, "-m", "ddplab", "explain", "-", "--json"],
        input=torchrun_log,
        text=True,
        capture_output=True,
        timeout=60,
        env={**os.environ, "NO_COLOR": "1"},
    )
    assert piped.returncode == 0, piped.stderr
    data = json.loads(piped.stdout)
    assert data["matched"] and data["root_cause"]["rank"] == 1
    assert data["matches"][0]["rule"] == "worker-killed"


def torchrun_2_ranks(script: str, *options: str) -> str:
    """The console log of a real 2-rank torchrun run of tests/scripts/SCRIPT (torchrun OPTIONS first), which must
    fail."""
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        "2",
        "--master-port",
        str(free_port()),
        *options,
        str(HERE / "scripts" / script),
    ]
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        kill_tree(proc.pid)
        raise AssertionError(f"the torchrun run of {script} overstayed 120s")
    assert proc.returncode != 0, out[-3000:]
    return out


def test_gloo_size_mismatch_is_the_root_cause_not_the_peers_reset(no_leftover_workers):
    """The issue's case: rank 1 aborts with gloo's size mismatch; rank 0's "connection reset" is its consequence."""
    log = torchrun_2_ranks("gloo_size_mismatch.py")
    e = explain_text(log)
    assert e.root_cause is not None and e.root_cause.exitcode == -6, log[-3000:]
    assert e.matches[0].rule == "gloo-size-mismatch" and e.matches[0].root_cause, [m.rule for m in e.matches]
    assert "Received data size doesn't match expected size" in e.root_cause.error
    assert "SIGABRT" in e.root_cause.meaning
    rest = {m.rule: m for m in e.matches[1:]}
    assert rest["worker-abort"].generic
    # Rank 0 reports the reset unless the agent's SIGTERM (sent the moment rank 1 aborted) reaches it first, which a
    # loaded machine makes likely: either way rank 0's end is a consequence, never the root cause.
    ended = rest.get("peer-closed") or rest["worker-terminated"]
    assert not ended.root_cause and (ended.consequence or ended.generic), list(rest)
    # the layer that printed it, and the setting that makes it say more (test_explain_read.py's reading)
    assert e.reading.layer == "gloo" and "TORCH_DISTRIBUTED_DEBUG=DETAIL" in e.reading.more


def test_isend_without_wait_is_explained_as_a_vanished_peer(no_leftover_workers):
    log = torchrun_2_ranks("isend_no_wait.py")
    e = explain_text(log)
    assert e.root_cause is not None and e.root_cause.rank == 1 and e.root_cause.exitcode == 1, log[-3000:]
    first = e.matches[0]
    assert first.rule == "peer-closed" and first.root_cause and "wait()" in first.cause
    assert [m.rule for m in e.matches if not BY_ID[m.rule].covers][1:] == ["worker-exception"]  # then families


# ----------------------------------------------------------------------------------------------- GPU-only

needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@needs_gpu
def test_gpu_errors_made_on_this_gpu(tmp_path):
    """Where a GPU is present, the GPU-only rules are checked against errors made here too, not only quoted."""
    oom = raised(lambda: torch.empty(1 << 50, dtype=torch.uint8, device="cuda"))
    assert first_rule(oom) == "cuda-oom", oom[-800:]
    ordinal = raised(lambda: torch.cuda.set_device(torch.cuda.device_count()))
    assert first_rule(ordinal) == "invalid-device-ordinal", ordinal[-800:]
    # A device-side assert spoils the CUDA context of the process that triggers it: make it in a child.
    child = subprocess.run(
        [
            sys.executable,
            "-c",
            "import torch; t = torch.zeros(2, device='cuda'); "
            "t[torch.tensor([5], device='cuda')] = 1; torch.cuda.synchronize()",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode != 0
    assert first_rule(child.stderr) == "device-side-assert", child.stderr[-800:]


# ----------------------------------------------------------------------------------------------- GPU-only, quoted


def quoted_logs() -> list:
    cases = []
    for path in sorted(LOGS.glob("*.log")):
        head, _ = read_quoted(path)
        cases.append(pytest.param(path, head["expect"], head["source"], id=path.stem))
    return cases


# ----------------------------------------------------------------------------------------------- the table itself


def test_every_rule_is_tested_against_real_text():
    tested = {p.values[0] for p in IN_PROCESS + IN_GROUP} | {"launcher-env-missing"} | set(MULTI_RANK)
    tested |= set(TORCHRUN_RUNS)
    tested |= {"teardown-abort"}  # produced for real, deterministically, in tests/test_teardown.py
    from test_job_rules import CANCEL_REASONS  # slurmstepd's own texts, and a real cluster's (test_slurm_real.py)

    tested |= set(CANCEL_REASONS.values())
    tested |= {p.values[1] for p in quoted_logs()}
    # A generic wrapper (NCCL's "invalid usage") never leads when its specific "Last error" is there too: it counts as
    # tested when it matches in a quoted log at all.
    wrappers = {r.id for r in RULES if r.generic}
    tested |= {
        m.rule for p in quoted_logs() for m in explain_text(read_quoted(p.values[0])[1]).matches if m.rule in wrappers
    }
    from test_catalogue import covered_by  # family rules: against their own templates (the software's text)
    from test_rules import TESTED_HERE  # issue 27's rules, made for real there

    tested |= TESTED_HERE | {r.id for r in RULES if r.covers and covered_by()[r.id]}
    assert {r.id for r in RULES} == tested
    assert len(RULES) >= 20
    assert len({r.id for r in RULES}) == len(RULES)


def test_nothing_matched_exits_1_with_generic_steps(tmp_path):
    log = tmp_path / "quiet.log"
    log.write_text("epoch 1 loss 0.3\nepoch 2 loss 0.2\nTraceback (most recent call last):\nKeyError: 'lr'\n")
    ran = cli("explain", str(log))
    assert ran.code == 1
    # one process's error (nothing distributed in the log): the next steps for it, none of the distributed ones
    assert "Next steps:" in ran.out and "TORCH_SHOW_CPP_STACKTRACES=1" in ran.out
    assert "NCCL_DEBUG=INFO" not in ran.out and "TORCH_DISTRIBUTED_DEBUG=DETAIL" not in ran.out
    log.write_text("[rank1]: Traceback (most recent call last):\n[rank1]: KeyError: 'lr'\n")  # torch's rank prefix
    ran = cli("explain", str(log))
    assert ran.code == 1
    assert "NCCL_DEBUG=INFO" in ran.out and "TORCH_DISTRIBUTED_DEBUG=DETAIL" in ran.out


def test_unreadable_input_is_one_line_exit_2(tmp_path):
    ran = cli("explain", str(tmp_path / "missing.log"))
    assert ran.code == 2 and "no such file" in ran.err and "Traceback" not in ran.err
    assert len(ran.err.strip().splitlines()) == 1
