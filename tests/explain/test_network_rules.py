"""Which layer a network failure came from: a gloo pair, NCCL's own sockets and shared memory, the rendezvous store,
or the OS. Each test names the invariant text it relies on and where torch, gloo or NCCL print it; the logs quoted
are in tests/logs/, cited there."""

from __future__ import annotations

import re

from explaincase import first_rule, quoted, rules

from ddplab.explain import catalogue
from ddplab.explain.matcher import explain_text
from ddplab.explain.rules import RULES


def test_connectfullmesh_whose_pair_read_failed_is_a_peer_that_went_away_not_an_address():
    # gloo/transport/tcp/pair.cc read(): EOF on a connected pair is "Connection closed by peer", a failed read
    # "Read error [ADDR]: <strerror>": the peer was reached, so the address it advertised is not the problem
    for tail in (
        "Connection closed by peer [134.61.201.231]:927",
        "Connection closed by peer [127.0.0.1]:18346",
        "Read error [10.0.0.2]:41272: Connection reset by peer",
    ):
        line = f"[E ProcessGroupGloo.cpp:138] Gloo connectFullMesh failed with [../third_party/gloo/gloo/transport/tcp/pair.cc:534] {tail}"
        found = rules(line)
        assert "gloo-address" not in found, (tail, found)
        assert found[0] == "peer-closed", (tail, found)


def test_connectfullmesh_that_could_not_connect_stays_the_address():
    for tail in ("no error", "timed out connecting: SO_ERROR: Connection refused, remote=[127.0.0.1]:<port>"):
        line = f"RuntimeError: Gloo connectFullMesh failed with [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:152] {tail}"
        assert rules(line)[0] == "gloo-address", tail


# pytorch/pytorch#113868 (description), verbatim: the agent's heartbeat and shutdown fail on a store that went away
KEEP_ALIVE = """\
[2023-11-16 15:09:18,364] torch.distributed.elastic.rendezvous.dynamic_rendezvous: [WARNING] The node 'LINK._7678_0' has failed to send a keep-alive heartbeat to the rendezvous '123' due to an error of type RendezvousConnectionError.
[2023-11-16 15:09:18,742] torch.distributed.elastic.multiprocessing.api: [WARNING] Sending process 7687 closing signal SIGTERM
[2023-11-16 15:09:18,760] torch.distributed.elastic.rendezvous.dynamic_rendezvous: [WARNING] The node 'LINK._7678_0' has failed to shutdown the rendezvous '123' due to an error of type RendezvousConnectionError.
Traceback (most recent call last):
  File "/home/duongxuanluan/.local/lib/python3.10/site-packages/torch/distributed/elastic/rendezvous/c10d_rendezvous_backend.py", line 113, in _call_store
    return getattr(self._store, store_op)(*args, **kwargs)
RuntimeError: Connection reset by peer
"""


def test_a_heartbeat_or_shutdown_that_lost_the_store_is_the_store_lost():
    found = rules(KEEP_ALIVE)
    assert found[0] == "rendezvous-store-lost", found
    assert "peer-closed" not in found, found  # the store's connection, not a gloo pair's


def test_a_store_call_that_lost_its_connection_is_not_a_gloo_peer():
    # c10d_rendezvous_backend.py _call_store raised it: the frame names the layer of a bare "Broken pipe"
    text = (
        "Traceback (most recent call last):\n"
        '  File "/x/torch/distributed/elastic/rendezvous/c10d_rendezvous_backend.py", line 113, in _call_store\n'
        "    return getattr(self._store, store_op)(*args, **kwargs)\n"
        "RuntimeError: Broken pipe\n"
    )
    assert "peer-closed" not in rules(text)
    # the same words from a gloo pair stay peer-closed
    gloo = (
        "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection closed by peer [10.0.0.2]:5353"
    )
    assert rules(gloo)[0] == "peer-closed"


def test_a_store_call_that_lost_its_connection_is_the_store_lost():
    # c10d_rendezvous_backend._call_store: an operation on the connected store, its server gone
    text = (
        "Traceback (most recent call last):\n"
        '  File "/opt/conda/lib/python3.10/site-packages/torch/distributed/elastic/rendezvous/c10d_rendezvous_backend'
        '.py", line 113, in _call_store\n'
        "    return getattr(self._store, store_op)(*args, **kwargs)\n"
        "RuntimeError: Connection reset by peer\n"
    )
    assert rules(text)[0] == "rendezvous-store-lost"


def test_the_rendezvous_failing_at_start_is_not_the_store_lost():
    # the first connect to the endpoint (c10d_rendezvous_backend._create_tcp_store): no store was ever reached
    text = (
        "RuntimeError: connect() timed out. Original timeout was 60000 ms.\n"
        "torch.distributed.elastic.rendezvous.api.RendezvousConnectionError: The connection to the C10d store has "
        "failed. See inner exception for details.\n"
    )
    assert "rendezvous-store-lost" not in rules(text)


def test_a_store_that_waited_for_its_clients_is_an_incomplete_rendezvous_even_cut_short():
    # TCPStore.cpp "Timed out after {} seconds waiting for clients. {}/{} clients joined."; lewandofskee/MobileMamba#15
    # titles it without the count
    assert rules("Timed out after 901 seconds waiting for clients")[0] == "rendezvous-incomplete"
    full = "torch.distributed.DistStoreError: Timed out after 901 seconds waiting for clients. 1/2 clients joined."
    assert rules(full)[0] == "rendezvous-incomplete"


def test_nccls_failed_socket_call_under_last_error_is_nccl_not_the_rendezvous():
    # EleutherAI/gpt-neox#1147 (pdsh prefixes, NCCL 2.14): socket.cc's "Net : Call to recv from ADDR<PORT> failed :
    # Connection refused" is NCCL's connection between ranks, not MASTER_ADDR's store
    text = quoted("nccl_internal_socket_gptneox1147.log")
    found = rules(text)
    assert "master-unreachable" not in found, found
    assert "nccl-socket" in found, found
    # the newer wording, without a pasted prefix
    line = "socketProgressOpt: Call to recv from 10.0.0.2<33759> failed : Connection refused"
    assert "master-unreachable" not in rules(line)


ERROR_WITH_VERSION = (
    "RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1275, "
    "internal error - please report this issue to the NCCL developers, NCCL version {}"
)


def test_ranks_that_print_different_nccl_versions_are_a_version_mismatch():
    # NVIDIA/nccl#1267: 2.20.5 on one node, 2.19.3 on the others; torch puts each rank's own version in its error
    # (NCCLUtils getNcclErrorDetailStr), NCCL its INFO line
    # (catalogue: include/cudawrap.h "NCCL version 2.32.3+cuda12.9")
    two = "\n".join(
        ["[rank0]: " + ERROR_WITH_VERSION.format("2.20.5"), "[rank8]: " + ERROR_WITH_VERSION.format("2.19.3")]
    )
    assert [m.rule for m in explain_text(two).matches][:2] == ["nccl-version-mismatch", "nccl-internal-error"]
    info = "node2:42:42 [0] NCCL INFO NCCL version 2.19.3+cuda12.3\n" + ERROR_WITH_VERSION.format("2.20.5")
    assert first_rule(info) == "nccl-version-mismatch"


def test_one_nccl_version_printed_many_times_is_not_a_mismatch():
    same = "\n".join(
        ["node1:42:42 [0] NCCL INFO NCCL version 2.19.3+cuda12.3"] * 50
        + ["[rank3]: " + ERROR_WITH_VERSION.format("2.19.3")] * 4
    )
    assert first_rule(same) == "nccl-internal-error"


def test_the_collnet_version_check_is_a_version_mismatch():
    # catalogue: nccl include/coll_net.h, fields filled in
    template = next(
        t["text"]
        for t in catalogue.load("nccl")["templates"]
        if t["text"].startswith("Mismatched NCCL version detected")
    )
    text = "node1:42:42 [0] include/coll_net.h:12 NCCL WARN " + template.replace("%d", "21903", 2).replace(
        "%d", "1"
    ).replace("%d", "22005")
    assert first_rule(text) == "nccl-version-mismatch"


# hiyouga/EasyR1#505: NCCL's misc/shmutils.cc prints open()'s strerror; the family of NCCL's plugins claimed it
# because one plugin template (plugin/rma.cc) is the bare text "No such file or directory"
EASYR1_505 = (
    "(WorkerDict pid=30332) [2025-09-18 23:23:41] is-dbtgkffan5rbutzq-devmachine-0:30332:30423 [0] "
    "misc/shmutils.cc:93 NCCL WARN Call to open failed: No such file or directory\n"
    "(WorkerDict pid=30332)\n"
    "(WorkerDict pid=30332) [2025-09-18 23:23:41] is-dbtgkffan5rbutzq-devmachine-0:30332:30423 [0] "
    "misc/shmutils.cc:129 NCCL WARN Error while attaching to shared memory segment /dev/shm/nccl-Ќ (size 0), "
    "error: No such file or directory (2)\n"
)


def test_a_strerror_text_alone_names_no_nccl_layer():
    # strerror(ENOENT) follows any failed open(): a shared-memory, a socket or a config file's
    assert "nccl-plugin" not in rules(EASYR1_505.splitlines()[0])
    families = [r for r in RULES if r.covers and not all(c.startswith("os:") for c in r.covers)]
    for family in families:
        for pattern in family.patterns:
            assert not re.fullmatch(pattern, "No such file or directory"), family.id


def test_attaching_to_a_peers_segment_is_not_a_full_dev_shm():
    # NCCL misc/shmutils.cc: "Error while attaching to shared memory segment %s (size %zu), error: %s (%d)" - the
    # peer created it; opening it allocates nothing
    for text in (EASYR1_505, quoted("nccl_shm_attach_nccl2059.log")):
        found = rules(text)
        assert found[0] == "nccl-shm-attach", found
        assert "shm-too-small" not in found and "nccl-plugin" not in found, found
    # creating one still is the size of /dev/shm
    creating = "misc/shmutils.cc:132 NCCL WARN Error while creating shared memory segment /dev/shm/nccl-WU88OE (size 9637888), error: No space left on device (28)"
    assert rules(creating)[0] == "shm-too-small"
