"""The recipes' checkpoints: the atomic, checksummed files of ddplab.ckptfile (runtime), which ddplab.resume writes
for any script too - one implementation."""

from ddplab.ckptfile import (FORMAT, HASH_CHARS, NAME, Found, atomic_save, digest, latest, listed, load, peek,  # noqa: F401
                             prepare, save)
