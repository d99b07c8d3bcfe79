"""`ddplab cost`: the arithmetic, the shipped price file and its checker, --prices, the table at 80 columns, and every
bad input."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from datetime import date, timedelta
from pathlib import Path

import pytest
from conftest import cli, refused

from ddplab.errors import DdplabError
from ddplab.perf import cost

ON = date(2026, 12, 5)  # "today" for every test: price ages never depend on the clock
HEADER = "gpu,provider,tier,price_per_gpu_hour,currency,gpus_per_box,offer,source,date_read,read_from"
PRICES = {o.gpu: o for o in cost.shipped()}


def price_file(tmp_path, *rows: str, name: str = "quotes.csv", header: str = HEADER):
    f = tmp_path / name
    f.write_text("\n".join([header, *rows]) + "\n")
    return f


def test_every_shipped_price_and_peak_has_a_source_and_a_date():
    for p in cost.shipped():
        assert p.price_per_gpu_hour > 0 and p.source.startswith("https://") and p.read_from.startswith("https://"), p
        assert cost.iso_date(p.date_read) is not None and p.currency == "USD" and p.tier in cost.TIERS, p
    for k in cost.PEAKS.values():
        assert k.bf16_dense_tflops > 0 and "https://" in k.source and k.date[:2] == "20", k


def test_the_shipped_file_is_what_the_python_table_was():
    """Moved to data with every figure, source and date as they were (a refresh needs the pages: network)."""
    via = "https://github.com/tgarg01/silybench-data/blob/main/derived/csv/gpu_prices.csv (checked_at column)"
    assert {
        (o.gpu, o.price_per_gpu_hour, o.provider, o.tier, o.gpus_per_box, o.source, o.date_read, o.read_from)
        for o in cost.shipped()
    } == {
        (
            "A10G",
            1.006,
            "AWS",
            "on-demand",
            1,
            "https://aws.amazon.com/ec2/pricing/on-demand/",
            "2026-06-17",
            "https://www.factualminds.com/blog/amazon-ec2-on-demand-pricing-instance-families-2026/",
        ),
        *(
            (gpu, usd, "RunPod", "secure", 1, "https://www.runpod.io/pricing", "2026-09-25", via)
            for gpu, usd in (("RTX4090", 0.74), ("A100", 1.59), ("H100", 3.49), ("H200", 4.59))
        ),
    }


def test_arithmetic_time_money_and_marks():
    # 360,000 samples at 100 samples/s on one A100 is exactly one hour.
    offers = [PRICES["A100"], PRICES["H100"]]
    r = cost.estimate(100.0, "A100", 360_000, 1, offers, [1, 2], cost.PEAKS, on=ON)
    by = {(o.gpu, o.count): o for o in r.options}
    a1 = by["A100", 1]
    assert a1.hours == pytest.approx(1.0) and a1.cost == pytest.approx(PRICES["A100"].price_per_gpu_hour)
    assert a1.speed_basis == "measured" and a1.scaling_basis == "assumed" and a1.currency == "USD"
    ratio = cost.PEAKS["H100"].bf16_dense_tflops / cost.PEAKS["A100"].bf16_dense_tflops
    h2 = by["H100", 2]
    assert h2.samples_per_sec == pytest.approx(100 * ratio * 2)
    assert h2.hours == pytest.approx(1 / (2 * ratio))
    assert h2.cost == pytest.approx(h2.hours * 2 * PRICES["H100"].price_per_gpu_hour)
    assert h2.speed_basis == "assumed"
    assert [o for o in r.options if o.fastest] == [h2] and not h2.tied_fastest
    # Ideal scaling: one H100 and two cost the same. A tie, said on both rows; neither is "the" cheapest.
    assert [(o.gpu, o.count) for o in r.options if o.cheapest] == [("H100", 1), ("H100", 2)]
    assert all(o.tied_cheapest for o in r.options if o.cheapest)
    assert any(n.startswith("(tie)") and "ideal scaling" in n for n in r.notes)


def test_ties_are_ties_and_a_measured_efficiency_breaks_them():
    """Issue 42 point 10: H100 x1, x4 and x8 cost the same under ideal scaling; x8 was tagged "cheapest fastest"."""
    ideal = cost.estimate(2500.0, "A100", 1e6, 3, [PRICES["A100"], PRICES["H100"]], [1, 4, 8], cost.PEAKS, on=ON)
    cheapest = [(o.gpu, o.count) for o in ideal.options if o.cheapest]
    assert cheapest == [("H100", 1), ("H100", 4), ("H100", 8)]
    assert all(o.tied_cheapest for o in ideal.options if o.cheapest)

    def eff(n):
        return (1.0, "measured") if n == 1 else (0.9, "predicted")

    real = cost.estimate(2500.0, "A100", 1e6, 3, [PRICES["A100"], PRICES["H100"]], [1, 4, 8], cost.PEAKS, eff, on=ON)
    assert [(o.gpu, o.count, o.tied_cheapest) for o in real.options if o.cheapest] == [("H100", 1, False)]
    assert [(o.gpu, o.count, o.tied_fastest) for o in real.options if o.fastest] == [("H100", 8, False)]
    assert not any(n.startswith("(tie)") for n in real.notes)


def test_efficiency_slows_larger_counts_and_changes_the_cheapest():
    def eff(n):  # half efficient beyond one device
        return (1.0, "measured") if n == 1 else (0.5, "predicted")

    r = cost.estimate(100.0, "A100", 360_000, 1, [PRICES["A100"]], [1, 4], cost.PEAKS, eff, on=ON)
    one, four = r.options
    assert four.samples_per_sec == pytest.approx(200.0) and four.scaling_basis == "predicted"
    assert four.cost == pytest.approx(2 * one.cost)  # 4 GPUs for half the time of 1 at 2× the throughput
    assert one.cheapest and four.fastest


def test_gpu_without_a_sourced_peak_gets_no_time_rather_than_a_guess():
    r = cost.estimate(100.0, "A100", 1000, 1, [PRICES["A10G"], PRICES["A100"]], [1], cost.PEAKS, on=ON)
    a10g = r.options[0]
    assert a10g.speed_basis == "unknown" and a10g.hours is None and a10g.cost is None
    assert not a10g.cheapest and not a10g.fastest
    assert any("A10G" in a for a in r.assumptions)


def test_measured_on_the_gpu_itself_needs_no_peak():
    r = cost.estimate(50.0, "A10G", 180_000, 1, [PRICES["A10G"]], [1], cost.PEAKS, on=ON)
    assert r.options[0].hours == pytest.approx(1.0) and r.options[0].speed_basis == "measured"


def test_a_box_is_billed_whole():
    box = cost.Price("H100", 3.0, "USD", "AWS", "on-demand", 8, "https://example.com/p5", "2026-12-01")
    r = cost.estimate(100.0, "H100", 360_000, 1, [box], [1, 8, 9], cost.PEAKS, on=ON)
    one, eight, nine = r.options
    assert (one.billed_gpus, eight.billed_gpus, nine.billed_gpus) == (8, 8, 16)
    assert one.cost == pytest.approx(1.0 * 8 * 3.0) and eight.cost == pytest.approx(1 / 8 * 8 * 3.0)


def test_price_age_is_the_oldest_row_used():
    fresh = cost.estimate(100.0, "A100", 1000, 1, [PRICES["A100"]], [1], cost.PEAKS, on=date(2026, 10, 5))
    assert fresh.prices_age_days == 10 and not fresh.prices_stale and "2026-09-25" in fresh.prices_oldest
    both = cost.estimate(
        100.0, "A100", 1000, 1, [PRICES["A10G"], PRICES["A100"]], [1], cost.PEAKS, on=date(2026, 10, 5)
    )
    assert both.prices_age_days == 110 and both.prices_stale and both.prices_oldest == "A10G AWS on-demand, 2026-06-17"
    edge = cost.estimate(
        100.0,
        "A100",
        1000,
        1,
        [PRICES["A100"]],
        [1],
        cost.PEAKS,
        on=date(2026, 9, 25) + timedelta(days=cost.STALE_DAYS),
    )
    assert edge.prices_age_days == cost.STALE_DAYS and not edge.prices_stale


def test_today_comes_from_the_environment_when_set(monkeypatch):
    monkeypatch.setenv(cost.TODAY_ENV, "2027-01-02")
    assert cost.today() == date(2027, 1, 2)
    monkeypatch.setenv(cost.TODAY_ENV, "2 Jan 2027")
    with pytest.raises(DdplabError, match="YYYY-MM-DD"):
        cost.today()


def test_names_are_forgiving_but_not_invented():
    assert cost.canonical("h100", PRICES) == "H100"
    assert cost.canonical("rtx 4090", PRICES) == "RTX4090"
    assert cost.canonical("4090", PRICES) == "RTX4090"
    assert cost.canonical("L40S", PRICES) is None
    assert cost.gpu_of_device("NVIDIA H100 80GB HBM3") == "H100"
    assert cost.gpu_of_device("NVIDIA GeForce RTX 4090") == "RTX4090"
    assert cost.gpu_of_device("cpu") is None


def test_price_file_replaces_the_table(tmp_path):
    f = price_file(
        tmp_path,
        "h100,Lambda,on-demand,2.0,USD,1,my quote,https://example.com/q,2026-12-01,",
        "H100,Lambda,spot,1.1,USD,1,,https://example.com/q,2026-12-01,",
        "L40S,Acme,community,0.9,EUR,1,,https://example.com/l,2026-11-30,",
        name="q.csv",
        header=HEADER,
    )
    offers, peaks = cost.load_prices(str(f), ON)
    assert [(o.gpu, o.tier, o.price_per_gpu_hour, o.currency) for o in offers] == [
        ("H100", "on-demand", 2.0, "USD"),
        ("H100", "spot", 1.1, "USD"),
        ("L40S", "community", 0.9, "EUR"),
    ]
    assert offers[0].offer == "my quote" and peaks == {}
    with_peak = price_file(
        tmp_path,
        "L40S,Acme,community,0.9,EUR,1,https://example.com/l,2026-11-30,362.05",
        name="p.csv",
        header="gpu,provider,tier,price_per_gpu_hour,currency,gpus_per_box,source,date_read,peak_tflops",
    )
    assert cost.load_prices(str(with_peak), ON)[1]["L40S"].bf16_dense_tflops == 362.05


@pytest.mark.parametrize(
    "row,expect",
    [
        ("H100,X,cheap,2,USD,1,,https://x,2026-12-01,", "tier 'cheap' is not one of"),
        ("H100,X,spot,-3,USD,1,,https://x,2026-12-01,", "price_per_gpu_hour '-3' is not a positive number"),
        ("H100,X,spot,cheap,USD,1,,https://x,2026-12-01,", "price_per_gpu_hour 'cheap'"),
        ("H100,X,spot,nan,USD,1,,https://x,2026-12-01,", "price_per_gpu_hour 'nan'"),
        ("H100,X,spot,2,dollars,1,,https://x,2026-12-01,", "currency 'dollars' is not a 3-letter code"),
        ("H100,X,spot,2,USD,0,,https://x,2026-12-01,", "gpus_per_box '0' is not a whole number of 1 or more"),
        ("H100,X,spot,2,USD,2.5,,https://x,2026-12-01,", "gpus_per_box '2.5'"),
        ("H100,X,spot,2,USD,1,,https://x,01/12/2026,", "date_read '01/12/2026' is not a date as YYYY-MM-DD"),
        ("H100,X,spot,2,USD,1,,https://x,2026-02-30,", "date_read '2026-02-30' is not a date"),
        ("H100,X,spot,2,USD,1,,https://x,2026-12-06,", "date_read 2026-12-06 is in the future (today is 2026-12-05)"),
        ("H100,X,spot,2,USD,1,,,2026-12-01,", "source is empty"),
        ("H100,X,spot,2,USD,1,a, b,https://x,2026-12-01,", "11 cells, the header names 10"),
    ],
)
def test_each_broken_row_is_one_line_naming_the_line(tmp_path, row, expect):
    f = price_file(tmp_path, "A100,RunPod,secure,1.59,USD,1,,https://x,2026-12-01,", row)
    _, problems = cost.parse_prices(f.read_text(), "q.csv", ON)
    assert len(problems) == 1 and problems[0].startswith("q.csv line 3: ") and expect in problems[0], problems
    with pytest.raises(DdplabError, match="line 3"):
        cost.load_prices(str(f), ON)


def test_broken_headers_and_empty_files(tmp_path):
    def problems(text):
        return cost.parse_prices(text, "q.csv", ON)[1]

    assert problems("gpu,provider\nH100,X\n") == [
        "q.csv line 1: no column 'tier' (required: gpu, provider, tier, price_per_gpu_hour, currency, gpus_per_box, "
        "source, date_read)",
        *(
            f"q.csv line 1: no column '{c}' (required: gpu, provider, tier, price_per_gpu_hour, "
            "currency, gpus_per_box, source, date_read)"
            for c in ("price_per_gpu_hour", "currency", "gpus_per_box", "source", "date_read")
        ),
    ]
    colour = HEADER + ",colour\nH100,X,spot,2,USD,1,,https://x,2026-12-01,,red\n"
    assert "unknown column 'colour'" in problems(colour)[0]
    assert problems("# only a comment\n") == ["q.csv: no header row (the columns: " + ", ".join(cost.COLUMNS) + ")"]
    assert problems(HEADER + "\n") == ["q.csv: a header but no offers"]
    twice = (
        HEADER + "\nH100,X,spot,2,USD,1,,https://x,2026-12-01,\n# a note\n"
        "h100,x,Spot,2.5,usd,1,,https://y,2026-12-02,\n"
    )
    assert problems(twice) == ["q.csv line 4: the same offer as line 2 (H100 x spot, 1 per box, USD): keep one"]


def test_old_json_and_toml_price_files_are_refused_with_the_new_format(tmp_path):
    for name in ("quotes.json", "quotes.toml"):
        f = tmp_path / name
        f.write_text('{"H100": {"usd_per_gpu_hour": 2.0}}')
        with pytest.raises(DdplabError, match="price files are CSV now"):
            cost.load_prices(str(f), ON)


# ----------------------------------------------------------------------------------------------- tools/check_prices.py

TOOL = Path(__file__).parents[2] / "tools" / "check_prices.py"


def check_prices(*args: str, capsys) -> tuple[int, list[str]]:
    spec = importlib.util.spec_from_file_location("check_prices", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    code = module.main(list(args))
    return code, capsys.readouterr().out.splitlines()


def test_check_prices_passes_the_shipped_file(capsys):
    code, lines = check_prices(str(Path(cost.__file__).parents[1] / "data" / cost.PRICE_FILE), capsys=capsys)
    assert code == 0 and lines[-1].endswith(")") and "5 offer(s), fine" in lines[-1]


def test_check_prices_lists_every_problem_of_a_broken_file(tmp_path, capsys):
    f = price_file(
        tmp_path,
        "H100,X,cheap,-1,dollars,0,,,2030-01-01,",
        "A100,Y,spot,1.5,USD,1,,https://x,2026-12-01,",
        "A100,Y,spot,1",
    )
    code, lines = check_prices(str(f), "--today", "2026-12-05", capsys=capsys)
    assert code == 1 and len(lines) == 7 and all(line.startswith(f"{f} line ") for line in lines), lines
    assert [line.split(": ", 1)[1].split(" ")[0] for line in lines] == [
        "source",
        "tier",
        "price_per_gpu_hour",
        "currency",
        "gpus_per_box",
        "date_read",
        "4",
    ]


def test_check_prices_runs_from_the_command_line(tmp_path):
    good = subprocess.run(
        [sys.executable, str(TOOL), str(Path(cost.__file__).parents[1] / "data" / "prices.csv")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert good.returncode == 0, good.stdout + good.stderr
    f = price_file(tmp_path, "H100,X,spot,2,USD,1,,https://x,2026-12-06,")
    bad = subprocess.run(
        [sys.executable, str(TOOL), str(f), "--today", "2026-12-05"], capture_output=True, text=True, timeout=60
    )
    assert bad.returncode == 1 and bad.stdout.strip().endswith("is in the future (today is 2026-12-05)")
    missing = subprocess.run(
        [sys.executable, str(TOOL), str(tmp_path / "none.csv")], capture_output=True, text=True, timeout=60
    )
    assert missing.returncode == 2 and len(missing.stderr.strip().splitlines()) == 1


# ----------------------------------------------------------------------------------------------- the CLI


TODAY = {cost.TODAY_ENV: ON.isoformat()}
GUIDE = ("--samples-per-sec", "2500", "--measured-on", "A100", "--dataset-size", "1000000", "--epochs", "3")


def test_cli_json(tmp_path):
    r = cli(
        "cost",
        "--samples-per-sec",
        "100",
        "--measured-on",
        "a100",
        "--dataset-size",
        "360000",
        "--epochs",
        "1",
        "--gpus",
        "A100,H100",
        "--count",
        "1,2",
        "--json",
        env=TODAY,
    )
    assert r.code == 0, r.err
    data = r.json()
    assert data["measured_on"] == "A100" and len(data["options"]) == 4
    one = data["options"][0]
    assert (one["gpu"], one["count"], one["currency"]) == ("A100", 1, "USD") and one["hours"] == pytest.approx(1.0)
    assert [(o["gpu"], o["count"], o["tied_cheapest"]) for o in data["options"] if o["cheapest"]] == [
        ("H100", 1, True),
        ("H100", 2, True),
    ]
    assert sum(o["fastest"] for o in data["options"]) == 1
    assert {p["gpu"] for p in data["prices"]} == {"A100", "H100"}
    assert data["prices_age_days"] == 71 and data["prices_stale"] and "2026-09-25" in data["prices_oldest"]


def test_cli_text_marks_cheapest_and_fastest_and_cites_prices():
    r = cli(
        "cost", "--samples-per-sec", "100", "--measured-on", "A100", "--dataset-size", "1e6", "--epochs", "2", env=TODAY
    )
    assert r.code == 0, r.err
    assert "cheapest" in r.out and "fastest" in r.out and "runpod.io/pricing" in r.out and "assumed:" in r.out
    assert "WARN prices read 171 days ago (oldest used: A10G AWS on-demand, 2026-06-17): over 60 days" in r.out


def table(out: str) -> list[str]:
    """The lines from the column headers to the notes."""
    lines = out.splitlines()
    first = next(i for i, line in enumerate(lines) if line.split()[:2] == ["N", "samples/s"])
    last = next(i for i, line in enumerate(lines) if line.startswith("assumed:"))
    return lines[first:last]


@pytest.mark.parametrize("columns", ["80", "60"])
def test_at_80_columns_and_piped_no_value_is_split_and_no_line_is_longer(columns):
    """Issue 41 part 4: a 20-row table read as 36 broken lines ("9 min 50" / "s", "peak" / "×0.53")."""
    r = cli("cost", *GUIDE, env={"COLUMNS": columns, **TODAY})
    j = cli("cost", *GUIDE, "--json", env=TODAY).json()
    assert r.code == 0, r.err
    lines = table(r.out)
    assert all(len(line) <= int(columns) for line in lines), [line for line in lines if len(line) > int(columns)]
    rows = [line for line in lines if re.match(r"\s*\d+\s", line)]
    shown = [o for o in j["options"] if o["hours"] is not None]
    assert len(rows) == len(shown) == 16  # one line per configuration: nothing wrapped onto a line of its own
    for line, o in zip(rows, shown):
        assert line.split()[:4] == [
            str(o["count"]),
            f"{o['samples_per_sec']:,.0f}",
            cost.format_hours(o["hours"]),
            cost.format_money(o["cost"], "USD"),
        ], line
        assert ("ceiling" in line) == (o["speed_basis"] == "assumed")  # a peak ratio's speed is a ceiling, on the row
    h100 = [i for i, line in enumerate(lines) if line.startswith("H100 ")]  # its facts, once, above its rows
    facts = "H100 · RunPod secure · $3.49/GPU-h · speed ≤ A100 × 3.17 (peak ratio)"
    assert len(h100) == 1 and (
        lines[h100[0]] == facts
        if columns == "80"
        else lines[h100[0] : h100[0] + 2] == [facts[:34], "    " + facts[37:]]
    )
    if columns == "80":  # the marks fit beside the rows; ties said on every tied row, nothing singled out
        marked = [line.split("ideal", 1)[1].strip() for line in rows if "cheapest" in line or "fastest" in line]
        assert marked == ["cheapest (tie)"] * 3 + ["cheapest (tie), fastest (tie)", "fastest (tie)"]
    else:  # narrower: the marks move below the table, whole
        assert "cheapest (tie): H100 RunPod secure ×1, ×2, ×4, ×8\n" in r.out


def test_cli_guide_example_ties_h100_counts_instead_of_advising_eight():
    r = cli("cost", *GUIDE, "--gpus", "A100,H100", "--count", "1,4,8", env={"COLUMNS": "80", **TODAY})
    assert r.code == 0, r.err
    rows = [line for line in table(r.out) if re.match(r"\s*\d+\s", line) and ("cheapest" in line or "fastest" in line)]
    assert [line.split("ideal", 1)[1].strip() for line in rows] == ["cheapest (tie)"] * 2 + [
        "cheapest (tie), fastest"
    ] and [line.split()[0] for line in rows] == ["1", "4", "8"]
    assert "(tie) = rows whose figures print the same" in r.out


def test_cli_fresh_and_stale_price_files(tmp_path):
    fresh = price_file(tmp_path, "H100,Lambda,on-demand,2.49,USD,1,,https://example.com/q,2026-11-25,", name="f.csv")
    stale = price_file(tmp_path, "H100,Lambda,on-demand,2.49,USD,1,,https://example.com/q,2026-09-01,", name="s.csv")
    args = ("cost", "--samples-per-sec", "100", "--dataset-size", "360000", "--epochs", "1", "--count", "1")
    ok = cli(*args, "--prices", str(fresh), env=TODAY)
    assert ok.code == 0, ok.err
    assert "prices read 10 days ago (oldest used: H100 Lambda on-demand, 2026-11-25)" in ok.out and "WARN" not in ok.out
    old = cli(*args, "--prices", str(stale), env=TODAY)
    assert old.code == 0 and "WARN prices read 95 days ago" in old.out and "over 60 days" in old.out
    assert cli(*args, "--prices", str(fresh), "--json", env=TODAY).json()["prices_stale"] is False


def test_cli_a_cny_price_prints_as_cny_and_currencies_are_compared_apart(tmp_path):
    f = price_file(
        tmp_path,
        "H100,AutoDL,on-demand,18.0,CNY,1,,https://example.cn/q,2026-12-01,",
        "H100,Lambda,on-demand,2.49,USD,1,,https://example.com/q,2026-12-01,",
        "H100,Cheapo,spot,1.00,USD,8,,https://example.com/s,2026-12-01,",
    )
    args = (
        "cost",
        "--samples-per-sec",
        "100",
        "--dataset-size",
        "360000",
        "--epochs",
        "1",
        "--count",
        "1,8",
        "--prices",
        str(f),
    )
    r = cli(*args, env=TODAY)
    assert r.code == 0, r.err
    assert "H100 · AutoDL on-demand · 18.00 CNY/GPU-h" in r.out and "18.00 CNY" in r.out
    assert "H100 · Cheapo spot · $1.00/GPU-h, billed per 8-GPU box" in r.out and "billed 8" in r.out
    assert "costs in CNY, USD: compared within each currency" in r.out
    j = cli(*args, "--json", env=TODAY).json()
    cheapest = {(j["prices"][o["offer"]]["provider"], o["count"], o["currency"]) for o in j["options"] if o["cheapest"]}
    assert cheapest == {("AutoDL", 1, "CNY"), ("AutoDL", 8, "CNY"), ("Cheapo", 8, "USD")}
    one_cny = next(o for o in j["options"] if o["currency"] == "CNY" and o["count"] == 1)
    assert one_cny["cost"] == pytest.approx(18.0)


def test_cli_price_override_and_missing_gpu(tmp_path):
    f = price_file(tmp_path, "H100,Lambda,on-demand,2.0,USD,1,,https://example.com/q,2026-12-01,")
    ok = cli(
        "cost",
        "--samples-per-sec",
        "100",
        "--dataset-size",
        "360000",
        "--epochs",
        "1",
        "--prices",
        str(f),
        "--count",
        "1",
        "--json",
        env=TODAY,
    )
    assert ok.code == 0, ok.err
    assert [(o["gpu"], o["cost"]) for o in ok.json()["options"]] == [("H100", pytest.approx(2.0))]
    missing = cli(
        "cost",
        "--samples-per-sec",
        "100",
        "--measured-on",
        "H100",
        "--dataset-size",
        "1e6",
        "--epochs",
        "1",
        "--prices",
        str(f),
        "--gpus",
        "H100,A100",
        env=TODAY,
    )
    assert missing.code == 2 and "A100" in missing.err and "quotes.csv" in missing.err
    assert len(missing.err.strip().splitlines()) == 1 and "Traceback" not in missing.err
    broken = price_file(tmp_path, "H100,Lambda,later,2.0,USD,1,,https://example.com/q,2027-12-01,", name="b.csv")
    bad = cli(
        "cost", "--samples-per-sec", "100", "--dataset-size", "1e6", "--epochs", "1", "--prices", str(broken), env=TODAY
    )
    assert bad.code == 2 and len(bad.err.strip().splitlines()) == 1 and "Traceback" not in bad.err
    assert "b.csv line 2: tier 'later'" in bad.err and "and 1 more problem(s)" in bad.err


@pytest.mark.parametrize(
    "args,expect",
    [
        (["--samples-per-sec", "100", "--dataset-size", "1e6", "--epochs", "1"], "--measured-on"),
        (
            [
                "--samples-per-sec",
                "100",
                "--measured-on",
                "A100",
                "--dataset-size",
                "1e6",
                "--epochs",
                "1",
                "--gpus",
                "TPUv5",
            ],
            "TPUv5",
        ),
        (
            [
                "--samples-per-sec",
                "100",
                "--measured-on",
                "A100",
                "--dataset-size",
                "1e6",
                "--epochs",
                "1",
                "--count",
                "1,x",
            ],
            "--count",
        ),
        (
            [
                "--samples-per-sec",
                "100",
                "--measured-on",
                "A100",
                "--dataset-size",
                "1e6",
                "--epochs",
                "1",
                "--count",
                "0",
            ],
            "--count",
        ),
        (["--samples-per-sec", "-5", "--measured-on", "A100", "--dataset-size", "1e6", "--epochs", "1"], "positive"),
        (
            [
                "--samples-per-sec",
                "100",
                "--measured-on",
                "A100",
                "--dataset-size",
                "1e6",
                "--epochs",
                "1",
                "--prices",
                "/nonexistent/prices.json",
            ],
            "price files are CSV now",
        ),
        (["--from", "/nonexistent/scale.json", "--dataset-size", "1e6", "--epochs", "1"], "no such file"),
        (
            [
                "--samples-per-sec",
                "100",
                "--measured-on",
                "A100",
                "--dataset-size",
                "1e6",
                "--epochs",
                "1",
                "--prices",
                "/nonexistent/prices.csv",
            ],
            "no such file",
        ),
    ],
)
def test_cli_bad_input_is_one_line_exit_2(args, expect, capsys, monkeypatch):
    for name, value in TODAY.items():
        monkeypatch.setenv(name, value)
    assert expect in refused(capsys, "cost", *args)


@pytest.mark.parametrize(
    "name, key",
    [
        ("NVIDIA A100-SXM4-80GB", "A100"),
        ("NVIDIA A100-PCIE-40GB", "A100"),
        ("NVIDIA A100 80GB PCIe", "A100"),
        ("NVIDIA H100 80GB HBM3", "H100"),
        ("NVIDIA H200", "H200"),
        ("NVIDIA GeForce RTX 4090", "RTX4090"),
        # parts whose names contain a row's but whose peak is lower: no peak rather than a wrong one
        ("NVIDIA GeForce RTX 4090 D", None),
        ("NVIDIA GeForce RTX 4090 Laptop GPU", None),
        ("NVIDIA H100 PCIe", None),
        ("NVIDIA H100 NVL", None),
        ("NVIDIA H200 NVL", None),
        ("NVIDIA A100X", None),
    ],
)
def test_device_peaks_go_to_exact_board_names_only(name, key):
    assert cost.gpu_of_device(name) == key
    peak = cost.device_peak(name)
    assert (peak.gpu if peak else None) == (key if key in cost.PEAKS else None)


def test_every_a100_gets_the_datasheets_312_tflops():
    # Refused before for the PCIe boards, whose datasheet figure is the SXM one's.
    assert {cost.device_peak(n).bf16_dense_tflops for n, k in cost.DEVICE_NAMES.items() if k == "A100"} == {312.0}


def test_durations_that_differ_print_differently():
    from ddplab.perf.cost import format_hours

    shown = {s: format_hours(s / 3600) for s in (0.4, 42, 60, 95, 150, 189, 599.6, 1800, 5400, 3 * 86400)}
    assert shown == {
        0.4: "0s",
        42: "42s",
        60: "1m",
        95: "1m35s",
        150: "2m30s",
        189: "3m09s",
        599.6: "10m",
        1800: "30m",
        5400: "1.5h",
        3 * 86400: "3.0d",
    }
    assert format_hours(None) == "—"


def test_money_is_compact_and_keeps_its_currency():
    shown = [
        cost.format_money(a, c)
        for a, c in (
            (12.4, "USD"),
            (0.371, "USD"),
            (0.047, "USD"),
            (0.0042, "USD"),
            (1234.5, "USD"),
            (3.1, "EUR"),
            (12.4, "CNY"),
            (0.996, "GBP"),
        )
    ]
    assert shown == ["$12.40", "$0.37", "$0.047", "$0.0042", "$1,234", "€3.10", "12.40 CNY", "£1.00"]
    assert cost.format_price(PRICES["A10G"]) == "$1.006" and cost.format_price(PRICES["A100"]) == "$1.59"


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
    from inproc import here as cli  # memory starts no process: its entry point in this process

    ran = cli("memory", "linear", "--strategy", "ddp", "--gpus", "24GiB,24GB,A100", "--json", timeout=120)
    assert ran.code == 0, ran.err
    fits = {f["gpu"]: f for f in ran.json()["fits"]}
    assert fits["24 GiB"]["memory_bytes"] == 24 * 2**30 and fits["24 GB"]["memory_bytes"] == 24 * 10**9
    assert fits["A100"]["memory_bytes"] == 80 * 2**30 and "81920 MiB" in fits["A100"]["source"]
    text = cli("memory", "linear", "--strategy", "ddp", "--gpus", "24GB", timeout=120).out
    assert "22.35 GiB" in text  # 24·10^9 bytes, said in GiB
    bad = cli("memory", "linear", "--gpus", "24TB", timeout=120)
    assert bad.code == 2 and "24GiB" in bad.err and "Traceback" not in bad.err
