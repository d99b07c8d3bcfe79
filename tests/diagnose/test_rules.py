"""The rules issue 27 added, each against real error text: made here by running the failing code where a CPU can
(in this process, in a child process, or in a 1-process gloo group), otherwise quoted from the public reports in
tests/logs/ (asserted by test_explain_corpus.py). Also: the peer-closed text (issue 32) and order_findings."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import traceback
import warnings

import pytest
import torch
from torch import nn

from ddplab.diagnose.explain import explain_text
from ddplab.diagnose.rules import BY_ID, MECHANISMS, RULES, order_findings
from ddplab.ports import free_port

# rules this file produces for real (test_explain.py's "every rule is tested" counts them)
TESTED_HERE = {"ddp-ready-twice", "ddp-static-graph", "ddp-grad-strides", "fsdp-flat-param", "device-mesh-size",
               "store-hostname", "gloo-address", "port-privileged", "too-many-open-files", "host-out-of-memory",
               "worker-illegal-instruction", "worker-signal", "worker-terminated", "address-not-available",
               "connect-timed-out", "network-unreachable", "nccl-version-mismatch"}


def raised(make_error) -> str:
    """The traceback (and any warning) `make_error()` produces, as a log shows them."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            make_error()
        except BaseException:
            return "".join(warnings.formatwarning(w.message, w.category, w.filename, w.lineno) for w in caught) + \
                traceback.format_exc()
    shown = "".join(warnings.formatwarning(w.message, w.category, w.filename, w.lineno) for w in caught)
    if not shown:
        raise AssertionError(f"{make_error.__name__} raised and warned nothing")
    return shown


def first_rule(text: str) -> str | None:
    e = explain_text(text)
    return e.matches[0].rule if e.matches else None


def child(code: str, env: dict | None = None, timeout: float = 60) -> str:
    """stdout+stderr of `python -c code` in a fresh interpreter (things that must not touch this process)."""
    ran = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout,
                         env={**os.environ, **(env or {})})
    return ran.stdout + ran.stderr


# ----------------------------------------------------------------------------------------------- DDP, FSDP, mesh

class _TwiceCheckpointed(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):  # the same layer in two reentrant checkpoints: its hook fires in two backward passes
        from torch.utils.checkpoint import checkpoint
        return checkpoint(self.lin, x, use_reentrant=True) + checkpoint(self.lin, x, use_reentrant=True)


class _Branch(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 4)

    def forward(self, x, use_b: bool):
        return self.b(self.a(x)) if use_b else self.a(x)


def test_ddp_ready_twice_made_here(one_process_group):
    def backward_twice():
        model = nn.parallel.DistributedDataParallel(_TwiceCheckpointed(), find_unused_parameters=True)
        model(torch.randn(2, 4, requires_grad=True)).sum().backward()
    log = raised(backward_twice)
    assert first_rule(log) == "ddp-ready-twice", log[-600:]


def test_ddp_static_graph_change_made_here(one_process_group):
    def change_graph():
        model = nn.parallel.DistributedDataParallel(_Branch(), static_graph=True)
        for use_b in (True, False, False):
            model(torch.randn(2, 4), use_b).sum().backward()
    log = raised(change_graph)
    # the message also holds unused-parameters' "Expected to have finished reduction": the static graph is the cause
    assert first_rule(log) == "ddp-static-graph", log[-600:]


def test_ddp_grad_strides_warning_made_here(one_process_group):
    def channels_last_grads():
        model = nn.parallel.DistributedDataParallel(nn.Conv2d(8, 8, 1))
        model(torch.randn(2, 8, 4, 4).to(memory_format=torch.channels_last)).sum().backward()
    log = raised(channels_last_grads)
    e = explain_text(log)
    assert e.matches and e.matches[0].rule == "ddp-grad-strides" and e.matches[0].warning, log[-600:]


def test_fsdp_mixed_dtypes_made_here(one_process_group):
    from torch.distributed.fsdp import FullyShardedDataParallel

    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4).to(torch.bfloat16))
    log = raised(lambda: FullyShardedDataParallel(model, device_id=torch.device("cpu")))
    assert first_rule(log) == "fsdp-flat-param", log[-600:]


def test_device_mesh_bigger_than_world_made_here(one_process_group):
    from torch.distributed.device_mesh import init_device_mesh

    log = raised(lambda: init_device_mesh("cpu", (2,)))
    assert first_rule(log) == "device-mesh-size", log[-600:]


# ----------------------------------------------------------------------------------------------- addresses, ports

def test_store_hostname_that_does_not_resolve_made_here():
    # c10d's own warnings (the gai error) go to stderr of the process: a child keeps them
    log = child("import datetime, torch.distributed as dist\n"
                f"dist.TCPStore('no-such-host.invalid', {free_port()}, is_master=False, "
                "timeout=datetime.timedelta(seconds=2))")
    assert "gai error" in log or "Name or service not known" in log, log[-800:]
    # the client also times out connecting (master-unreachable): the name that does not resolve explains it
    assert first_rule(log) == "store-hostname", log[-800:]


def test_gloo_interface_that_does_not_exist_made_here():
    log = child("import torch.distributed as dist\n"
                "dist.init_process_group('gloo', store=dist.HashStore(), rank=0, world_size=1)",
                env={"GLOO_SOCKET_IFNAME": "nosuchif0"})
    assert "Unable to find address for" in log, log[-800:]
    assert first_rule(log) == "gloo-address", log[-800:]


@pytest.mark.skipif(os.geteuid() != 0, reason="drops to uid 65534 to meet the privileged-port check")
def test_store_on_a_privileged_port_made_here():
    # as root every port binds; a store started by an ordinary user on port 1001 is refused (EACCES)
    log = child("import datetime, os, torch.distributed as dist\nos.setgid(65534); os.setuid(65534)\n"
                "dist.TCPStore('127.0.0.1', 1001, is_master=True, wait_for_workers=False, "
                "timeout=datetime.timedelta(seconds=2))")
    assert first_rule(log) == "port-privileged", log[-800:]


def test_os_errors_made_here():
    files = child("import resource\nresource.setrlimit(resource.RLIMIT_NOFILE, (20, 20))\n"
                  "kept = [open('/dev/null') for _ in range(40)]")
    assert first_rule(files) == "too-many-open-files", files[-400:]
    full = child("open('/dev/full', 'w').write('x' * 10000)")
    assert first_rule(full) == "host-out-of-memory", full[-400:]
    # EADDRNOTAVAIL: binding an address that is not this machine's (TEST-NET-1, never assigned)
    bind = child("import socket\nsocket.socket().bind(('192.0.2.1', 0))")
    assert first_rule(bind) == "address-not-available", bind[-400:]


def test_errno_texts_of_the_os_name_their_rules():
    import errno

    # the OS's own texts, as `[Errno N] TEXT` / `(errno: N - TEXT)` show them
    cases = {errno.ETIMEDOUT: "connect-timed-out", errno.ENETUNREACH: "network-unreachable",
             errno.ECONNREFUSED: "master-unreachable", errno.EADDRINUSE: "port-in-use",
             errno.EHOSTUNREACH: "no-route-to-host", errno.ECONNRESET: "peer-closed", errno.EPIPE: "peer-closed",
             errno.ENOMEM: "host-out-of-memory", errno.EMFILE: "too-many-open-files"}
    for number, rule in cases.items():
        text = f"[c10d] The client socket has failed (errno: {number} - {os.strerror(number)})."
        assert first_rule(text) == rule, (number, os.strerror(number), first_rule(text))


def _default_signals() -> None:
    # A suite started under nohup (or by a parent that ignores them) hands bash SIGHUP ignored, and bash keeps a signal
    # ignored at entry ignored for its children: `kill -HUP` would then do nothing.
    import signal

    for sig in (signal.SIGILL, signal.SIGFPE, signal.SIGHUP, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)


def test_signals_as_the_shell_reports_them():
    # bash reports a child's death by signal in its own words (strsignal); each names its rule
    script = "; ".join(f"bash -c 'kill -{sig} $$'" for sig in ("ILL", "FPE", "HUP", "TERM")) + "; true"
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30,
                         preexec_fn=_default_signals).stderr
    lines = [line for line in out.splitlines() if line.strip()]
    assert len(lines) == 4, out
    assert first_rule(lines[0]) == "worker-illegal-instruction", lines[0]
    assert first_rule(lines[1]) == "worker-signal", lines[1]
    assert first_rule(lines[2]) == "worker-signal", lines[2]
    assert first_rule(lines[3]) == "worker-terminated", lines[3]


# ----------------------------------------------------------------------------------------------- peer-closed (issue 32)

def test_peer_closed_says_the_peer_may_have_finished_normally():
    rule = BY_ID["peer-closed"]
    # rank 0 alone in an evaluation through the DDP model: the other rank exited normally, nobody failed
    assert "exited normally" in rule.cause and "only some ranks called" in rule.cause
    assert "If none did" in rule.fix and "model.module" in rule.fix


# ----------------------------------------------------------------------------------------------- the data itself

def test_rules_are_data_with_a_known_mechanism():
    for rule in RULES:
        assert rule.mechanism in MECHANISMS, rule.id
        assert rule.patterns and rule.cause and rule.fix and rule.reference.startswith("http"), rule.id
    assert len({r.id for r in RULES}) == len(RULES)


def test_order_findings_puts_differences_and_limits_first():
    found = ["nccl-socket", "master-unreachable", "shm-too-small", "store-hostname", "worker-bus-error"]
    assert order_findings(found) == ["store-hostname", "shm-too-small", "worker-bus-error", "nccl-socket",
                                     "master-unreachable"]
    assert order_findings(["unknown-id", "nccl-p2p"]) == ["nccl-p2p", "unknown-id"]


def test_a_hostname_error_comes_before_the_connection_failure_it_causes():
    log = ("[W socket.cpp:767] [c10d] The client socket has failed to connect to [node7]:29500 (errno: 22 - Invalid "
           "argument).\n[W socket.cpp:767] [c10d] The IPv6 network addresses of (node7, 29500) cannot be retrieved "
           "(gai error: -2 - Name or service not known).\n")
    assert [m.rule for m in explain_text(log).matches][:2] == ["store-hostname", "master-unreachable"]


def test_nccl_version_texts_from_the_library_itself():
    """GPU-only: NCCL's own texts, from the catalogue (extracted from libnccl.so), as NCCL's WARN lines show them."""
    from ddplab.diagnose import catalogue
    from ddplab.diagnose.rules import shown_as

    wanted = re.compile(r"NCCL library is too old|not backwards compatible|NCCL version mismatch with remote")
    texts = [t for t in catalogue.load("nccl")["templates"] if wanted.search(t["text"])]
    assert len(texts) >= 3
    for t in texts:
        assert first_rule(shown_as("nccl", t)) == "nccl-version-mismatch", t
