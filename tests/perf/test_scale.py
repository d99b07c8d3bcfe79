"""`ddplab scale`: the scaling model recovers known parameters from synthetic runs; the command end to end on CPU."""

from __future__ import annotations

import dataclasses
import random
from dataclasses import replace
from pathlib import Path

import pytest

from ddplab.errors import DdplabError
from ddplab.perf import scaling
from ddplab.perf.advice import EFFICIENCY_TARGET, Advice, try_advice
from ddplab.perf.prediction import Point
from ddplab.perf.scaling import MIB, Run, ScalingModel

TRUE = ScalingModel(
    compute_fixed_s=0.004,
    compute_per_sample_s=0.0005,
    grad_bytes=40 * MIB,
    latency_s=2e-4,
    bus_bytes_per_s=2e9,
    overlap=0.6,
)


def synthetic(model: ScalingModel, configs, noise: float = 0.0, seed: int = 0, compute: bool = True, comm: bool = True):
    """Runs as a recipe would report them, generated from known parameters (with optional multiplicative noise).
    compute/comm: whether the run measured its compute time and its total all_reduce time apart from the step."""
    rng = random.Random(seed)

    def jitter(x):
        return x * (1 + rng.uniform(-noise, noise))

    runs = []
    for n, b, k in configs:
        runs.append(
            Run(
                n,
                b,
                jitter(model.step_s(n, b, k)),
                accum_steps=k,
                grad_bytes=model.grad_bytes,
                compute_s=jitter(model.compute_s(b, k, n)) if compute else None,
                comm_s=jitter(model.comm_s(n)) if comm and n > 1 else None,
            )
        )
    return runs


GRID = [(n, b, 1) for n in (1, 2, 3) for b in (8, 32)]


def test_buckets_follow_ddp_defaults():
    assert scaling.buckets(0) == 0
    assert scaling.buckets(0.5 * MIB) == 1  # fits the 1 MiB first bucket
    assert scaling.buckets(1 * MIB + 1) == 2
    assert scaling.buckets(26 * MIB + 1) == 3  # 1 MiB + 25 MiB + rest
    assert scaling.buckets(100 * MIB, bucket_cap_mb=50) == 2  # an explicit cap also sizes the first bucket
    assert scaling.allreduce_s(1, 1e9, 1e-3, 1e9) == 0.0


def test_ring_allreduce_matches_nccl_tests_bus_bandwidth():
    # nccl-tests: busbw = (bytes / time) · 2(n−1)/n, so with no latency the bus bandwidth comes back out.
    n, nbytes, bus = 8, 256 * MIB, 100e9
    t = scaling.allreduce_s(n, nbytes, 0.0, bus)
    assert nbytes / t * 2 * (n - 1) / n == pytest.approx(bus)


def test_fit_recovers_known_parameters_from_measured_parts():
    m = scaling.fit(synthetic(TRUE, GRID))
    assert m.compute_fixed_s == pytest.approx(TRUE.compute_fixed_s, rel=1e-6)
    assert m.compute_per_sample_s == pytest.approx(TRUE.compute_per_sample_s, rel=1e-6)
    assert m.latency_s == pytest.approx(TRUE.latency_s, rel=1e-6)
    assert m.bus_bytes_per_s == pytest.approx(TRUE.bus_bytes_per_s, rel=1e-6)
    assert m.overlap == pytest.approx(TRUE.overlap, abs=1e-6)
    assert m.grad_bytes == TRUE.grad_bytes


def test_fit_recovers_from_step_times_alone_when_nothing_overlaps():
    truth = ScalingModel(0.01, 0.002, 8 * MIB, 5e-4, 5e8, overlap=0.0)
    m = scaling.fit(synthetic(truth, GRID, compute=False, comm=False))
    for name in ("compute_fixed_s", "compute_per_sample_s", "latency_s", "bus_bytes_per_s"):
        assert getattr(m, name) == pytest.approx(getattr(truth, name), rel=1e-6), name
    assert m.overlap == 0.0 and "only exposed comm" in m.provenance["overlap"]


def test_per_step_cost_needs_two_accumulation_settings_and_c0_two_batch_sizes():
    truth = replace(TRUE, step_fixed_s=0.003)
    full = scaling.fit(synthetic(truth, GRID + [(1, 8, 4)]))
    assert full.compute_fixed_s == pytest.approx(truth.compute_fixed_s, rel=1e-6)
    assert full.compute_per_sample_s == pytest.approx(truth.compute_per_sample_s, rel=1e-6)
    assert full.step_fixed_s == pytest.approx(truth.step_fixed_s, rel=1e-6)
    assert full.samples_per_sec(2, 8, 8) == pytest.approx(truth.samples_per_sec(2, 8, 8), rel=1e-6)
    folded = scaling.fit(synthetic(truth, GRID))  # one accumulation setting: o is charged per micro-step
    assert "per-step cost not separable" in folded.provenance["compute"] and folded.step_fixed_s == 0
    assert folded.samples_per_sec(1, 8) == pytest.approx(truth.samples_per_sec(1, 8), rel=1e-6)
    assert folded.samples_per_sec(1, 8, 4) < truth.samples_per_sec(1, 8, 4)
    one_size = scaling.fit(synthetic(truth, [(1, 8, 1), (1, 8, 2), (2, 8, 1)]))
    assert one_size.compute_fixed_s == 0 and "micro-step not separable" in one_size.provenance["compute"]
    assert one_size.samples_per_sec(1, 8, 3) == pytest.approx(truth.samples_per_sec(1, 8, 3), rel=1e-6)


def test_fit_recovers_a_compute_slowdown_and_exposed_comm_as_ddplab_train_reports_them():
    # `ddplab train` reports step time and exposed comm per rank, so compute is known and total comm is not.
    truth = replace(TRUE, overlap=0.0, slowdown={2: 1.3, 3: 1.6})
    runs = synthetic(truth, GRID, comm=False)
    m = scaling.fit(runs)
    assert m.slowdown == {2: pytest.approx(1.3), 3: pytest.approx(1.6)}
    assert m.latency_s == pytest.approx(truth.latency_s, rel=1e-6)
    assert m.bus_bytes_per_s == pytest.approx(truth.bus_bytes_per_s, rel=1e-6)
    for n, b, k in [(2, 64, 1), (2, 16, 4), (3, 48, 2)]:
        assert m.samples_per_sec(n, b, k) == pytest.approx(truth.samples_per_sec(n, b, k), rel=1e-6)
    assert m.slowdown_at(8) == pytest.approx(1.6)  # beyond the measured sizes: the largest one's factor


def test_fit_recovers_the_sync_cost_a_single_rank_also_pays():
    truth = replace(TRUE, overlap=0.0, sync_s=0.0008, slowdown={2: 1.2, 3: 1.2})
    m = scaling.fit(synthetic(truth, GRID, comm=False))
    assert m.sync_s == pytest.approx(truth.sync_s, rel=1e-6)
    assert m.latency_s == pytest.approx(truth.latency_s, rel=1e-6)
    # paid once per optimizer step: accumulation amortises it like communication
    assert m.samples_per_sec(1, 8, 4) == pytest.approx(truth.samples_per_sec(1, 8, 4), rel=1e-6)


def test_bench_link_then_overlap_from_step_times():
    # The shape `ddplab bench --json` writes: rows of all_reduce timings; its ring fit is reused, not redone.
    bench = {
        "world_size": 2,
        "ring_fit": None,
        "rows": [
            {
                "op": "all_reduce",
                "size": s,
                "time_us": 1e6 * scaling.allreduce_s(2, s, TRUE.latency_s, TRUE.bus_bytes_per_s),
            }
            for s in (4096, MIB, 64 * MIB)
        ],
    }
    link = scaling.link_from_bench(bench)
    assert link.latency_s == pytest.approx(TRUE.latency_s, rel=1e-6)
    assert link.bus_bytes_per_s == pytest.approx(TRUE.bus_bytes_per_s, rel=1e-6)
    fitted = scaling.link_from_bench({"world_size": 2, "ring_fit": {"alpha_us": 200.0, "bandwidth_gbps": 2.0}})
    assert (fitted.latency_s, fitted.bus_bytes_per_s) == (pytest.approx(2e-4), pytest.approx(2e9))
    runs = synthetic(TRUE, [(1, 8, 1), (1, 32, 1), (2, 8, 1), (2, 32, 1)], compute=False, comm=False)
    m = scaling.fit(runs, link)
    assert m.overlap == pytest.approx(TRUE.overlap, abs=1e-6)
    with pytest.raises(DdplabError, match="two or more message sizes"):
        scaling.link_from_bench({"world_size": 2, "ring_fit": None, "rows": bench["rows"][:1]})
    with pytest.raises(DdplabError, match="not the JSON"):
        scaling.link_from_bench({"rows": "nonsense"})


def test_one_larger_world_size_predicts_itself_and_says_what_it_cannot_split():
    runs = synthetic(TRUE, [(1, 8, 1), (1, 32, 1), (2, 8, 1), (2, 32, 1)])
    m = scaling.fit(runs)
    assert "not separable" in m.provenance["link"]
    for r in runs:
        assert m.samples_per_sec(r.world_size, r.batch_per_rank) == pytest.approx(r.samples_per_sec, rel=1e-6)


def test_the_baseline_run_is_reproduced_even_when_noisy_probes_ask_for_negative_terms():
    # A loaded machine: the doubled batch and the doubled accumulation came out faster per sample than the
    # baseline, which an unconstrained fit explains with a negative c0 or o. The baseline must still be matched.
    for probes in ([0.00100, 0.00130], [0.00100, 0.00100], [0.00200, 0.00110]):
        runs = [
            Run(1, 32, 0.00134, compute_s=0.00134),
            Run(2, 32, 0.0034, grad_bytes=MIB, compute_s=0.0019),
            Run(1, 64, probes[0], compute_s=probes[0]),
            Run(1, 32, probes[1], accum_steps=2, compute_s=probes[1]),
        ]
        m = scaling.fit(runs)
        assert min(m.compute_fixed_s, m.compute_per_sample_s, m.step_fixed_s) >= 0, probes
        for r in runs[:2]:
            assert m.samples_per_sec(r.world_size, r.batch_per_rank) == pytest.approx(r.samples_per_sec, rel=1e-9), (
                probes
            )


def test_noisy_measurements_still_predict_held_out_configurations():
    runs = synthetic(TRUE, GRID, noise=0.03, seed=1)
    m = scaling.fit(runs)
    for n, b, k in [(2, 64, 1), (3, 16, 4), (4, 32, 1), (8, 32, 2)]:
        assert m.samples_per_sec(n, b, k) == pytest.approx(TRUE.samples_per_sec(n, b, k), rel=0.05), (n, b, k)


def test_accumulation_and_bigger_batches_amortise_communication():
    one_sync = TRUE.samples_per_sec(4, 8, 1)
    assert TRUE.samples_per_sec(4, 8, 4) > one_sync and TRUE.samples_per_sec(4, 32, 1) > one_sync
    weak = scaling.efficiency(TRUE, 4, 32)
    strong = scaling.efficiency(TRUE, 4, 32, strong=True)
    assert 0 < strong < weak < 1


def test_faster_interconnects_predict_higher_throughput_and_each_row_is_sourced():
    rates = []
    for link in scaling.INTERCONNECTS:
        assert link.bus_gb_per_s > 0 and "http" in link.source and link.date[:2] == "20", link
        rates.append(TRUE.samples_per_sec(8, 32, bus_bytes_per_s=link.bus_gb_per_s * 1e9))
    assert rates == sorted(rates, reverse=True)  # the table is ordered fastest first


def test_model_round_trips_through_json_dicts():
    assert ScalingModel.from_dict(TRUE.to_dict()) == TRUE
    with pytest.raises(DdplabError):
        ScalingModel.from_dict({"nonsense": 1})


def test_fit_needs_runs_and_a_one_rank_baseline():
    with pytest.raises(DdplabError):
        scaling.fit([])
    with pytest.raises(DdplabError, match="world size 1"):
        scaling.fit([Run(2, 8, 0.1, grad_bytes=MIB)])


# ----------------------------------------------------------------------------------------------- advice


def _point(model, n, b, k=1):
    from ddplab.perf.prediction import Point

    one = model.samples_per_sec(1, b, k)
    sps = model.samples_per_sec(n, b, k)
    step = model.step_s(n, b, k)
    return Point(
        n,
        b,
        k,
        sps,
        sps / one,
        sps / one / n,
        step * 1e3,
        model.compute_s(b, k, n) * 1e3,
        (step - model.compute_s(b, k, n)) * 1e3,
        sps,
        sps,
    )


def test_no_advice_when_efficient():
    from ddplab.perf.advice import advise

    fast = replace(TRUE, bus_bytes_per_s=1e12, latency_s=1e-7)
    assert advise(fast, _point(fast, 4, 32), strong=False) == []


def test_advice_when_communication_dominates_predicts_gains():
    from ddplab.perf.advice import advise

    slow = replace(TRUE, bus_bytes_per_s=2e8, overlap=0.0)  # 40 MiB of gradients over 0.2 GB/s
    advice = {a.name: a for a in advise(slow, _point(slow, 4, 32), strong=False)}
    assert set(advice) == {
        "larger per-rank batch",
        "gradient accumulation",
        "fewer, larger buckets",
        "bf16 gradient compression",
    }
    assert advice["larger per-rank batch"].flags == ["--batch-size", "64"]
    assert advice["gradient accumulation"].flags == ["--grad-accum", "4"]
    assert advice["fewer, larger buckets"].flags == ["--bucket-cap-mb", "41"]
    for a in advice.values():
        assert a.predicted_gain > 1 and a.measured_gain is None
    assert advice["bf16 gradient compression"].predicted_gain == pytest.approx(
        slow.samples_per_sec(4, 32, grad_bytes=20 * MIB) / slow.samples_per_sec(4, 32)
    )


# ----------------------------------------------------------------------------------------------- the command


@pytest.mark.parametrize(
    "args,expect",
    [
        (["mlp"], "--nproc is required"),
        (["mlp", "--nproc", ""], "--nproc"),
        (["mlp", "--nproc", "1,a"], "--nproc"),
        (["mlp", "--nproc", "2,3"], "include 1"),
        (["mlp", "--nproc", "1"], "at least two"),
        (["mlp", "--nproc", "1,4096"], "more than this machine can run"),
        (["nosuch", "--nproc", "1,2"], "unknown recipe"),
        (["mlp", "--nproc", "1,2", "--batch-size", "x"], "batch-size"),
        (["mlp", "--nproc", "1,2", "--no-such-flag"], "--no-such-flag"),
        (["mlp", "--nproc", "1,2", "--plot", "out.jpg"], "PNG"),
        (["mlp", "--nproc", "1,2", "--checkpoint-dir", "ckpt"], "checkpoint-dir"),
        (["mlp", "--nproc", "1,2", "--strong", "--batch-size", "33"], "split evenly"),
        (["mlp", "--nproc", "1,2", "--bench", "nonexistent.json"], "no such file"),
    ],
)
def test_bad_input_is_one_line_exit_2(args, expect, tmp_path, capsys):
    from conftest import refused

    assert expect in refused(capsys, "scale", *args, cwd=tmp_path)


@pytest.mark.timeout(900)  # eight runs or so, each its own start of the ranks: minutes on the shared 2-core machine
def test_scale_end_to_end_on_1_and_2_cpu_ranks_measures_each_gain_then_cost(tmp_path, no_leftover_workers):
    """scale's four runs, fitted with a bench file's link (the fit from step times alone is unit-tested above), each
    piece of advice measured (--try-advice), then cost from scale's file. One scale run for what were two tests'
    (the end to end and --try-advice's, whose runs are the same four at another batch, then the advice's).
    The bench file is a real `ddplab bench --json` output kept in tests/logs/made/ (tools/make_test_logs.py):
    measured here, its times did not always grow with size on a loaded machine, and a file with no ring fit is
    refused (tests/perf/test_bench.py pins the keys of bench's JSON in real runs).
    Two samples per rank: gloo's all-reduce dwarfs the compute, so efficiency is low and advice is given."""
    import json
    import re

    from conftest import cli
    from matplotlib.image import imread

    path = Path(__file__).parents[1] / "logs" / "made" / "bench_all_reduce.json"
    link = scaling.link_from_bench(json.loads(path.read_text()))
    assert link.latency_s > 0 and link.bus_bytes_per_s > 0

    png = tmp_path / "scale.png"
    r = cli(
        "scale",
        "mlp",
        "--nproc",
        "1,2",
        "--batch-size",
        "2",
        "--max-steps",
        "90",
        "--bench",
        str(path),
        "--try-advice",
        "--json",
        "--plot",
        str(png),
        timeout=780,
    )
    assert r.code == 0, r.err
    data = r.json()
    assert "scale: 4 runs of mlp" in r.err, r.err
    # progress, run by run: the four of the study (1 and 2 ranks, then two 1-rank probes), then each piece of advice
    # measured at 2 ranks
    measured_here = sum(a["measured_gain"] is not None for a in data["advice"])
    done = [int(n) for n in re.findall(r"^scale: (\d+) rank\(s\) done in", r.err, re.M)]
    assert done == [1, 2, 1, 1] + [2] * measured_here, r.err
    assert data["recipe"] == "mlp" and data["device"] == "cpu" and data["backend"] == "gloo"
    assert [p["world_size"] for p in data["points"]] == [1, 2]
    one, two = data["points"]
    assert one["speedup"] == 1.0 and two["efficiency"] == pytest.approx(two["speedup"] / 2)
    assert data["batch_per_rank"] == 2 and two["samples_per_sec"] == pytest.approx(2 * 2 / (two["step_ms"] / 1e3))
    assert data["grad_bytes"] == 4 * 85002  # the mlp's parameters, one fp32 gradient each
    # the fitted model explains the runs it was fitted on: the first 1-rank run, which the compute line goes through;
    # at 2 ranks the link is --bench's, and where the run's exposed comm is longer than the bench link's whole
    # all_reduce (a noisy run), overlap stops at 0 and the model can only be faster than the run, not slower
    assert one["model_samples_per_sec"] == pytest.approx(one["samples_per_sec"], rel=0.05)
    assert two["model_samples_per_sec"] >= two["samples_per_sec"] * 0.95  # (a 1-rank wait longer than this one)
    assert {p["world_size"] for p in data["predictions"] if not p["measured"]} == {4, 8, 16, 32, 64}
    assert len(data["interconnects"]) == len(scaling.INTERCONNECTS)
    assert data["plot"] == str(png) and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert imread(str(png)).shape[2] in (3, 4)
    model = data["model"]  # the link is bench's; the overlap is fitted
    assert model["latency_s"] == pytest.approx(link.latency_s) and model["bus_bytes_per_s"] == pytest.approx(
        link.bus_bytes_per_s
    )
    assert 0 <= model["overlap"] <= 1 and "--bench" in model["provenance"]["link"]

    last = data["points"][-1]
    if last["efficiency"] < EFFICIENCY_TARGET:  # the usual case: advice given, and --try-advice measured it
        advice = data["advice"]
        assert advice
    else:
        # How efficient 2 ranks measure depends on the machine: with the other cores busy while the 1-rank run ran,
        # CI once measured 94 %. No advice is due then; the same measuring runs on that point directly.
        assert data["advice"] == []
        at = Point(**{f.name: last[f.name] for f in dataclasses.fields(Point) if f.name in last})
        pieces = [
            Advice("larger per-rank batch", "", ["--batch-size", str(2 * at.batch_per_rank)], 1.0),
            Advice("gradient accumulation", "", ["--grad-accum", "4"], 1.0),
        ]
        try_advice(pieces, at, "mlp", ["--max-steps", "90"])
        advice = [dataclasses.asdict(a) for a in pieces]
    for a in advice:
        assert (a["measured_gain"] is not None and a["measured_gain"] > 0) or "not measured" in a["note"], a
    measured = {a["name"] for a in advice if a["measured_gain"] is not None}
    assert {"larger per-rank batch", "gradient accumulation"} <= measured

    scale_json = tmp_path / "scale.json"
    scale_json.write_text(json.dumps(data))
    c = cli(
        "cost",
        "--from",
        str(scale_json),
        "--measured-on",
        "A100",
        "--gpus",
        "A100",
        "--count",
        "1,2,4",
        "--dataset-size",
        "1e6",
        "--epochs",
        "1",
        "--json",
    )
    assert c.code == 0, c.err
    opts = {o["count"]: o for o in c.json()["options"]}
    assert opts[1]["samples_per_sec"] == pytest.approx(one["samples_per_sec"])
    assert (
        opts[2]["samples_per_sec"] == pytest.approx(two["samples_per_sec"]) and opts[2]["scaling_basis"] == "measured"
    )
    assert opts[4]["scaling_basis"] == "predicted"
    cpu = cli("cost", "--from", str(scale_json), "--dataset-size", "1e6", "--epochs", "1")
    assert cpu.code == 2 and "cpu" in cpu.err and "--measured-on" in cpu.err and len(cpu.err.strip().splitlines()) == 1
    assert "on the GPU type you want to price" in cpu.err and "--samples-per-sec X" in cpu.err  # what to do instead


def test_a_file_that_is_not_bench_json_is_one_line(tmp_path, capsys):
    from conftest import refused

    bad = tmp_path / "bad.json"
    bad.write_text('{"rows": 3}')
    assert "not the JSON" in refused(capsys, "scale", "mlp", "--nproc", "1,2", "--bench", str(bad))


@pytest.mark.parametrize("strong", [False, True])
def test_the_table_is_whole_at_80_columns_and_piped(strong, monkeypatch, capsys):
    """Issue 42 point 9: piped or at 80 columns the table read "batch/r… samples… efficie…". Rendered as a pipe sees
    it (report.console: no terminal, COLUMNS=80), every header and value is whole and within 80 columns."""
    from ddplab import report
    from ddplab.commands.scale import render
    from ddplab.perf import prediction
    from ddplab.perf.advice import advise
    from ddplab.perf.study import ScaleResult

    runs = synthetic(TRUE, [(1, 32, 1), (2, 16 if strong else 32, 1), (3, 32, 1)])
    results = [{"samples_per_sec": r.samples_per_sec * 0.9} for r in runs]
    points = prediction.points(runs, results, TRUE)
    points[0].samples_per_sec = 1234567.0  # the widest figure a CPU run gives
    result = ScaleResult(
        "gpt", "cpu", "gloo", strong, 32, 1, int(TRUE.grad_bytes), [], points, TRUE.to_dict(),
        prediction.predict(TRUE, [1, 2, 3, 4, 8, 64], 32, 1, strong, [1, 2, 3]),
        prediction.interconnects(TRUE, [8, 64], 32, 1, strong),
        advise(TRUE, points[-1], strong, hook="fp16"),
    )  # fmt: skip
    monkeypatch.setenv("COLUMNS", "80")
    render(report.console(), result)  # stdout is captured: a pipe
    text = capsys.readouterr().out
    assert "…" not in text
    table = text.split("\nmodel:")[0].splitlines()[1:]
    assert max(len(line) for line in table) <= 80, "\n".join(table)
    assert "1,234,567" in text and ("batch/" in text) == strong
    for header in ("samples/s", "speedup", "ciency", "compute", "exposed", "comm ms"):
        assert header in "\n".join(table), header
