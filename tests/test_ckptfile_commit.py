"""Checkpoints where a rename is not atomic (issue 40: a bucket mounted as a folder): ddplab.ckptfile commits with a
marker written last, and a reader never loads an unfinished checkpoint.

The folder that refuses renames is real: an append-only folder (chattr +a, as root on ext4, xfs or btrfs) lets files
be created and written but no name be removed, so rename(2) fails with EPERM - as on mountpoint-s3, which has no
rename, and refuses deletes without --allow-delete. (No FUSE library is installed here to mount a bucket-like file
system; the /proc/mounts reading that recognises gcsfuse and mountpoint-s3 is tested on their real lines.)"""

from __future__ import annotations

import errno
import fcntl
import os
import signal
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from ddplab import ckptfile

# What `chattr +a` does, in this process (a test that starts no process stays in the fast tier): the inode flags
# ioctls of linux/fs.h, and the append-only flag.
FS_IOC_GETFLAGS, FS_IOC_SETFLAGS, FS_APPEND_FL = 0x80086601, 0x40086602, 0x20


def append_only(folder: Path, on: bool) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        flags = struct.unpack("i", fcntl.ioctl(fd, FS_IOC_GETFLAGS, struct.pack("i", 0)))[0]
        flags = flags | FS_APPEND_FL if on else flags & ~FS_APPEND_FL
        fcntl.ioctl(fd, FS_IOC_SETFLAGS, struct.pack("i", flags))
    finally:
        os.close(fd)


@pytest.fixture
def no_rename(tmp_path):
    """A folder where rename(2) fails for real; its flag is taken off afterwards, so that it can be removed."""
    folder = tmp_path / "bucket"
    folder.mkdir()
    try:
        append_only(folder, True)
    except OSError as e:
        pytest.skip(f"the append-only flag (chattr +a) is refused here ({e.strerror}): needs root on ext4/xfs/btrfs")
    try:
        yield folder
    finally:
        append_only(folder, False)
        ckptfile._no_rename.discard(folder)


def state(step: int) -> dict:
    torch.manual_seed(step)
    return {"model": {"w": torch.randn(64, 64)}, "step": step}


def test_the_folder_really_refuses_renames(no_rename):
    (no_rename / "a").write_text("x")
    with pytest.raises(OSError) as e:
        os.rename(no_rename / "a", no_rename / "b")
    assert e.value.errno == errno.EPERM


def test_where_rename_fails_a_marker_commits_the_checkpoint_and_it_loads(no_rename):
    saved = [ckptfile.save(no_rename, state(step), step=step, keep=2) for step in (10, 20, 30)]
    assert [p.name for p in saved] == [p.name for p in sorted(no_rename.glob("step-*.commit"))]
    assert all(ckptfile.MARKER.match(p.name) for p in saved) and not list(no_rename.glob("step-*.pt"))
    found = ckptfile.latest(no_rename)
    assert found.step == 30 and torch.equal(found.state["model"]["w"], state(30)["model"]["w"])
    assert ckptfile.data_of(found.path).name.startswith(".step-00000030.pt.")
    assert ckptfile.load(found.path, verified=True)["step"] == 30  # another rank's memory-mapped read
    assert ckptfile.step_of(found.path) == 30 and ckptfile.peek(found.path)["step"] == 30
    # Removing the oldest was refused (append-only): it stays, and nothing is lost.
    assert [s for s, _ in ckptfile.listed(no_rename)] == [30, 20, 10]


def test_an_unfinished_marker_or_data_is_never_loaded(no_rename):
    ckptfile.save(no_rename, state(10), step=10, keep=3)
    newest = ckptfile.save(no_rename, state(20), step=20, keep=3)
    text = newest.read_text()
    newest.write_text(text[: len(text) // 2])  # a marker cut short (the writer died while writing it)
    warned = []
    assert ckptfile.latest(no_rename, warn=warned.append).step == 10
    assert "commit marker is unfinished" in warned[0]

    newest.write_text(text)
    data = ckptfile.data_of(newest)
    with open(data, "r+b") as f:  # a marker whose data was cut short
        f.truncate(data.stat().st_size // 2)
    warned.clear()
    assert ckptfile.latest(no_rename, warn=warned.append).step == 10
    assert "truncated" in warned[0]


def test_a_writer_killed_mid_write_leaves_data_without_marker_never_loaded(no_rename):
    """The file-size limit kills the writer in the middle of its write (SIGXFSZ's default action, in the kernel,
    as kill -9: nothing of Python runs after it, at a known byte, whatever the machine's speed): the data file is
    half there, its marker never written."""
    ckptfile.save(no_rename, state(10), step=10, keep=3)
    script = textwrap.dedent(f"""
        import resource, signal, torch
        from pathlib import Path
        from ddplab import ckptfile
        signal.signal(signal.SIGXFSZ, signal.SIG_DFL)  # Python ignores it; the default ends the process
        resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, resource.RLIM_INFINITY))
        ckptfile.save(Path({str(no_rename)!r}), {{"model": {{"w": torch.zeros(1_000_000)}}, "step": 20}}, 20, 3)
    """)
    ran = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert ran.returncode == -signal.SIGXFSZ, ran.stderr
    torn = [p for p in no_rename.glob(".step-00000020.pt.*.tmp")]
    assert len(torn) == 1 and torn[0].stat().st_size == 200_000
    assert not list(no_rename.glob("step-00000020-*"))
    assert ckptfile.latest(no_rename).step == 10
    # The next save works beside the torn file (which the folder will not let anyone delete).
    assert ckptfile.latest(no_rename).step == ckptfile.step_of(ckptfile.save(no_rename, state(30), 30, 3)) - 20


def test_resume_saves_and_resumes_through_markers(no_rename, capsys):
    """ddplab.resume on such a folder, one rank, in this process: it saves every 2 steps (markers), and a new
    Checkpointer resumes from the newest one with the model's state."""
    from ddplab import resume

    model = torch.nn.Linear(4, 2)
    ckpt = resume.Checkpointer(no_rename, every=2, model=model)
    for _ in range(4):
        with torch.no_grad():
            model.weight.add_(1.0)
        ckpt.step_done()
    ckpt.flag.close()
    again = resume.Checkpointer(no_rename, every=2, model=torch.nn.Linear(4, 2))
    again.flag.close()
    assert again.step == 4 and again.resumed_from.endswith(".commit")
    assert torch.equal(again.objects["model"].weight, model.weight)
    assert f"resumed at step 4 (the start of epoch 1) from {again.resumed_from}" in capsys.readouterr().out


def test_model_files_are_written_where_rename_fails(no_rename):
    ckptfile.atomic_save({"w": torch.ones(2)}, no_rename / "model.pt")
    assert torch.equal(torch.load(no_rename / "model.pt", weights_only=True)["w"], torch.ones(2))


MOUNTS = textwrap.dedent(r"""
    /dev/vda / ext4 rw,relatime 0 0
    my-bucket /mnt/gcs fuse.gcsfuse rw,nosuid,nodev,relatime,user_id=0,group_id=0 0 0
    mountpoint-s3 /mnt/s3\040data fuse rw,nosuid,nodev,noatime,user_id=0,group_id=0,default_permissions 0 0
    /dev/vdb /mnt/gcs/local ext4 rw,relatime 0 0
    sshfs#host: /mnt/ssh fuse.sshfs rw 0 0
""")


@pytest.mark.parametrize(
    "folder, bucket",
    [
        ("/mnt/gcs/ckpt", "fuse.gcsfuse at /mnt/gcs"),
        ("/mnt/s3 data/run/ckpt", "mountpoint-s3 at /mnt/s3 data"),  # no subtype: known by its source
        ("/mnt/gcs/local/ckpt", None),  # a disk mounted inside the bucket's folder: the longest mount point wins
        ("/mnt/gcsx", None),
        ("/mnt/ssh/ckpt", None),
        ("/home/me/ckpt", None),
    ],
)
def test_bucket_mounts_are_known_from_proc_mounts(folder, bucket):
    assert ckptfile.bucket_mount(Path(folder), mounts=MOUNTS) == bucket


def test_this_machines_folders_rename(tmp_path):
    assert ckptfile.bucket_mount(tmp_path) is None and ckptfile.renames(tmp_path)
