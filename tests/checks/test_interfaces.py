"""Preflight names a GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME that matches no interface here, with those that exist,
before any rank starts (check, train, launch), instead of a rank's traceback."""

from __future__ import annotations

from pathlib import Path

import psutil
import pytest
from conftest import cli
from inproc import here

from ddplab.checks.preflight import interface_matches

SCRIPTS = Path(__file__).parents[1] / "scripts"
HERE = sorted(psutil.net_if_addrs())
MISSING = "eth9" if "eth9" not in HERE else "ddplab-no-such-if0"


@pytest.mark.parametrize(
    "var, value, used, unmatched",
    [
        ("GLOO_SOCKET_IFNAME", "eth0", ["eth0"], []),
        ("GLOO_SOCKET_IFNAME", "eth", [], ["eth"]),  # gloo takes exact names, no prefixes
        ("GLOO_SOCKET_IFNAME", "lo,eth9", ["lo"], ["eth9"]),
        ("GLOO_SOCKET_IFNAME", "x", [], []),  # torch ignores a value of one character
        ("NCCL_SOCKET_IFNAME", "eth", ["eth0", "eth1"], []),  # NCCL: prefixes
        ("NCCL_SOCKET_IFNAME", "=eth", [], ["eth"]),  # "=": exact names
        ("NCCL_SOCKET_IFNAME", "eth0:29400,ib", ["eth0"], ["ib"]),  # ":port" after a name
        ("NCCL_SOCKET_IFNAME", "^lo,docker", ["eth0", "eth1"], []),  # "^": every interface but these
        ("NCCL_SOCKET_IFNAME", "^eth,lo,docker", [], []),  # excludes everything: nothing left to use
        ("NCCL_SOCKET_IFNAME", "^=eth", ["docker0", "eth0", "eth1", "lo"], []),  # no interface is named "eth"
    ],
)
def test_names_are_matched_as_each_library_does(var, value, used, unmatched):
    assert interface_matches(var, value, ["docker0", "eth0", "eth1", "lo"]) == (
        [n for n in ["docker0", "eth0", "eth1", "lo"] if n in used],
        unmatched,
    )


def _names_the_interfaces(text: str) -> bool:
    return MISSING in text and all(name in text for name in HERE)


def test_check_fails_preflight_and_starts_no_rank(no_leftover_workers):
    ran = cli("check", "--json", env={"GLOO_SOCKET_IFNAME": MISSING, "COLUMNS": "80"}, timeout=120)
    assert ran.code == 1, ran.err
    stages = {s["name"]: s for s in ran.json()["stages"]}
    assert stages["preflight"]["status"] == "FAIL" and _names_the_interfaces(stages["preflight"]["cause"])
    assert all(stages[s]["status"] == "SKIP" for s in ("devices", "collectives", "ddp"))
    assert ran.json()["problems"] == []  # no rank ran, so no rank's traceback


def test_the_text_names_the_interfaces():
    # the preflight alone (in this process): the same finding, rendered as text at 80 columns
    text = here("check", "--stages", "preflight", env={"GLOO_SOCKET_IFNAME": MISSING, "COLUMNS": "80"})
    assert text.code == 1 and _names_the_interfaces(" ".join(text.out.split())) and "Traceback" not in text.out


def test_nccl_name_only_warns_on_gloo():
    ran = here("check", "--stages", "preflight", "--json", env={"NCCL_SOCKET_IFNAME": MISSING})
    assert ran.code == 0
    warned = [f for f in ran.json()["stages"][0]["details"]["findings"] if "NCCL_SOCKET_IFNAME" in f["what"]]
    assert [f["level"] for f in warned] == ["warn"]


@pytest.mark.parametrize(
    "args",
    [
        ["train", "linear", "--nproc", "2", "--epochs", "1"],
        ["launch", "--nproc-per-node", "2", str(SCRIPTS / "good_ddp.py")],
    ],
)
def test_train_and_launch_refuse_before_any_rank_starts(args, no_leftover_workers):
    # a real process: train and launch start their agent while they check (start-up paid once), and it must end
    ran = cli(*args, env={"GLOO_SOCKET_IFNAME": MISSING}, timeout=120)
    assert ran.code == 2, ran.err
    assert len(ran.err.strip().splitlines()) == 1 and _names_the_interfaces(ran.err), ran.err
    assert "Traceback" not in ran.err + ran.out
