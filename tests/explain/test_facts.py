"""explain/facts.py: what a matched message itself states in its fixed slots (the rank, the collective, its size, the
timeout, the GPU, the port, the peer), in the JSON and under the matched line. Texts quoted from public logs
(cited) or tests/logs/."""

from __future__ import annotations

from explaincase import facts, quoted

from ddplab.explain.matcher import explain_text


def test_a_watchdog_timeout_names_the_rank_the_collective_its_size_and_the_timeout():
    # ProcessGroupNCCL's watchdog (sgl-project/sglang#1693, two ranks, verbatim)
    text = (
        "[rank1]:[E1016 03:31:38.928019586 ProcessGroupNCCL.cpp:607] [Rank 1] Watchdog caught collective operation "
        "timeout: WorkNCCL(SeqNum=9141, OpType=_ALLGATHER_BASE, NumelIn=19008, NumelOut=152064, Timeout(ms)=600000) "
        "ran for 600071 milliseconds before timing out.\n"
        "[rank4]:[E1016 03:31:38.928463388 ProcessGroupNCCL.cpp:607] [Rank 4] Watchdog caught collective operation "
        "timeout: WorkNCCL(SeqNum=9141, OpType=_ALLGATHER_BASE, NumelIn=19008, NumelOut=152064, Timeout(ms)=600000) "
        "ran for 600071 milliseconds before timing out.\n"
    )
    assert facts(text, "collective-timeout") == [
        "rank 1: _ALLGATHER_BASE #9141 of 19,008 elements waited 600,071 ms against a 600,000 ms timeout",
        "ranks 1, 4 timed out in that same collective",
    ]


def test_ranks_that_timed_out_at_different_collectives_are_told_apart():
    # torch 1.x wording, no element counts (pytorch/pytorch#118369's comment: rank 0 and rank 7 far apart)
    text = (
        "[E ProcessGroupNCCL.cpp:458] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=96120, "
        "OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 25624887 milliseconds before timing out.\n"
        "[E ProcessGroupNCCL.cpp:458] [Rank 7] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=64088, "
        "OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 25625251 milliseconds before timing out.\n"
    )
    found = facts(text, "collective-timeout")
    assert found[0] == "rank 0: ALLREDUCE #96120 waited 25,624,887 ms against a 1,800,000 ms timeout"
    assert "rank 0: ALLREDUCE #96120, rank 7: ALLREDUCE #64088" in found[1]


def test_a_collective_mismatch_names_both_ranks_shapes():
    text = quoted("collective_mismatch_spavl2.log")
    assert facts(text, "collective-mismatch") == [
        "rank 0 ran BROADCAST #14370 of shape [33554432] (BFloat16); rank 2 ran BROADCAST #14370 of shape "
        "[38838272] (BFloat16)"
    ]


def test_sizes_devices_ports_and_parameters_are_read_from_their_slots():
    assert facts(
        "RuntimeError: [enforce fail at ../third_party/gloo/gloo/transport/tcp/pair.cc:446] op.preamble.length <= "
        "op.nbytes. 1000 vs 12",
        "gloo-size-mismatch",
    ) == ["this rank received 1,000 bytes where it expected 12"]
    assert facts(
        "RuntimeError: The server socket has failed to listen on any local network address. port: 29500, useIpv6: "
        "0, code: -98, name: EADDRINUSE, message: address already in use",
        "port-in-use",
    ) == ["port 29500"]
    assert facts(
        "torch.distributed.DistNetworkError: The client socket has timed out after 10000ms while trying to connect "
        "to (localhost, 44557).",
        "master-unreachable",
    ) == ["could not connect to localhost:44557 after 10000ms"]
    assert facts(
        "Parameter at index 387 with name hf_model.roberta.encoder.layer.23.output.LayerNorm.weight has been marked "
        "as ready twice. This means that multiple autograd engine  hooks have fired for this particular parameter "
        "during this iteration.",
        "ddp-ready-twice",
    ) == ["parameter hf_model.roberta.encoder.layer.23.output.LayerNorm.weight (index 387) got its gradient twice"]


def test_an_oom_names_the_gpu_and_other_processes_on_it():
    old = (
        "RuntimeError: CUDA out of memory. Tried to allocate 2.87 GiB (GPU 0; 14.76 GiB total capacity; 8.77 GiB "
        "already allocated; 19.75 MiB free; 13.71 GiB reserved in total by PyTorch)"
    )
    assert facts(old, "cuda-oom") == ["GPU 0: tried to allocate 2.87 GiB, 19.75 MiB free of 14.76 GiB"]
    # torch >= 2.1 lists every process holding memory on that GPU
    new = (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 1 has a total capacity of "
        "79.15 GiB of which 3.75 MiB is free. Process 1931 has 40.00 GiB memory in use. Process 1932 has 39.14 GiB "
        "memory in use. Of the allocated memory 38.10 GiB is allocated by PyTorch"
    )
    found = facts(new, "cuda-oom")
    assert found[0] == "GPU 1: tried to allocate 20.00 MiB, 3.75 MiB free of 79.15 GiB"
    assert found[1].startswith("2 processes use this GPU (process 1931 holds 40.00 GiB, process 1932 holds 39.14 GiB)")


def test_an_nccl_218_internal_error_is_read_as_a_network_error():
    text = (
        ": torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1333,"
        " internal error - please report this issue to the NCCL developers, NCCL version 2.18.1"
    )
    found = facts(text, "nccl-internal-error")
    assert found[0].startswith('NCCL 2.18.1: NCCL 2.18 reports network errors as "internal error"'), found
    other = "RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1269, internal error, NCCL version 2.14.3"
    assert facts(other, "nccl-internal-error") == ["NCCL 2.14.3"]


def test_a_bare_rendezvous_connection_error_says_it_can_be_either_connect():
    # wenet-e2e/wekws#172's title (the description: jobs sharing the port, the first to finish took the store down)
    title = (
        "torch.distributed.elastic.rendezvous.api.RendezvousConnectionError: The connection to the C10d store has "
        "failed. See inner exception for details."
    )
    found = facts(title, "master-unreachable")
    assert found and "_call_store" in found[0] and "_create_tcp_store" in found[0], found
    # with its inner exception the log says which: the first connect, with its timeout read out
    first = "RuntimeError: connect() timed out. Original timeout was 60000 ms.\n" + title
    assert facts(first, "master-unreachable") == ["the connect to the store timed out after 60,000 ms"]


def test_a_store_barrier_tells_missing_ranks_from_ranks_started_twice():
    # tczhangzhi/pytorch-distributed#18: `srun -n2` running a script that mp.spawns 2 processes each (torch 1.x)
    twice = (
        "RuntimeError: Timed out initializing process group in store based barrier on rank: 2, for key: "
        "store_based_barrier_key:1 (world_size=2, worker_count=4, timeout=0:30:00)"
    )
    assert facts(twice, "rendezvous-incomplete")[0].startswith("4 processes joined a group of world_size=2")
    # torch 2.x's wording, a rank missing
    missing = (
        "torch.distributed.DistStoreError: Timed out initializing process group in store based barrier on rank 0, "
        "for key: store_based_barrier_key:1 (world_size=4, num_workers_joined=3, timeout=0:30:00 error=Socket Timeout)"
    )
    assert facts(missing, "rendezvous-incomplete") == ["3 of 4 processes arrived: 1 never reached it"]
    clients = "DistStoreError: Timed out after 901 seconds waiting for clients. 1/2 clients joined."
    assert facts(clients, "rendezvous-incomplete") == ["1 of 2 processes arrived: 1 never reached it"]


def test_a_lost_peer_names_its_address():
    # gloo's pair.cc and NCCL's socket.cc print the peer's address with the error (rwth-i6/i6_core#459,
    # EleutherAI/gpt-neox#1147)
    assert facts(quoted("peer_closed_fullmesh_i6core459.log"), "peer-closed") == [
        "the peer this rank lost: 134.61.201.231:927 (connection closed by peer)"
    ]
    assert facts(quoted("nccl_internal_socket_gptneox1147.log"), "nccl-socket") == [
        "NCCL's recv from NODE2_IP:56843 failed: Connection refused"
    ]


def test_facts_are_in_the_json_and_under_the_matched_line():
    import io

    from rich.console import Console

    from ddplab.explain.matcher import render
    from ddplab.report import to_jsonable

    e = explain_text("RuntimeError: op.preamble.length <= op.nbytes. 8 vs 4")
    assert to_jsonable(e)["matches"][0]["facts"] == ["this rank received 8 bytes where it expected 4"]
    out = io.StringIO()
    render(Console(file=out, markup=False, width=200), e)
    assert "   read:  this rank received 8 bytes where it expected 4" in out.getvalue()
