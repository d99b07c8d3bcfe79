"""The sanitizer's device-placement check: its reader on observations in the format a GPU rank writes (the GPU runs
themselves are in tests/gpu), and its rank side in this process on CPU, where it must stay silent."""

from __future__ import annotations

import torch
from sanitize.test_readout import SCRIPT, observed

from ddplab.sanitize import placement, readout

GPU0, GPU1, GPU2 = "GPU-aaaa", "GPU-bbbb", "GPU-cccc"


def params(gpus: dict[str, str], current: int | None, host: str = "node1", line: int = 50) -> dict:
    return {
        "devices": sorted(gpus),
        "gpus": gpus,
        "current": current,
        "host": host,
        "local_rank": 0,
        "where": f"{SCRIPT}:{line}",
    }


def findings(tmp_path, per_rank: dict[int, dict]) -> list:
    report = readout.read(observed(tmp_path, {r: {placement.ID: d} for r, d in per_rank.items()}))
    return report.findings


def test_ranks_each_on_their_own_gpu_say_nothing(tmp_path):
    right = {
        0: {
            "params": params({"cuda:0": GPU0}, 0),
            "loads": [{"devices": ["cuda:0"], "map_location": True, "where": None}],
        },
        1: {"params": params({"cuda:1": GPU1}, 1), "loads": []},
    }
    assert findings(tmp_path, right) == []


def test_the_same_cuda_index_on_other_physical_gpus_is_not_sharing(tmp_path):
    """CUDA_VISIBLE_DEVICES=RANK on each rank: all say cuda:0, the UUIDs differ."""
    visible = {0: {"params": params({"cuda:0": GPU0}, 0)}, 1: {"params": params({"cuda:0": GPU1}, 0)}}
    assert findings(tmp_path, visible) == []


def test_one_index_on_two_hosts_is_not_sharing(tmp_path):
    hosts = {0: {"params": params({"cuda:0": GPU0}, 0, "a")}, 1: {"params": params({"cuda:0": GPU0}, 0, "b")}}
    assert findings(tmp_path, hosts) == []


def test_two_ranks_on_one_gpu_are_named_with_the_fix(tmp_path):
    shared = {
        0: {"params": params({"cuda:0": GPU0}, 0)},
        1: {"params": params({"cuda:0": GPU0}, 0)},
        2: {"params": params({"cuda:2": GPU2}, 2)},
    }
    (f,) = findings(tmp_path, shared)
    assert f.check == "device-placement" and f.evidence["ranks"] == [0, 1]
    assert "ranks 0 and 1 train on one GPU of node1" in f.observed and "set_device(local_rank)" in f.fix
    assert f.where == f"{SCRIPT}:50"


def test_parameters_on_another_ranks_gpu_are_named(tmp_path):
    split = {
        0: {"params": params({"cuda:0": GPU0}, 0)},
        1: {"params": params({"cuda:0": GPU0, "cuda:1": GPU1}, 1)},
    }
    (f,) = findings(tmp_path, split)
    assert f.evidence == {"rank": 1, "devices": ["cuda:0", "cuda:1"], "foreign": ["cuda:0"], "owner": 0}
    assert "rank 1 has parameters on cuda:0, the GPU rank 0 trains on" in f.observed


def test_a_load_onto_cuda0_on_every_rank_is_named_once_with_its_line(tmp_path):
    load = {"devices": ["cuda:0"], "map_location": False, "where": f"{SCRIPT}:31"}
    piled = {r: {"params": params({f"cuda:{r}": g}, r), "loads": [load]} for r, g in enumerate((GPU0, GPU1, GPU2))}
    (f,) = findings(tmp_path, piled)
    assert f.where == f"{SCRIPT}:31" and f.evidence == {"ranks": [1, 2], "devices": ["cuda:0"]}
    assert "put the checkpoint's tensors on cuda:0 on ranks 1 and 2" in f.observed and "map_location" in f.fix
    given = {r: {**d, "loads": [{**load, "map_location": True}]} for r, d in piled.items()}
    assert findings(tmp_path / "given", given) == []  # map_location said where: the script chose it


def test_on_cpu_the_rank_side_records_no_gpu_and_the_check_is_silent(tmp_path):
    class Window:
        def where(self):
            return f"{SCRIPT}:7"

    observer, original = placement.Observer(Window()), torch.load
    observer.attach(torch)
    assert torch.load is not original
    try:
        model = torch.nn.Linear(2, 2)
        path = tmp_path / "m.pt"
        torch.save(model.state_dict(), path)
        assert torch.load(path, weights_only=True).keys() == model.state_dict().keys()  # the wrapper returns it
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        observer.on_step(1, opt)
    finally:
        observer.stop()
    assert torch.load is original  # stop() gave torch its own load back
    data = observer.data()
    assert data["params"]["devices"] == ["cpu"] and data["params"]["gpus"] == {} and data["loads"] == []
    assert findings(tmp_path / "r", {0: data, 1: data}) == []
