"""Two `ddplab launch` runs started at once both find torchrun's port 29500 free; the first to bind it wins and the
other's rendezvous failed ("EADDRINUSE", seen in a full suite run). Made to happen here: the agent is given a port
another process holds, as a caller that checked it a moment earlier would; a port of ddplab's choosing moves, the
user's own --master-port does not."""

import json
import socket
import subprocess
import textwrap

from torch.distributed.run import get_args_parser

from ddplab.launcher import agent


def _agent(tmp_path, port: int, may_move: bool) -> tuple[int, str, str, dict]:
    script = tmp_path / "meet.py"
    script.write_text(
        textwrap.dedent(
            """
            import os, torch, torch.distributed as dist
            dist.init_process_group("gloo")
            t = torch.ones(1); dist.all_reduce(t)
            print("met on port", os.environ["MASTER_PORT"], t.item(), flush=True)
            dist.destroy_process_group()
            """
        )
    )
    argv = ["--log-dir", str(tmp_path / "logs"), "--nproc-per-node", "1", "--master-port", str(port), str(script)]
    spec = {"kind": "script", "torchrun": vars(get_args_parser().parse_args(argv)), "port_may_move": may_move}
    proc = agent.spawn(spec, tmp_path, {}, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
        proc.wait()
    outcome = json.loads((tmp_path / "ddplab-outcome.json").read_text())
    return proc.returncode, out.decode(errors="replace"), err.decode(errors="replace"), outcome


def test_a_port_taken_before_the_rendezvous_moves_when_it_was_ddplabs_choice(tmp_path, no_leftover_workers):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.bind(("", 0))
        held.listen()
        port = held.getsockname()[1]
        mine = tmp_path / "chosen"
        mine.mkdir()
        code, out, err, outcome = _agent(mine, port, may_move=True)
        assert code == 0 and outcome["launcher_error"] is None, err[-3000:]
        assert f"ddplab launch: port {port} was taken as the run started: using " in err
        assert "met on port" in out and f"met on port {port} " not in out, out  # the rank met on the new port

        users = tmp_path / "users"
        users.mkdir()
        code, _, err, outcome = _agent(users, port, may_move=False)
        assert code == 1 and "EADDRINUSE" in (outcome["launcher_error"] or ""), err[-3000:]
        assert "was taken as the run started" not in err
