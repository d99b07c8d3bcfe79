"""Two machines that won't talk: for each fault planted for real on two network-namespace hosts (tests/netns.py),
plain torchrun against ddplab, side by side in one run; then the cross-node preflight's added time on a healthy
two-node `ddplab check`. Needs root, `ip` and `unshare` (as the tests).

    python benchmarks/multinode_faults.py                          # faults, cap 60 s each
    python benchmarks/multinode_faults.py --baseline-src /tmp/old/src --rounds 3   # + the healthy check, before/after

Per fault, on both hosts at once (the fault is planted on node 1):
  torchrun  `python -m torch.distributed.run --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint
            NODE0:PORT tests/scripts/good_ddp.py`: seconds until every node exited, or the cap; its last error line
  ddplab    `ddplab check --nproc 1 --device cpu --nnodes 2 --node-rank K --rdzv-endpoint NODE0:PORT` (for the
            hostname-to-loopback trap `ddplab launch` with torchrun's options, the user-script case): seconds and
            the verdict (the error line for launch)
Healthy: `ddplab check` of this tree against --baseline-src (the commit before the preflight), rounds alternated;
the median of the per-round differences is the preflight's added time.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from netns import hosts, popen_in  # noqa: E402

SCRIPT = str(ROOT / "tests" / "scripts" / "good_ddp.py")
SRC = str(ROOT / "src")


def _end(p: subprocess.Popen) -> None:
    import psutil

    try:
        procs = [psutil.Process(p.pid), *psutil.Process(p.pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return
    for q in procs:
        try:
            q.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(procs, timeout=5)


def _both(made, argv_for, env_for, cap: float, src: str = SRC):
    """Run argv_for(i) on each host at once; (seconds until all exited or cap, [(code, out, err)], capped)."""
    base = {"NO_COLOR": "1", "PYTHONPATH": src, "OMP_NUM_THREADS": "1"}
    start = time.monotonic()
    procs = [popen_in(h, argv_for(i, h), env={**base, **env_for(i)}) for i, h in enumerate(made)]
    ran, capped = [], False
    try:
        for p in procs:
            try:
                out, err = p.communicate(timeout=max(0.1, cap - (time.monotonic() - start)))
            except subprocess.TimeoutExpired:
                capped = True
                _end(p)
                out, err = p.communicate()
            ran.append((p.returncode, out, err))
    finally:
        for p in procs:
            _end(p)
    return time.monotonic() - start, ran, capped


def _last_error(text: str) -> str:
    # torch's own warning on every reverse lookup that fails in the namespaces: noise, not the fault's message
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and "hostname of the client socket" not in ln]
    hits = [ln for ln in lines if any(w in ln for w in ("Error", "error", "failed", "timed out", "Timeout"))]
    line = (hits or lines or ["(nothing printed)"])[-1]
    return line[:220]


def _torchrun(endpoint: str, nnodes: dict, offset: int):
    return lambda i, h: [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(nnodes.get(i + offset, 2)),
                         "--nproc-per-node", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint, SCRIPT]


def _check(endpoint: str, nnodes: dict, offset: int = 0):
    return lambda i, h: [sys.executable, "-m", "ddplab", "check", "--json", "--nproc", "1", "--device", "cpu",
                         "--nnodes", str(nnodes.get(i + offset, 2)), "--node-rank", str(i + offset),
                         "--rdzv-endpoint", endpoint]


def _launch(endpoint: str, nnodes: dict, offset: int):
    return lambda i, h: [sys.executable, "-m", "ddplab", "launch", "--nnodes", str(nnodes.get(i + offset, 2)),
                         "--nproc-per-node", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint,
                         "--no-lint", "--hang-timeout", "0", SCRIPT]


def _verdict(kind: str, code: int, out: str, err: str) -> str:
    if kind == "check":
        try:
            return json.loads(out)["verdict"][:300]
        except (ValueError, KeyError):
            return _last_error(err)
    return (err.strip().splitlines() or ["(nothing)"])[-1][:300]


# name: (env on node 1, --nnodes per node, loopback hosts, only node 1 runs (endpoint nobody has), ddplab command)
FAULTS = {
    "endpoint nobody answers": ({}, {}, (), True, "check"),
    "hostname -> 127.0.1.1 (user script)": ({}, {}, (1,), False, "launch"),
    "GLOO_SOCKET_IFNAME=lo": ({"GLOO_SOCKET_IFNAME": "lo"}, {}, (), False, "check"),
    "--nnodes 3 vs 2": ({}, {1: 3}, (), False, "check"),
    "stale NODE_RANK=0": ({"NODE_RANK": "0"}, {}, (), False, "check"),
    "stale MASTER_PORT=29400": ({"MASTER_PORT": "29400"}, {}, (), False, "check"),
    "torch version differs (test hook)": ({"DDPLAB_FAULT": "version:1:torch"}, {}, (), False, "check"),
}


def faults(cap: float, only: str = "") -> list[dict]:
    rows = []
    for n, (name, (env, nnodes, loopback, alone, kind)) in enumerate(FAULTS.items()):
        if only not in name:
            continue
        with hosts(2, loopback=loopback) as made:
            port = 29600 + 2 * n
            host = made[0].addr.rsplit(".", 1)[0] + ".99" if alone else made[0].addr
            row = {"fault": name}
            for who, port_, build in (("torchrun", port, _torchrun), ("ddplab", port + 1,
                                                                        _check if kind == "check" else _launch)):
                if who == "torchrun" and name.startswith("torch version"):
                    row[who] = {"seconds": None, "said": "(not plantable: the fault is ddplab's test hook)"}
                    continue
                on, offset = (made[1:], 1) if alone else (made, 0)
                env_for = (lambda i, offset=offset: env if i + offset == 1 else {})
                seconds, ran, capped = _both(on, build(f"{host}:{port_}", nnodes, offset), env_for, cap)
                codes = [code for code, _, _ in ran]
                if who == "torchrun":
                    said = _last_error(ran[-1][2] + ran[-1][1])
                else:
                    said = _verdict(kind, *ran[-1])
                row[who] = {"seconds": round(seconds, 1), "capped": capped, "codes": codes, "said": said}
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def healthy(baseline: str, rounds: int) -> dict:
    now, before = [], []
    with hosts(2) as made:
        for r in range(rounds):
            for src, into in ((SRC, now), (baseline, before)) if r % 2 == 0 else ((baseline, before), (SRC, now)):
                seconds, ran, capped = _both(made, _check(f"{made[0].addr}:{29700 + r}", {}), lambda i: {}, 180,
                                             src=src)
                if capped or any(code != 0 for code, _, _ in ran):
                    raise SystemExit(f"healthy check failed ({src}): {ran[-1][2][-2000:]}")
                into.append(seconds)
    diffs = [a - b for a, b in zip(now, before)]
    return {"rounds": rounds, "now_s": [round(x, 2) for x in now], "before_s": [round(x, 2) for x in before],
            "median_now_s": round(statistics.median(now), 2), "median_before_s": round(statistics.median(before), 2),
            "median_added_s": round(statistics.median(diffs), 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cap", type=float, default=60, help="seconds each side may take per fault (default 60)")
    ap.add_argument("--baseline-src", help="src/ of a checkout without the cross-node preflight: healthy timing")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--skip-faults", action="store_true")
    ap.add_argument("--only", default="", help="only the faults whose name contains this")
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("needs root (network namespaces)")
    out = {}
    if not args.skip_faults:
        out["faults"] = faults(args.cap, args.only)
    if args.baseline_src:
        out["healthy"] = healthy(args.baseline_src, args.rounds)
        print(json.dumps(out["healthy"]), flush=True)
    print("\n| fault | plain torchrun | ddplab |\n|---|---|---|")
    for row in out.get("faults", []):
        t, d = row["torchrun"], row["ddplab"]
        tt = "-" if t["seconds"] is None else (f"≥ {t['seconds']:.0f} s (stopped at the cap)" if t["capped"]
                                               else f"{t['seconds']:.0f} s, exit {t['codes']}")
        print(f"| {row['fault']} | {tt}: {t['said']} | {d['seconds']:.0f} s, exit {d['codes']}: {d['said']} |")


if __name__ == "__main__":
    main()
