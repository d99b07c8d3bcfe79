"""bench: the header and every op's section agree on in place / out of place; each op is warmed up at its largest
and smallest sizes (nccl-tests' order) before its first timed size."""

from __future__ import annotations

from conftest import cli

from ddplab.perf.bench import run_bench


def test_header_and_sections_agree_on_in_place_and_the_table_has_nccl_tests_columns(no_leftover_workers):
    """The text output, out of place and in place: the header and each op's section agree. The out-of-place run
    (int8, 4K and 8K) is the table's test too (one run fewer than a test of its own): nccl-tests' columns, the
    average bus bandwidth beside the host's memory copy, the result, and a row as nccl-tests prints it."""
    ran = {}
    for flags, gather in (
        (["-b", "4K", "-e", "8K", "--dtype", "int8"], "out of place"),
        (["-b", "1K", "-e", "2K", "--in-place"], "in place"),
    ):
        ran[gather] = cli(
            "bench", "all_reduce", "all_gather", "all_to_all", "--nproc", "2", "-n", "2", "-w", "1", *flags, timeout=180
        )
        assert ran[gather].code == 0, ran[gather].err
        out = ran[gather].out
        header = out.splitlines()[0]
        assert (
            f"all_gather and reduce_scatter {gather}" in header and "all_reduce and broadcast always in place" in header
        ), header
        for section in ("# all_reduce (in place)", f"# all_gather ({gather})", "# all_to_all (out of place)"):
            assert section in out.splitlines(), out
    table = ran["out of place"].out
    for words in (
        "size",
        "count",
        "type",
        "time",
        "algbw",
        "busbw",
        "#wrong",
        "Avg bus bandwidth",
        "of the host's memory copy",
        "Result: PASS",
    ):
        assert words in table, words
    assert "      4096         4096      int8" in table, table


def test_each_op_warms_up_at_its_largest_then_smallest_size_before_timing(no_leftover_workers):
    phases = []
    run, result = run_bench(
        ops=["all_reduce", "all_gather"],
        sizes=[1024, 2048, 4096],
        dtype="float32",
        nproc=2,
        iters=2,
        warmup=1,
        on_event=lambda rank, e: phases.append((rank, e)),
    )
    assert result is not None, run.summary()
    for rank in (0, 1):
        mine = [e for r, e in phases if r == rank]
        names = [e["phase"] for e in mine]
        for op in ("all_reduce", "all_gather"):
            warm = names.index(f"bench.{op}.warmup")
            assert mine[warm]["sizes"] == [4096, 1024]
            assert warm < names.index(f"bench.{op}.1024")  # before the first timed size
    # -w 0 means no warm-up at all
    phases.clear()
    run, result = run_bench(
        ops=["all_reduce"],
        sizes=[1024],
        dtype="float32",
        nproc=2,
        iters=1,
        warmup=0,
        on_event=lambda rank, e: phases.append((rank, e)),
    )
    assert result is not None and not any(e["phase"].endswith(".warmup") for _, e in phases)
