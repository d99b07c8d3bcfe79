"""ddplab bench: the arithmetic (bus factors, ring fit, sizes) in-process; every op on 2 and 3 real gloo ranks
through the CLI; a wrong element (exit 1), a hang (exit 3), an unsupported dtype (skipped), bad input (exit 2)."""

from __future__ import annotations

import csv
import math
import random
from types import SimpleNamespace

import pytest
from conftest import cli, refused

from ddplab.errors import DdplabError
from ddplab.perf.bench import (
    OPS,
    PAGE,
    PAGE_OFFSET,
    _Collective,
    algbw_gbps,
    bus_factor,
    fit_ring,
    format_size,
    parse_size,
    plan_sizes,
    run_bench,
    summarize,
)

SMALL = ["-b", "1K", "-e", "16K", "-f", "4", "-n", "3", "-w", "1"]  # 3 sizes, few calls: seconds, not minutes

# ------------------------------------------------------------------------------------------------ arithmetic


def test_sizes_parse_with_binary_suffixes():
    assert [parse_size(s) for s in ("1024", "1K", "8k", "64M", "1G", "2KiB", "1.5K")] == [
        1024,
        1024,
        8192,
        64 << 20,
        1 << 30,
        2048,
        1536,
    ]
    assert [format_size(n) for n in (1024, 64 << 20, 1 << 30, 1020)] == ["1K", "64M", "1G", "1020"]
    with pytest.raises(DdplabError, match="not a byte count"):
        parse_size("12X")


@pytest.mark.parametrize("n", [2, 3, 4, 8, 16])
def test_bus_factors_are_nccl_tests_formulas(n):
    # NVIDIA/nccl-tests doc/PERFORMANCE.md, "Summary"
    assert bus_factor("all_reduce", n) == pytest.approx(2 * (n - 1) / n)
    for op in ("all_gather", "reduce_scatter", "all_to_all"):
        assert bus_factor(op, n) == pytest.approx((n - 1) / n)
    assert bus_factor("broadcast", n) == 1.0


def test_bus_factor_known_values():
    assert bus_factor("all_reduce", 2) == 1.0  # 2 ranks: each sends half, receives half, twice
    assert bus_factor("all_reduce", 8) == 1.75
    assert bus_factor("all_gather", 4) == 0.75
    assert bus_factor("all_reduce", 1) == 0.0  # nothing crosses a link
    assert algbw_gbps(2_000_000_000, 2.0) == 1.0
    with pytest.raises(ValueError):
        bus_factor("gather", 2)


def _ring_times(n, alpha, bandwidth, sizes):
    return [2 * (n - 1) / n * s / bandwidth + 2 * (n - 1) * alpha for s in sizes]


@pytest.mark.parametrize("n", [2, 3, 8])
def test_ring_fit_recovers_alpha_and_bandwidth(n):
    sizes = [1024 << k for k in range(17)]  # 1K..64M
    fit = fit_ring(n, sizes, _ring_times(n, 25e-6, 1.2e9, sizes))
    assert fit.alpha_us == pytest.approx(25.0, rel=1e-6)
    assert fit.bandwidth_gbps == pytest.approx(1.2, rel=1e-6)
    assert fit.points == 17 and fit.rms_rel_error < 1e-9


def test_ring_fit_with_noise_stays_close():
    rng = random.Random(5)
    sizes = [1024 << k for k in range(17)]
    times = [t * (1 + rng.uniform(-0.05, 0.05)) for t in _ring_times(4, 80e-6, 10e9, sizes)]
    fit = fit_ring(4, sizes, times)
    assert fit.alpha_us == pytest.approx(80.0, rel=0.1)
    assert fit.bandwidth_gbps == pytest.approx(10.0, rel=0.1)
    assert 0.005 < fit.rms_rel_error < 0.05


def test_ring_fit_refuses_what_it_cannot_fit():
    assert fit_ring(1, [1024, 2048], [1e-5, 2e-5]) is None  # one rank: no ring
    assert fit_ring(2, [1024, 1024], [1e-5, 2e-5]) is None  # one size: no slope
    assert fit_ring(2, [1024, 2048, 4096], [3e-5, 2e-5, 1e-5]) is None  # faster when larger: no bandwidth


def test_size_plan_steps_and_rounds():
    assert plan_sizes(1024, 65536, 2, "float32", 2) == ([1024 << k for k in range(7)], [])
    sizes, notes = plan_sizes(1024, 16384, 4, "float32", 3)
    assert sizes == [1020, 4092, 16380]  # multiples of 4 B × 3 ranks
    assert "1024→1020" in notes[0] and "multiple of 12 B" in notes[0]
    assert plan_sizes(12, 48, 2, "float32", 3)[0] == [12, 24, 48]


@pytest.mark.parametrize(
    "args, message",
    [
        ((65536, 1024, 2, "float32", 2), "larger than --max-bytes"),
        ((1024, 4096, 1.5, "float32", 2), "at least 2"),
        ((1024, 4096, math.nan, "float32", 2), "at least 2"),
        ((1024, 4096, 2, "float128", 2), "unknown --dtype"),
        ((8, 4096, 2, "float32", 3), "too small for 3 ranks"),
    ],
)
def test_size_plan_rejects(args, message):
    with pytest.raises(DdplabError, match=message):
        plan_sizes(*args)


def test_summary_averages_times_over_ranks_and_sums_wrong():
    cfg = {
        "ops": ["all_reduce", "broadcast"],
        "sizes": [1024, 2048],
        "dtype": "float32",
        "iters": 3,
        "warmup": 1,
        "in_place": False,
    }

    def rank(t, wrong):
        return {
            "backend": "gloo",
            "device": "cpu",
            "copy_gbps": 10.0,
            "copy_kind": "copy",
            "ops": {
                "all_reduce": {"rows": [[1024, t, wrong], [2048, 2 * t, 0]]},
                "broadcast": {"skipped": "gloo cannot"},
            },
        }

    r = summarize(cfg, [rank(1e-3, 0), rank(3e-3, 2)])
    assert [row.time_us for row in r.rows] == pytest.approx([2000.0, 4000.0])
    assert r.rows[0].wrong == 2 and r.wrong == 2 and r.status == "FAIL"
    assert r.rows[0].count == 256 and r.rows[0].in_place  # torch's all_reduce is in place
    assert r.rows[0].algbw == pytest.approx(1024 / 2e-3 / 1e9)
    assert [(s.op, s.reason) for s in r.skipped] == [("broadcast", "gloo cannot")]
    assert r.peak_fraction == pytest.approx(r.peak_busbw / 10.0)


@pytest.mark.parametrize("in_place", [False, True])
@pytest.mark.parametrize("op", OPS)
def test_cpu_buffers_start_at_one_place_in_their_page_whatever_came_before(op, in_place):
    """gloo's busbw moves by 10-30 % with a buffer's offset in its page (docs/bench.md), and the allocator's choice
    depends on its history: small and large sizes, after other buffers were freed, all start at PAGE_OFFSET."""
    import torch

    ctx = SimpleNamespace(world_size=2, rank=1, device=torch.device("cpu"))
    for count in (2, 6000, 1 << 18, 1 << 18):  # the heap, then a fresh mapping, then the same size again
        freed = torch.ones(count * 2)
        del freed
        bench = _Collective(op, ctx, torch.float32, count, in_place)
        own = [bench.input] if not (op == "all_gather" and bench.in_place) else []  # else a block of the output
        own += [bench.output] if not (op == "reduce_scatter" and bench.in_place) else []
        assert own and all(t.data_ptr() % PAGE == PAGE_OFFSET and t.numel() in (count, count // 2) for t in own)
        if op != "all_gather":
            assert torch.equal(bench.input, bench._pattern(1, 0, count))


# ------------------------------------------------------------------------------------------------ real ranks

ROW_KEYS = {"op", "size", "count", "dtype", "in_place", "time_us", "algbw", "busbw", "wrong"}
RESULT_KEYS = {
    "status",
    "backend",
    "device",
    "world_size",
    "dtype",
    "iters",
    "warmup",
    "in_place",
    "rows",
    "skipped",
    "notes",
    "wrong",
    "avg_busbw",
    "ring_fit",
    "copy_gbps",
    "copy_kind",
    "peak_busbw",
    "peak_fraction",
    "seconds",
}


def test_two_ranks_every_op_json_csv_and_plot(tmp_path, no_leftover_workers):
    png, table = tmp_path / "bench.png", tmp_path / "bench.csv"
    ran = cli("bench", "--nproc", "2", *SMALL, "--json", "--csv", str(table), "--plot", str(png))
    assert ran.code == 0, ran.err
    data = ran.json()
    assert set(data) == RESULT_KEYS
    assert (data["status"], data["backend"], data["world_size"], data["wrong"]) == ("PASS", "gloo", 2, 0)
    assert not data["skipped"]  # gloo in torch ≥ 2.6 runs all five
    rows = data["rows"]
    assert [(r["op"], r["size"]) for r in rows] == [(op, s) for op in OPS for s in (1024, 4096, 16384)]
    for r in rows:
        assert set(r) == ROW_KEYS and r["wrong"] == 0 and r["time_us"] > 0
        assert r["algbw"] == pytest.approx(r["size"] / r["time_us"] / 1e3)
        assert r["busbw"] == pytest.approx(r["algbw"] * bus_factor(r["op"], 2))
    assert data["avg_busbw"] == pytest.approx(sum(r["busbw"] for r in rows) / len(rows))
    assert data["copy_gbps"] > 0 and data["peak_fraction"] > 0
    with open(table) as f:
        assert len(list(csv.DictReader(f))) == len(rows)
    blob = png.read_bytes()
    assert blob[:8] == b"\x89PNG\r\n\x1a\n"
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.image

    height, width, _ = matplotlib.image.imread(str(png)).shape
    assert width > 100 and height > 100


def test_three_ranks_uneven_sizes_in_place(no_leftover_workers):
    ran = cli("bench", "--nproc", "3", *SMALL, "--in-place", "--dtype", "float16", "--json")
    assert ran.code == 0, ran.err
    data = ran.json()
    assert data["world_size"] == 3 and data["wrong"] == 0 and not data["skipped"]
    assert {r["size"] for r in data["rows"]} == {1020, 4092, 16380}
    assert {r["op"] for r in data["rows"]} == set(OPS)
    assert all(r["wrong"] == 0 for r in data["rows"])
    placed = {r["op"]: r["in_place"] for r in data["rows"]}
    assert placed == {
        "all_reduce": True,
        "all_gather": True,
        "reduce_scatter": True,
        "broadcast": True,
        "all_to_all": False,
    }
    assert "rounded down" in ran.err and any("all_to_all" in n for n in data["notes"])
    assert data["ring_fit"] is None or data["ring_fit"]["points"] == 3


# The text table (nccl-tests' columns) is read in test_bench_warmup.py's header test, from its out-of-place run.


def test_a_wrong_element_fails_the_run(no_leftover_workers):
    # A corrupt fault: rank 0 feeds one wrong input element to all_reduce's check; every rank's sum is off in one.
    ran = cli(
        "bench",
        "all_reduce",
        "broadcast",
        "--nproc",
        "2",
        "-b",
        "1K",
        "-e",
        "2K",
        "-n",
        "1",
        "-w",
        "0",
        "--json",
        env={"DDPLAB_FAULT": "corrupt:0:bench.all_reduce"},
    )
    assert ran.code == 1, ran.err
    data = ran.json()
    assert data["status"] == "FAIL" and data["wrong"] == 4
    assert [(r["op"], r["wrong"]) for r in data["rows"]] == [
        ("all_reduce", 2),
        ("all_reduce", 2),
        ("broadcast", 0),
        ("broadcast", 0),
    ]


def test_a_hung_rank_is_named(no_leftover_workers):
    ran = cli(
        "bench",
        "all_gather",
        "--nproc",
        "2",
        "-b",
        "1K",
        "-e",
        "2K",
        "-n",
        "1",
        "-w",
        "0",
        "--timeout",
        "4",
        env={"DDPLAB_FAULT": "hang:1:bench.all_gather.2048"},
    )
    assert ran.code == 3, ran.err
    assert "rank 1" in ran.err and "bench.all_gather.2048" in ran.err and "Traceback" not in ran.err


def test_an_unsupported_dtype_is_skipped_not_failed(no_leftover_workers):
    # gloo carries no int16 (hence not in the CLI's --dtype list): each op is tried, and listed with gloo's reason.
    run, result = run_bench(
        ops=["all_reduce", "broadcast"],
        sizes=[1024],
        dtype="int16",
        nproc=2,
        iters=1,
        warmup=0,
        backend="gloo",
        device="cpu",
        timeout=60,
    )
    assert run.ok, run.summary()
    assert not result.rows and result.status == "PASS"
    assert [s.op for s in result.skipped] == ["all_reduce", "broadcast"]
    assert all("gloo cannot run" in s.reason and "int16" in s.reason for s in result.skipped)


# ------------------------------------------------------------------------------------------------ bad input


@pytest.mark.parametrize(
    "args, message",
    [
        (["-b", "64K", "-e", "1K"], "larger than --max-bytes"),
        (["-f", "1.5"], "at least 2"),
        (["all_reduc"], "unknown op all_reduc"),
        (["--dtype", "float128"], "unknown --dtype"),
        (["--nproc", "3", "-b", "8"], "too small for 3 ranks"),
        (["-b", "12X"], "not a byte count"),
        (["--plot", "bench.jpg"], "ending in .png"),
        (["--csv", "/no/such/folder/bench.csv"], "does not exist"),
        (["-n", "0"], "whole number"),
    ],
)
def test_bad_input_is_one_line_exit_2(args, message, capsys):
    assert message in refused(capsys, "bench", *args)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--device", "cuda"], "CUDA"),
        (["-e", "256G"], "lower --max-bytes"),
    ],
)
def test_input_refused_after_the_agent_started_ends_it(args, message, no_leftover_workers):
    # The agent starts before torch is imported here (to overlap the two imports); what only torch or the memory
    # check can refuse comes later, and must still be one line, exit 2, with the agent gone.
    ran = cli("bench", "all_reduce", *args, timeout=60)
    assert ran.code == 2, ran.err
    assert message in ran.err and len(ran.err.strip().splitlines()) == 1 and "Traceback" not in ran.err


def test_a_busy_master_port_is_one_line(busy_port, no_leftover_workers):
    ran = cli("bench", "all_reduce", "--master-port", str(busy_port), timeout=60)
    assert ran.code == 2 and "already in use" in ran.err and len(ran.err.strip().splitlines()) == 1


def test_on_gpus_busbw_is_not_compared_with_a_memory_copy():
    # A device-to-device copy runs in HBM at TB/s; busbw is bounded by NVLink/PCIe: no fraction, a note instead.
    from ddplab.perf.bench import GPU_REFERENCE_NOTE

    cfg = {"ops": ["all_reduce"], "sizes": [1024, 2048], "dtype": "float32", "iters": 3, "warmup": 1, "in_place": False}
    ranks = [
        {
            "backend": "nccl",
            "device": "cuda",
            "copy_gbps": None,
            "copy_kind": "",
            "ops": {"all_reduce": {"rows": [[1024, 1e-5, 0], [2048, 2e-5, 0]]}},
        }
        for _ in range(2)
    ]
    r = summarize(cfg, ranks)
    assert r.peak_busbw > 0 and r.peak_fraction is None and GPU_REFERENCE_NOTE in r.notes


def test_the_worker_measures_a_copy_reference_only_off_gpus():
    import inspect

    from ddplab.perf import bench

    assert 'ctx.device.type != "cuda"' in inspect.getsource(bench.worker)


@pytest.mark.parametrize(
    "largest, total, fits",
    [
        (64 << 20, 80 << 30, None),  # the default -e on an 80 GiB GPU
        (32 << 30, 80 << 30, "16G"),  # 4 × 32 GiB do not fit in 90 % of 80 GiB, 4 × 16 GiB do
        (16 << 30, 24 << 30, "4G"),
    ],
)
def test_sizes_beyond_gpu_memory_are_refused_with_the_size_that_fits(largest, total, fits):
    from ddplab.perf.bench import gpu_memory_problem, per_rank_bytes

    per_rank = per_rank_bytes(["all_gather"], largest)  # 4 buffers of the largest size
    problem = gpu_memory_problem(largest, per_rank, total)
    if fits is None:
        assert problem is None
        return
    assert (
        problem.startswith(f"--max-bytes {format_size(largest)} needs about ") and f"use --max-bytes {fits} " in problem
    )
    size = int(fits[:-1]) << 30
    assert 4 * size <= 0.9 * total < 4 * 2 * size  # the named size fits, twice it does not
    assert "\n" not in problem
