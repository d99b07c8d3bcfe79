"""The rule table of `ddplab explain`: error text -> cause -> fix -> reference. Data, not code.

A rule matches when any of its patterns (Python regular expressions, searched line by line) occurs in the log.
`consequence=True` marks errors that usually follow another rank's failure: look at the root cause first.
Every rule is checked against real error text in tests/test_explain.py: produced there by running the failing code
when a CPU can produce it, otherwise quoted from the public report cited next to it in tests/logs/.
"""

from __future__ import annotations

from dataclasses import dataclass

DOCS = "https://pytorch.org/docs/stable"


@dataclass(frozen=True)
class Rule:
    id: str
    title: str
    patterns: tuple[str, ...]
    cause: str
    fix: str
    reference: str
    consequence: bool = False


RULES: tuple[Rule, ...] = (
    # ------------------------------------------------------------------ start-up: backend, launcher, rendezvous
    Rule(
        "nccl-not-built", "nccl backend on a torch build without NCCL",
        (r"Distributed package doesn't have NCCL built in",),
        "init_process_group asked for the nccl backend, but this torch build has no NCCL (a CPU-only or macOS build).",
        "Pick the backend from the hardware: backend = 'nccl' if torch.cuda.is_available() else 'gloo' "
        "(gloo runs the same collectives between CPU processes), or install a CUDA build of torch.",
        f"{DOCS}/distributed.html#backends"),
    Rule(
        "pg-not-initialized", "collective or DDP before init_process_group",
        (r"Default process group has not been initialized",),
        "A collective, DistributedDataParallel or DistributedSampler ran in a process that never joined a "
        "process group (or already left it).",
        "Call dist.init_process_group(...) first, in every process, and start the script with torchrun / "
        "`ddplab launch` so that RANK and WORLD_SIZE are set; destroy_process_group() only at the very end.",
        f"{DOCS}/distributed.html#initialization"),
    Rule(
        "pg-initialized-twice", "init_process_group called twice",
        (r"trying to initialize the default process group twice",),
        "init_process_group ran a second time in the same process (for example from a helper and again from main).",
        "Initialise once; guard a helper with `if not dist.is_initialized():`.",
        f"{DOCS}/distributed.html#torch.distributed.is_initialized"),
    Rule(
        "launcher-env-missing", "started without a launcher",
        (r"environment variable (?:RANK|WORLD_SIZE|MASTER_ADDR|MASTER_PORT) expected, but not set",
         r"MASTER_ADDR/MASTER_PORT are not set"),
        "init_process_group reads RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT from the environment (env://); "
        "the script was started with plain `python`, so nobody set them.",
        "Start it with `torchrun --nproc-per-node N script.py` or `ddplab launch --nproc-per-node N script.py`.",
        f"{DOCS}/elastic/run.html#environment-variables"),
    Rule(
        "rank-out-of-range", "RANK is not below WORLD_SIZE",
        (r"rank < size\. \d+ vs \d+", r"RANK=\d+ is outside 0\.\.WORLD_SIZE"),
        "A process was given a rank outside 0..WORLD_SIZE-1: RANK or WORLD_SIZE was set by hand, or passed to "
        "init_process_group(rank=..., world_size=...) with values that disagree with the launcher.",
        "Let the launcher set RANK and WORLD_SIZE and call init_process_group without rank=/world_size=; "
        "world size = nodes x processes per node.",
        f"{DOCS}/distributed.html#torch.distributed.init_process_group"),
    Rule(
        "rendezvous-incomplete", "not every rank joined the process group",
        (r"waiting for clients\. \d+/\d+ clients joined",
         r"wait timeout after \d+ms, keys: ",
         r"RendezvousTimeoutError"),
        "Some ranks never arrived: a rank crashed or is still starting, WORLD_SIZE/RANK do not match the processes "
        "that were started (for example rank=0 hard-coded in every process), or nodes disagree on --nnodes.",
        "Check that nnodes x nproc-per-node processes start and none of them sets RANK/WORLD_SIZE itself; look at "
        "the other ranks' logs for an earlier error; on several machines, start every node with the same "
        "--nnodes and --rdzv-endpoint.",
        f"{DOCS}/elastic/run.html"),
    Rule(
        "port-in-use", "the rendezvous port is already in use",
        (r"EADDRINUSE", r"[Aa]ddress already in use"),
        "Another process (often a previous run that did not exit, or a second job) already listens on MASTER_PORT.",
        "Use another port (--master-port), or `torchrun --standalone` / `ddplab launch`, which pick a free one on a "
        "single machine; end the stale run (`ps aux | grep torchrun`).",
        f"{DOCS}/elastic/run.html#stacked-single-node-multi-worker"),
    Rule(
        "master-unreachable", "cannot reach MASTER_ADDR:MASTER_PORT",
        (r"[Cc]onnection refused",
         r"client socket has timed out after \d+m?s while trying to connect to",
         r"client socket has failed to connect to",
         r"failed to connect/validate to host"),
        "This process could not connect to the rendezvous at MASTER_ADDR:MASTER_PORT: rank 0's node is not up yet, "
        "the address or port is wrong (a script that sets MASTER_ADDR/MASTER_PORT itself overrides the launcher), "
        "or a firewall blocks the port.",
        "Do not set MASTER_ADDR/MASTER_PORT in the script; on several machines pass the first node's reachable "
        "address and an open port to every node (--rdzv-endpoint HOST:PORT) and check it with `nc -zv HOST PORT`.",
        f"{DOCS}/elastic/run.html"),
    # ------------------------------------------------------------------ one rank failed, the others notice
    Rule(
        "peer-closed", "another rank went away",
        (r"Connection closed by peer", r"Connection reset by peer"),
        "gloo lost the connection to another rank in the middle of a collective: that rank crashed, was killed, "
        "or left the collective (an exception, an early exit, or a branch that skips it).",
        "This is a consequence: find the rank that failed first (torchrun's 'Root Cause (first observed failure)', "
        "or the earliest traceback) and fix that error.",
        f"{DOCS}/elastic/errors.html", consequence=True),
    Rule(
        "collective-timeout", "a collective timed out",
        (r"Watchdog caught collective operation timeout",
         r"Timed out waiting \d+ms for (?:recv|send) operation",
         r"ran for \d+ milliseconds before timing out"),
        "A collective waited longer than the process-group timeout: one rank never called it (a rank-dependent "
        "branch, an uneven number of batches, a crash or hang elsewhere) or called a different collective/shape.",
        "Make every rank run the same collectives in the same order (equal batches per rank: DistributedSampler; "
        "no collective inside `if rank == 0:`); rerun with TORCH_DISTRIBUTED_DEBUG=DETAIL, or under "
        "`ddplab launch --hang-timeout 60` to see every rank's stack.",
        f"{DOCS}/distributed.html#debugging-torch-distributed-applications", consequence=True),
    Rule(
        "worker-killed", "a worker was killed (SIGKILL)",
        (r"exitcode\s*:\s*-9\b", r"Signal 9 \(SIGKILL\)", r"exitcode: -9\)", r"Killed\s*$"),
        "The process got SIGKILL: on a host that is usually the kernel's out-of-memory killer (host RAM, not GPU "
        "memory), or the scheduler (Slurm time or memory limit).",
        "Check `dmesg | grep -i oom` or the job's accounting; lower host memory per rank (DataLoader num_workers, "
        "dataset kept in RAM once per rank, pinned memory) or ask for more memory.",
        f"{DOCS}/elastic/errors.html"),
    # ------------------------------------------------------------------ DDP itself
    Rule(
        "unused-parameters", "parameters that got no gradient",
        (r"Expected to have finished reduction in the prior iteration",
         r"parameters that were not used in producing loss"),
        "Some parameters took no part in computing the loss, so DDP waited for their gradients forever.",
        "Make every parameter reach the loss, freeze the unused ones (requires_grad=False), or wrap with "
        "DistributedDataParallel(..., find_unused_parameters=True) (slower).",
        f"{DOCS}/generated/torch.nn.parallel.DistributedDataParallel.html"),
    Rule(
        "ddp-model-mismatch", "the ranks built different models",
        (r"DDP expects same model across all ranks",),
        "DistributedDataParallel found a different number or shape of parameters on different ranks: the model "
        "depends on the rank, on unseeded randomness, or on data read differently per rank.",
        "Build the identical model on every rank (same config, same code path); only data may differ per rank.",
        f"{DOCS}/notes/ddp.html"),
    Rule(
        "ddp-device-ids-cpu", "device_ids given for a CPU model",
        (r"device_ids and output_device arguments only work with single-device/multiple-device GPU modules",),
        "DistributedDataParallel got device_ids, but the model's parameters are on the CPU.",
        "Pass device_ids=[local_rank] only for a model on cuda:local_rank; on CPU leave device_ids=None.",
        f"{DOCS}/generated/torch.nn.parallel.DistributedDataParallel.html"),
    Rule(
        "syncbn-cpu", "SyncBatchNorm on CPU",
        (r"SyncBatchNorm expected input tensor to be on GPU",),
        "SyncBatchNorm synchronises statistics only for GPU (or XPU) tensors; the input is on the CPU.",
        "On CPU keep plain BatchNorm: convert with nn.SyncBatchNorm.convert_sync_batchnorm(model) only when "
        "torch.cuda.is_available().",
        f"{DOCS}/generated/torch.nn.SyncBatchNorm.html"),
    # ------------------------------------------------------------------ checkpoints
    Rule(
        "module-prefix", "state_dict keys with/without DDP's 'module.' prefix",
        (r"(?:Unexpected|Missing) key\(s\) in state_dict: \"module\.",),
        "The checkpoint was saved from the DDP wrapper (keys start with 'module.') and loaded into the plain model, "
        "or the other way round.",
        "Save ddp_model.module.state_dict(); to load an old file, strip the prefix: "
        "{k.removeprefix('module.'): v for k, v in state.items()}.",
        "https://pytorch.org/tutorials/intermediate/ddp_tutorial.html#save-and-load-checkpoints"),
    Rule(
        "compile-prefix", "state_dict keys with torch.compile's '_orig_mod.' prefix",
        (r"(?:Unexpected|Missing) key\(s\) in state_dict: \"_orig_mod\.",),
        "The checkpoint was saved from a torch.compile'd model (keys start with '_orig_mod.') and loaded into the "
        "uncompiled one, or the other way round.",
        "Save the original module (compiled._orig_mod.state_dict(), or keep a reference to the model before "
        "compiling); to load an old file strip '_orig_mod.' from the keys.",
        f"{DOCS}/generated/torch.compile.html"),
    Rule(
        "weights-only-load", "torch.load refused a pickled object (weights_only)",
        (r"Weights only load failed", r"Unsupported global: GLOBAL"),
        "Since torch 2.6 torch.load defaults to weights_only=True and refuses arbitrary pickled objects "
        "(dataclasses, argparse.Namespace, numpy objects) saved in the checkpoint.",
        "Save only tensors and plain containers (dict/list/int/float/str), e.g. vars(args) instead of args; for a "
        "trusted old file use torch.serialization.add_safe_globals([...]) or weights_only=False.",
        f"{DOCS}/generated/torch.load.html"),
    # ------------------------------------------------------------------ devices (GPU)
    Rule(
        "cuda-not-compiled", "CUDA used with a CPU-only torch",
        (r"Torch not compiled with CUDA enabled", r"Found no NVIDIA driver on your system"),
        "The script moves tensors to CUDA (.cuda(), 'cuda:N'), but this torch build or this machine has no CUDA.",
        "Choose the device from the hardware: device = torch.device('cuda', local_rank) if "
        "torch.cuda.is_available() else torch.device('cpu'); use the gloo backend on CPU.",
        f"{DOCS}/notes/cuda.html"),
    Rule(
        "invalid-device-ordinal", "LOCAL_RANK beyond the visible GPUs",
        (r"invalid device ordinal", r"LOCAL_RANK=\d+ but only \d+ GPU\(s\) are visible"),
        "A process asked for GPU number LOCAL_RANK, but fewer GPUs are visible: more processes per node than GPUs, "
        "or CUDA_VISIBLE_DEVICES hides some.",
        "Start at most one process per visible GPU: --nproc-per-node gpu (or the count nvidia-smi shows), and "
        "check CUDA_VISIBLE_DEVICES.",
        f"{DOCS}/elastic/run.html"),
    Rule(
        "duplicate-gpu", "two ranks on the same GPU",
        (r"Duplicate GPU detected",),
        "NCCL found two ranks driving the same GPU: every rank used cuda:0 (.cuda() or 'cuda:0' without "
        "torch.cuda.set_device(local_rank)), or more processes than GPUs.",
        "Call torch.cuda.set_device(local_rank) before init_process_group and use torch.device('cuda', local_rank) "
        "everywhere; start one process per GPU.",
        "https://pytorch.org/tutorials/intermediate/ddp_tutorial.html"),
    Rule(
        "nccl-system-error", "NCCL: unhandled system error",
        (r"unhandled system error", r"ncclSystemError"),
        "NCCL failed in a system call: most often the network interface (wrong NCCL_SOCKET_IFNAME, a down "
        "InfiniBand port), too little shared memory in a container (/dev/shm), or a peer that died.",
        "Rerun with NCCL_DEBUG=INFO to see the failing call; in Docker pass --shm-size=1g or --ipc=host; set "
        "NCCL_SOCKET_IFNAME to the interface the nodes share; try NCCL_IB_DISABLE=1 to rule out InfiniBand.",
        "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html"),
    Rule(
        "cuda-oom", "GPU out of memory",
        (r"CUDA out of memory", r"OutOfMemoryError"),
        "A rank needed more GPU memory than was free: batch or model too large per GPU, memory kept alive "
        "(losses accumulated with their graph), or several processes sharing one GPU.",
        "Lower the per-rank batch size (use gradient accumulation to keep the global batch), use mixed precision, "
        "check that each rank is on its own GPU (nvidia-smi), store loss.item() not loss.",
        f"{DOCS}/notes/cuda.html#memory-management"),
    Rule(
        "device-side-assert", "CUDA device-side assert",
        (r"device-side assert triggered",),
        "A CUDA kernel's own check failed, most often an index out of range: a class label >= the number of "
        "classes (or negative) in a loss, or an embedding index beyond the vocabulary.",
        "Run the same batch on CPU (clear error message) or with CUDA_LAUNCH_BLOCKING=1; check label ranges "
        "(targets.min(), targets.max()) against the model's output size.",
        f"{DOCS}/notes/cuda.html#asynchronous-execution"),
    # ------------------------------------------------------------------ exit (tests/test_teardown.py)
    Rule(
        "teardown-abort", "aborted at exit, after the work was done",
        (r"terminate called without an active exception",),
        "A C++ thread was still working while the interpreter exited. With gloo: a worker thread of the process "
        "group let go of a finished collective's tensor a moment late, needed the GIL to free it, and was ended by "
        "force during interpreter exit; C++ then aborts the process (SIGABRT, exit code -6), at random, more often "
        "on a busy machine. The usual reason the thread was still there: destroy_process_group() did not stop it, "
        "because something still held the group (the DDP model, or torch.distributed.nn imported after "
        "init_process_group). If every rank had printed its final result before this line, the training itself "
        "did not fail: its output and checkpoints are good, only the exit was not.",
        "Leave in this order, before the script ends: dist.barrier(); del ddp_model; dist.destroy_process_group() "
        "- and `import torch.distributed.nn` before init_process_group, so that nothing keeps the group alive. "
        "`ddplab new` writes this order; docs/teardown.md explains it.",
        "https://github.com/pytorch/pytorch/issues/190489"),
)

# When nothing matched: the steps that most often reveal the cause.
GENERIC_STEPS: tuple[str, ...] = (
    "Find the first failure: torchrun's 'Root Cause (first observed failure)' names the rank; read that rank's "
    "traceback first (the others usually fail because of it).",
    "Rerun with NCCL_DEBUG=INFO (on GPUs: NCCL logs which interface, GPU and call failed).",
    "Rerun with TORCH_DISTRIBUTED_DEBUG=DETAIL (checks that every rank calls the same collectives with the same "
    "shapes) and TORCH_SHOW_CPP_STACKTRACES=1.",
    "If it hangs rather than fails: `ddplab launch --hang-timeout 60 ...` dumps every rank's Python stack.",
)
