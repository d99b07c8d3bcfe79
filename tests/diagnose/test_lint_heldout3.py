"""Issue 28's third held-out set: each false alarm or miss fixed as a mechanism, with a minimal script that shows
it and its twin that must behave the other way."""

from __future__ import annotations

import textwrap

from ddplab.diagnose.lint import lint_source

HEAD = "import os\nimport torch\nimport torch.distributed as dist\n"


def names(source: str, show_all: bool = False) -> list[str]:
    """The rule of each finding; the source is dedented and put after HEAD."""
    return sorted(f.rule for f in lint_source(HEAD + textwrap.dedent(source), show_all=show_all).findings)


# ------------------------------------------------------------------------------------------- collectives

def test_rank0_goes_first_barrier_pair_is_quiet():
    """`if rank != 0: barrier()` ... `if rank == 0: barrier()`: every rank reaches one barrier (rank 0 downloads
    first); the same without the second half hangs rank 0's peers."""
    pair = """
    def load(path):
        if dist.get_rank() != 0:
            dist.barrier()
        data = open(path).read()
        if dist.get_rank() == 0:
            dist.barrier()
        return data
    load("x")
    dist.destroy_process_group()
    """
    assert "collective-in-rank-branch" not in names(pair)
    alone = pair.replace("        if dist.get_rank() == 0:\n            dist.barrier()\n", "")
    assert "collective-in-rank-branch" in names(alone)


# ------------------------------------------------------------------------------------------- shared writes

def test_temp_file_named_by_uuid_is_per_process():
    """A path with uuid4() (or the process id, mkstemp) in it is each process's own: writing it, then os.replace
    onto the shared name, is the atomic-cache idiom; the same write to a fixed name is a race."""
    own = """
    import uuid
    dist.init_process_group("gloo")
    def cache(data, folder):
        tmp = os.path.join(folder, "tmp_" + uuid.uuid4().hex + "_blob")
        with open(tmp, "w") as f:
            f.write(data)
        os.replace(tmp, os.path.join(folder, "blob"))
    cache("x", "/tmp")
    dist.destroy_process_group()
    """
    assert "shared-path-write" not in names(own, show_all=True)
    fixed = own.replace('"tmp_" + uuid.uuid4().hex + "_blob"', '"tmp_blob"')
    assert "shared-path-write" in names(fixed)
