"""CUDA_VISIBLE_DEVICES as CUDA reads it, through the real CLI: -1 hides every GPU and is no error on CPU.

The preflight runs in the CLI's own process, so its readings of the variable are taken in-process (tests/inproc.py);
the real run of 2 ranks under -1 (the ranks themselves are fine with it) is test_check.py's text output test."""

import pytest
from inproc import here


def _preflight(ran) -> dict:
    return ran.json()["stages"][0]


def _every_gpu_hidden(ran) -> None:
    assert ran.json()["device"] == "cpu" and _preflight(ran)["status"] == "PASS"
    findings = _preflight(ran)["details"]["findings"]
    assert any(f["level"] == "ok" and "every GPU hidden" in f["what"] for f in findings), findings


@pytest.mark.parametrize("device", [["--device", "cpu"], []])
@pytest.mark.parametrize("value", ["-1", ""])
def test_hiding_every_gpu_is_fine_for_the_preflight(value, device):
    ran = here("check", *device, "--stages", "preflight", "--json", env={"CUDA_VISIBLE_DEVICES": value})
    assert ran.code == 0, ran.err + ran.out
    _every_gpu_hidden(ran)


def test_entries_after_a_negative_one_are_named_as_ignored():
    ran = here("check", "--device", "cpu", "--stages", "preflight", "--json", env={"CUDA_VISIBLE_DEVICES": "0,-1,1"})
    assert ran.code == 0, ran.err + ran.out
    warned = [f for f in _preflight(ran)["details"]["findings"] if f["level"] == "warn"]
    assert any("ignores 1" in f["what"] and "GPUs 0 are visible" in f["what"] for f in warned), warned


@pytest.mark.parametrize("value, words", [("0,0", "lists a GPU twice"), ("gpu0", "not GPU indices")])
def test_malformed_lists_still_fail_preflight(value, words):
    ran = here("check", "--device", "cpu", "--stages", "preflight", "--json", env={"CUDA_VISIBLE_DEVICES": value})
    assert ran.code == 1, ran.err
    assert _preflight(ran)["status"] == "FAIL" and words in _preflight(ran)["cause"]
