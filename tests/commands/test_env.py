"""`ddplab env`: the fields, the JSON keys, and each warning made to happen. env starts no process: it runs in this
process (tests/inproc.py); the last test runs `python -m ddplab` itself."""

import sys

from conftest import cli
from inproc import here

from ddplab import compat, envinfo


def test_env_json_has_the_report_keys():
    ran = here("env", "--json")
    assert ran.code == 0, ran.err
    report = ran.json()
    for key in ("python", "torch", "backends", "devices", "env_vars", "warnings"):
        assert key in report
    assert report["python"]["version"] == ".".join(map(str, sys.version_info[:3]))
    assert report["backends"]["gloo"] is True
    assert report["torch"]["build"] in ("CPU",) or report["torch"]["build"].startswith(("CUDA", "ROCm"))
    assert report["memory"]["shm_mib"] > 0 and report["cpu"]["logical_cores"] >= 1


def test_env_text_shows_a_verdict():
    ran = here("env")
    assert ran.code == 0
    assert "verdict:" in ran.out and "torch" in ran.out


def test_a_problem_is_a_failed_check_exit_1_and_counted_in_words(capsys):
    one = here("env", env={"LOCAL_RANK": "abc"})
    assert one.code == 1, one.err
    assert "verdict: FAIL 1 problem to fix" in one.out and "problem(s)" not in one.out
    assert here("env", "--json", env={"LOCAL_RANK": "abc"}).code == 1
    from ddplab import report
    from ddplab.commands.env import render

    two = _report(
        warnings=[{"problem": "a", "fix": "b"}, {"problem": "c", "fix": "d"}],
        python={"version": "3", "executable": "p"},
        platform={"system": "", "release": "", "machine": ""},
        cpu={"physical_cores": 1, "logical_cores": 1},
        memory={"total_gib": 1, "shm_mib": 1},
        torch={"version": "2.13.0", "build": "CPU", "cudnn": None, "nccl": None},
    )
    render(report.console(), two)
    assert "verdict: FAIL 2 problems to fix" in capsys.readouterr().out


def test_steering_variables_are_listed_and_secrets_masked():
    ran = here("env", "--json", env={"NCCL_DEBUG": "INFO", "TORCH_API_TOKEN": "s3cret", "GLOO_SOCKET_IFNAME": "lo"})
    found = ran.json()["env_vars"]
    assert found["NCCL_DEBUG"] == "INFO" and found["GLOO_SOCKET_IFNAME"] == "lo"
    assert found["TORCH_API_TOKEN"] == "****" and "s3cret" not in ran.out


def test_malformed_launcher_variable_is_a_warning_with_a_fix():
    ran = here("env", "--json", env={"LOCAL_RANK": "abc"})
    warnings = ran.json()["warnings"]
    assert any("LOCAL_RANK='abc'" in w["problem"] and w["fix"] for w in warnings)


def test_busy_master_port_is_a_warning(busy_port):
    port = busy_port
    ran = here("env", "--json", env={"MASTER_PORT": str(port)})
    assert any(f"MASTER_PORT={port} is already in use" in w["problem"] for w in ran.json()["warnings"])


def _report(**changes) -> envinfo.EnvReport:
    base = dict(
        python={},
        platform={},
        torch={"version": "2.13.0", "build": "CPU"},
        backends={},
        devices=[],
        driver=None,
        cpu={},
        memory={"shm_mib": 4096},
        env_vars={},
    )
    base.update(changes)
    return envinfo.EnvReport(**base)


def test_small_shm_old_torch_and_cpu_torch_on_a_gpu_host_are_warnings():
    problems = envinfo.find_problems(
        _report(memory={"shm_mib": 64}, driver="550.54.15", torch={"version": "2.4.1", "build": "CPU"}), {}
    )
    text = " | ".join(p.problem for p in problems)
    assert "/dev/shm is only 64 MiB" in text
    assert "older than 2.6" in text
    assert "NVIDIA driver 550.54.15 is installed but torch is a CPU-only build" in text
    assert all(p.fix for p in problems)


def test_python_support_table():
    assert compat.python_problem("2.13.0+cpu", (3, 11)) is None
    assert "outside torch 2.6's supported range 3.9–3.13" in compat.python_problem("2.6.0", (3, 14))
    assert compat.python_problem("9.9.0", (3, 11)) is None  # unknown releases: no guess
    assert all(r.python_min <= r.python_max for r in compat.RELEASES)


def test_cli_without_command_prints_help_and_exits_2():
    ran = cli()
    assert ran.code == 2 and "usage:" in ran.err
    assert cli("--version").out.startswith("ddplab ")
    bad = cli("env", "--bogus")
    assert bad.code == 2 and len(bad.err.strip().splitlines()) == 1 and "Traceback" not in bad.err
