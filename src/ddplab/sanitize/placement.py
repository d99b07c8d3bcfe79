"""Check `device-placement` (GPUs only): where each rank's model and loaded tensors really are.

- two ranks on one GPU: every rank of a node must own a GPU of its own (NCCL refuses a shared one with "Duplicate
  GPU detected"; gloo shares it silently, and each rank gets half of it);
- a rank whose parameters sit on another rank's GPU (a model built on cuda:0, or a second .to() that moved part of
  it): it competes with that rank for the GPU and copies across the bus every step;
- a torch.load without map_location that puts a checkpoint saved from cuda:0 back on cuda:0 on every rank: the
  checkpoint fills GPU 0 once per rank before anything moves it.

Rank side: at the first counted optimizer step, the devices of the parameters the optimizer steps (and, for CUDA,
the GPU's UUID: CUDA_VISIBLE_DEVICES may give each rank another physical GPU as cuda:0), the rank's current device
and host; for each torch.load of the window (its first LOADS), the CUDA devices of the tensors it returned, whether a
map_location was given, and the caller's line. On a CPU run everything is "cpu" and the check says nothing.
"""

from __future__ import annotations

import functools
import os
import socket

from ddplab.sanitize import Finding, ranks_text, rankside, short

ID = "device-placement"
LOADS = 8  # torch.load calls recorded per rank: a resume loads once or twice; a loop of loads is not the point
WALK = 10_000  # values looked at in what torch.load returned (a state_dict's tensors, nested dicts and lists)


class Observer(rankside.Observer):
    ID = ID

    def __init__(self, window):
        super().__init__(window)
        self.loads: list[dict] = []
        self.params: dict | None = None
        self.undo = None

    def attach(self, torch) -> None:
        self.torch = torch
        load = torch.load
        obs = self

        @functools.wraps(load)
        def watched_load(*args, **kwargs):
            value = load(*args, **kwargs)
            if obs.undo is not None and len(obs.loads) < LOADS:
                given = kwargs.get("map_location", args[1] if len(args) > 1 else None) is not None
                obs.guarded(obs.loaded, value, given)
            return value

        torch.load = watched_load
        self.undo = (torch, load)

    def loaded(self, value, map_location_given: bool) -> None:
        devices = sorted(_cuda_devices(self.torch, value))
        if devices:
            self.loads.append({"devices": devices, "map_location": map_location_given, "where": self.window.where()})

    def forked(self) -> None:
        self.loads, self.params = [], None

    def steps(self) -> set[int]:
        return {1}

    def on_step(self, step: int, optimizer) -> None:
        torch = self.torch
        devices = sorted({str(p.device) for group in optimizer.param_groups for p in group["params"]})
        cuda = [d for d in devices if d.startswith("cuda")]
        self.params = {
            "devices": devices,
            "gpus": {d: _uuid(torch, d) for d in cuda},
            "current": torch.cuda.current_device() if cuda and torch.cuda.is_initialized() else None,
            "host": socket.gethostname(),
            "local_rank": int(os.environ.get("LOCAL_RANK", "0")),
            "where": self.window.where(),
        }

    def stop(self) -> None:
        if self.undo is not None:
            torch, load = self.undo
            torch.load = load
            self.undo = None

    def data(self) -> dict:
        return {"params": self.params, "loads": self.loads}


def _cuda_devices(torch, value) -> set[str]:
    """The CUDA devices of the tensors in `value` (a tensor, or dicts/lists/tuples of them, as a checkpoint is)."""
    found, stack, seen = set(), [value], 0
    while stack and seen < WALK:
        item, seen = stack.pop(), seen + 1
        if isinstance(item, torch.Tensor):
            if item.is_cuda:
                found.add(str(item.device))
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return found


def _uuid(torch, device: str) -> str:
    """The physical GPU behind cuda:N in this process (its UUID where torch tells it), else the name itself."""
    try:
        return str(torch.cuda.get_device_properties(torch.device(device)).uuid)
    except Exception:  # noqa: BLE001 - older torch has no uuid: CUDA_VISIBLE_DEVICES then cannot be told apart
        return f"{os.environ.get('CUDA_VISIBLE_DEVICES', '')}/{device}"


# ------------------------------------------------------------------------------------------------------ reader side
def judge(ranks: dict[int, dict], world: int) -> list[Finding]:
    placed = {r: d["params"] for r, d in ranks.items() if d.get("params") and d["params"]["gpus"]}
    findings = []
    # the GPU each rank mainly trains on: its current device's, else its parameters' only or first GPU
    main: dict[int, tuple[str, str]] = {}
    for rank, p in placed.items():
        name = f"cuda:{p['current']}" if p["current"] is not None and f"cuda:{p['current']}" in p["gpus"] else None
        name = name or sorted(p["gpus"])[0]
        main[rank] = (p["host"], p["gpus"][name])
    sharing: dict[tuple[str, str], list[int]] = {}
    for rank, gpu in main.items():
        sharing.setdefault(gpu, []).append(rank)
    for (host, _), together in sorted(sharing.items(), key=lambda kv: min(kv[1])):
        if len(together) > 1:
            findings.append(_shared(host, sorted(together), placed))
    for rank, p in sorted(placed.items()):
        others = {main[o]: o for o in main if o != rank and main[o] != main[rank]}
        foreign = [d for d, gpu in sorted(p["gpus"].items()) if (p["host"], gpu) in others]
        if foreign:
            findings.append(_foreign(rank, p, foreign, others[(p["host"], p["gpus"][foreign[0]])]))
    findings += _loads(ranks, placed)
    return findings


def _shared(host: str, together: list[int], placed: dict[int, dict]) -> Finding:
    devices = ", ".join(f"rank {r}: {', '.join(placed[r]['devices'])}" for r in together)
    observed = f"ranks {ranks_text(together)} train on one GPU of {host} ({devices}; the same physical GPU)"
    fix = (
        "give each rank its own GPU before anything touches CUDA: local_rank = int(os.environ['LOCAL_RANK']); "
        "torch.cuda.set_device(local_rank); model.to(local_rank); DDP(model, device_ids=[local_rank])"
    )
    evidence = {"host": host, "ranks": together, "devices": {r: placed[r]["devices"] for r in together}}
    return Finding(ID, observed, fix, where=placed[together[0]]["where"], evidence=evidence)


def _foreign(rank: int, p: dict, foreign: list[str], owner: int) -> Finding:
    observed = (
        f"rank {rank} has parameters on {', '.join(foreign)}, the GPU rank {owner} trains on (its own: "
        f"{', '.join(d for d in p['devices'] if d not in foreign)})"
    )
    fix = "move the whole model to the rank's own device once: model.to(local_rank) before DDP(model, ...)"
    evidence = {"rank": rank, "devices": p["devices"], "foreign": foreign, "owner": owner}
    return Finding(ID, observed, fix, where=p["where"], evidence=evidence)


def _loads(ranks: dict[int, dict], placed: dict[int, dict]) -> list[Finding]:
    """torch.load without map_location that landed on a GPU other than the rank's own, on more than one rank."""
    wrong: dict[str, list[tuple[int, list[str]]]] = {}
    for rank, d in ranks.items():
        own = set(placed[rank]["gpus"]) if rank in placed else set()
        for load in d.get("loads", []):
            elsewhere = [dev for dev in load["devices"] if dev not in own]
            if elsewhere and not load["map_location"]:
                wrong.setdefault(load["where"] or "", []).append((rank, elsewhere))
                break
    findings = []
    for where, hits in sorted(wrong.items()):
        if len(hits) < 2 and len(ranks) > 1:
            continue  # one rank's odd load is not the every-rank pile-up this check is about
        landed = sorted({dev for _, devs in hits for dev in devs})
        observed = (
            f"torch.load at {short(where or None)} put the checkpoint's tensors on {', '.join(landed)} on ranks "
            f"{ranks_text([r for r, _ in hits])}, not on each rank's own GPU (no map_location: tensors go back to "
            "the device they were saved from)"
        )
        fix = "torch.load(path, map_location='cpu') (or map_location=f'cuda:{local_rank}'), then load_state_dict"
        evidence = {"ranks": [r for r, _ in hits], "devices": landed}
        findings.append(Finding(ID, observed, fix, where=where or None, evidence=evidence))
    return findings
