"""PyTorch's Flight Recorder for hang forensics: which collective each rank last called and completed.

- `reader`    the caller's side: the ranks' environment (`worker_env`), dump requests, reading and analysing the records,
              rendering them (no torch)
- `rankdump`  the rank's side: a thread that dumps this rank's record on request and at exit, installed at start-up by
              ddplab/boot/sitecustomize.py (or by a ddplab worker itself); standard library only

This file imports nothing: every rank imports `rankdump` at start-up and must not pay for the reader.
"""
