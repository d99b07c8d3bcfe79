"""`sets-master-env`: MASTER_ADDR / MASTER_PORT set in the script, or `init_process_group(init_method="tcp://...")`."""

from __future__ import annotations

from ddplab.lint.checks import Checks
from ddplab.lint.rules import BUG, Rule

RULE = Rule(
    id="sets-master-env",
    severity=BUG,
    what='MASTER_ADDR / MASTER_PORT set in the script, or `init_process_group(init_method="tcp://...")`',
    why="under a launcher every rank looks for the rendezvous where nobody serves it and hangs in init_process_group",
    example='os.environ["MASTER_ADDR"] = "localhost"',
    fix="delete the line: torchrun / `ddplab launch` set MASTER_ADDR and MASTER_PORT (`--master-addr` / `--master-port`)",
    check=Checks.check_launcher_env,
    setup=True,
)
