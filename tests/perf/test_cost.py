"""`ddplab cost`: the arithmetic, the shipped table's provenance, the --prices override and every bad input."""

from __future__ import annotations

import json
import sys

import pytest

from conftest import cli
from ddplab.errors import DdplabError
from ddplab.perf import cost


def test_every_shipped_price_and_peak_has_a_source_and_a_date():
    for p in cost.PRICES.values():
        assert p.usd_per_gpu_hour > 0 and p.source.startswith("https://") and p.date[:2] == "20", p
    for k in cost.PEAKS.values():
        assert k.bf16_dense_tflops > 0 and "https://" in k.source and k.date[:2] == "20", k


def test_arithmetic_time_money_and_marks():
    # 360,000 samples at 100 samples/s on one A100 is exactly one hour.
    r = cost.estimate(100.0, "A100", 360_000, 1, ["A100", "H100"], [1, 2], cost.PRICES, cost.PEAKS)
    by = {(o.gpu, o.count): o for o in r.options}
    a1 = by["A100", 1]
    assert a1.hours == pytest.approx(1.0) and a1.usd == pytest.approx(cost.PRICES["A100"].usd_per_gpu_hour)
    assert a1.speed_basis == "measured" and a1.scaling_basis == "assumed"
    ratio = cost.PEAKS["H100"].bf16_dense_tflops / cost.PEAKS["A100"].bf16_dense_tflops
    h2 = by["H100", 2]
    assert h2.samples_per_sec == pytest.approx(100 * ratio * 2)
    assert h2.hours == pytest.approx(1 / (2 * ratio))
    assert h2.usd == pytest.approx(h2.hours * 2 * cost.PRICES["H100"].usd_per_gpu_hour)
    assert h2.speed_basis == "assumed"
    assert [o for o in r.options if o.fastest] == [h2]
    cheapest = min(r.options, key=lambda o: (o.usd, o.hours))
    assert [o for o in r.options if o.cheapest] == [cheapest]


def test_efficiency_slows_larger_counts_and_changes_the_cheapest():
    def eff(n):  # half efficient beyond one device
        return (1.0, "measured") if n == 1 else (0.5, "predicted")

    r = cost.estimate(100.0, "A100", 360_000, 1, ["A100"], [1, 4], cost.PRICES, cost.PEAKS, eff)
    one, four = r.options
    assert four.samples_per_sec == pytest.approx(200.0) and four.scaling_basis == "predicted"
    assert four.usd == pytest.approx(2 * one.usd)  # 4 GPUs for half the time of 1 at 2× the throughput
    assert one.cheapest and four.fastest


def test_gpu_without_a_sourced_peak_gets_no_time_rather_than_a_guess():
    r = cost.estimate(100.0, "A100", 1000, 1, ["A10G", "A100"], [1], cost.PRICES, cost.PEAKS)
    a10g = r.options[0]
    assert a10g.speed_basis == "unknown" and a10g.hours is None and a10g.usd is None
    assert not a10g.cheapest and not a10g.fastest
    assert any("A10G" in a for a in r.assumptions)


def test_measured_on_the_gpu_itself_needs_no_peak():
    r = cost.estimate(50.0, "A10G", 180_000, 1, ["A10G"], [1], cost.PRICES, cost.PEAKS)
    assert r.options[0].hours == pytest.approx(1.0) and r.options[0].speed_basis == "measured"


def test_names_are_forgiving_but_not_invented():
    assert cost.canonical("h100", cost.PRICES) == "H100"
    assert cost.canonical("rtx 4090", cost.PRICES) == "RTX4090"
    assert cost.canonical("4090", cost.PRICES) == "RTX4090"
    assert cost.canonical("L40S", cost.PRICES) is None
    assert cost.gpu_of_device("NVIDIA H100 80GB HBM3") == "H100"
    assert cost.gpu_of_device("NVIDIA GeForce RTX 4090") == "RTX4090"
    assert cost.gpu_of_device("cpu") is None


def test_price_file_json_replaces_the_table(tmp_path):
    f = tmp_path / "quotes.json"
    f.write_text(json.dumps({"h100": {"usd_per_gpu_hour": 2.0, "source": "my quote", "date": "2026-12-01"},
                             "L40S": {"usd_per_gpu_hour": 0.9, "peak_tflops": 362.05}}))
    prices, peaks = cost.load_prices(str(f))
    assert set(prices) == {"H100", "L40S"} and prices["H100"].usd_per_gpu_hour == 2.0
    assert prices["H100"].source == "my quote" and peaks["L40S"].bf16_dense_tflops == 362.05


@pytest.mark.skipif(sys.version_info < (3, 11), reason="TOML needs tomllib (Python 3.11+)")
def test_price_file_toml(tmp_path):
    f = tmp_path / "quotes.toml"
    f.write_text('[A100]\nusd_per_gpu_hour = 1.25\ndate = "2026-12-01"\n')
    prices, _ = cost.load_prices(str(f))
    assert prices["A100"].usd_per_gpu_hour == 1.25 and prices["A100"].date == "2026-12-01"


@pytest.mark.parametrize("name,text,expect", [
    ("bad.json", "{not json", "not valid JSON"),
    ("list.json", "[1, 2]", "expected a table of GPUs"),
    ("neg.json", '{"H100": {"usd_per_gpu_hour": -3}}', "positive number"),
    ("str.json", '{"H100": {"usd_per_gpu_hour": "cheap"}}', "positive number"),
    ("flat.json", '{"H100": 2.5}', "must be a table"),
])
def test_malformed_price_files_are_one_line_errors(tmp_path, name, text, expect):
    f = tmp_path / name
    f.write_text(text)
    with pytest.raises(DdplabError, match=expect):
        cost.load_prices(str(f))


@pytest.mark.skipif(sys.version_info < (3, 11), reason="TOML needs tomllib (Python 3.11+)")
def test_malformed_toml_is_a_one_line_error(tmp_path):
    f = tmp_path / "bad.toml"
    f.write_text("[H100\nusd_per_gpu_hour = 2")
    with pytest.raises(DdplabError, match="not valid TOML"):
        cost.load_prices(str(f))


# ----------------------------------------------------------------------------------------------- the CLI


def test_cli_json(tmp_path):
    r = cli("cost", "--samples-per-sec", "100", "--measured-on", "a100", "--dataset-size", "360000", "--epochs", "1",
            "--gpus", "A100,H100", "--count", "1,2", "--json")
    assert r.code == 0, r.err
    data = r.json()
    assert data["measured_on"] == "A100" and len(data["options"]) == 4
    one = data["options"][0]
    assert (one["gpu"], one["count"]) == ("A100", 1) and one["hours"] == pytest.approx(1.0)
    assert sum(o["cheapest"] for o in data["options"]) == 1 and sum(o["fastest"] for o in data["options"]) == 1
    assert {p["gpu"] for p in data["prices"]} == {"A100", "H100"}


def test_cli_text_marks_cheapest_and_fastest_and_cites_prices():
    r = cli("cost", "--samples-per-sec", "100", "--measured-on", "A100", "--dataset-size", "1e6", "--epochs", "2")
    assert r.code == 0, r.err
    assert "cheapest" in r.out and "fastest" in r.out and "runpod.io/pricing" in r.out and "assumed:" in r.out


def test_cli_price_override_and_missing_gpu(tmp_path):
    f = tmp_path / "quotes.json"
    f.write_text(json.dumps({"H100": {"usd_per_gpu_hour": 2.0}}))
    ok = cli("cost", "--samples-per-sec", "100", "--dataset-size", "360000", "--epochs", "1", "--prices", str(f),
             "--count", "1", "--json")
    assert ok.code == 0, ok.err
    assert [(o["gpu"], o["usd"]) for o in ok.json()["options"]] == [("H100", pytest.approx(2.0))]
    missing = cli("cost", "--samples-per-sec", "100", "--measured-on", "H100", "--dataset-size", "1e6", "--epochs",
                  "1", "--prices", str(f), "--gpus", "H100,A100")
    assert missing.code == 2 and "A100" in missing.err and "quotes.json" in missing.err
    assert len(missing.err.strip().splitlines()) == 1 and "Traceback" not in missing.err


@pytest.mark.parametrize("args,expect", [
    (["--samples-per-sec", "100", "--dataset-size", "1e6", "--epochs", "1"], "--measured-on"),
    (["--samples-per-sec", "100", "--measured-on", "A100", "--dataset-size", "1e6", "--epochs", "1",
      "--gpus", "TPUv5"], "TPUv5"),
    (["--samples-per-sec", "100", "--measured-on", "A100", "--dataset-size", "1e6", "--epochs", "1",
      "--count", "1,x"], "--count"),
    (["--samples-per-sec", "100", "--measured-on", "A100", "--dataset-size", "1e6", "--epochs", "1",
      "--count", "0"], "--count"),
    (["--samples-per-sec", "-5", "--measured-on", "A100", "--dataset-size", "1e6", "--epochs", "1"], "positive"),
    (["--samples-per-sec", "100", "--measured-on", "A100", "--dataset-size", "1e6", "--epochs", "1",
      "--prices", "/nonexistent/prices.json"], "no such file"),
    (["--from", "/nonexistent/scale.json", "--dataset-size", "1e6", "--epochs", "1"], "no such file"),
])
def test_cli_bad_input_is_one_line_exit_2(args, expect):
    r = cli("cost", *args)
    assert r.code == 2, (r.out, r.err)
    assert expect in r.err and len(r.err.strip().splitlines()) == 1 and "Traceback" not in r.err


@pytest.mark.parametrize("name, key", [
    ("NVIDIA A100-SXM4-80GB", "A100"), ("NVIDIA A100-PCIE-40GB", "A100"), ("NVIDIA A100 80GB PCIe", "A100"),
    ("NVIDIA H100 80GB HBM3", "H100"), ("NVIDIA H200", "H200"), ("NVIDIA GeForce RTX 4090", "RTX4090"),
    # parts whose names contain a row's but whose peak is lower: no peak rather than a wrong one
    ("NVIDIA GeForce RTX 4090 D", None), ("NVIDIA GeForce RTX 4090 Laptop GPU", None), ("NVIDIA H100 PCIe", None),
    ("NVIDIA H100 NVL", None), ("NVIDIA H200 NVL", None), ("NVIDIA A100X", None),
])
def test_device_peaks_go_to_exact_board_names_only(name, key):
    assert cost.gpu_of_device(name) == key
    peak = cost.device_peak(name)
    assert (peak.gpu if peak else None) == (key if key in cost.PEAKS else None)


def test_every_a100_gets_the_datasheets_312_tflops():
    # Refused before for the PCIe boards, whose datasheet figure is the SXM one's.
    assert {cost.device_peak(n).bf16_dense_tflops for n, k in cost.DEVICE_NAMES.items() if k == "A100"} == {312.0}
def test_durations_that_differ_print_differently():
    from ddplab.perf.cost import format_hours

    shown = {s: format_hours(s / 3600) for s in (0.4, 42, 60, 95, 150, 599.6, 1800, 5400, 3 * 86400)}
    assert shown == {0.4: "0 s", 42: "42 s", 60: "1 min", 95: "1 min 35 s", 150: "2 min 30 s", 599.6: "10 min",
                     1800: "30 min", 5400: "1.5 h", 3 * 86400: "3.0 d"}
    assert format_hours(None) == "—"


def test_gpu_memory_is_what_nvidia_smi_shows_and_sizes_take_an_explicit_unit():
    from ddplab.perf.cost import MEMORY, memory_size

    assert MEMORY["A100"].total_bytes == 81920 * 2**20 == 80 * 2**30  # "80GB" on the datasheet is binary
    assert MEMORY["H100"].total_bytes == 81559 * 2**20 and "nvidia-smi shows 81559 MiB" in MEMORY["H100"].basis
    assert MEMORY["H200"].total_bytes == 141 * 2**30 and "read as 141 GiB" in MEMORY["H200"].basis
    assert all(m.total_bytes > m.gb * 1e9 * 0.9 for m in MEMORY.values())
    assert memory_size("24GiB").total_bytes == 24 * 2**30 and memory_size("24 gib").gpu == "24 GiB"
    assert memory_size("24GB").total_bytes == 24 * 10**9 and memory_size("24GB").gpu == "24 GB"
    assert memory_size("1.5 GB").total_bytes == 1_500_000_000
    assert memory_size("24") is None and memory_size("A100") is None and memory_size("0GB") is None


def test_memory_command_counts_a_given_size_in_its_unit():
    from conftest import cli

    ran = cli("memory", "linear", "--strategy", "ddp", "--gpus", "24GiB,24GB,A100", "--json", timeout=120)
    assert ran.code == 0, ran.err
    fits = {f["gpu"]: f for f in ran.json()["fits"]}
    assert fits["24 GiB"]["memory_bytes"] == 24 * 2**30 and fits["24 GB"]["memory_bytes"] == 24 * 10**9
    assert fits["A100"]["memory_bytes"] == 80 * 2**30 and "81920 MiB" in fits["A100"]["source"]
    text = cli("memory", "linear", "--strategy", "ddp", "--gpus", "24GB", timeout=120).out
    assert "22.35 GiB" in text  # 24·10^9 bytes, said in GiB
    bad = cli("memory", "linear", "--gpus", "24TB", timeout=120)
    assert bad.code == 2 and "24GiB" in bad.err and "Traceback" not in bad.err
