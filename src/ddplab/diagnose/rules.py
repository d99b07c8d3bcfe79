"""The rule table of `ddplab explain`: error text -> cause -> fix -> reference. Data, not code.

A rule matches when any of its patterns (Python regular expressions, searched in the whole log with re.MULTILINE; a
match is attributed to the line it starts on) occurs in the log. Patterns are the invariant part of the message as
PyTorch, NCCL or gloo print it (their source is cited next to the rule when it is not obvious), never one log's wording.
Three flags order the diagnoses when a log holds several errors (ddplab/diagnose/explain.py):
`consequence=True`: the error usually follows another rank's failure: look at the root cause first.
`generic=True`: a wrapper message (NCCL's "invalid usage", a worker's exit signal) that a more specific error in the
same log explains better; it comes after the specific ones.
`warning=True`: not an error at all (a performance warning); it comes last.
Every rule is checked against real error text in tests/diagnose/test_explain.py: produced there by running the failing code
when a CPU can produce it, otherwise quoted from the public report cited next to it in tests/logs/.
"""

from __future__ import annotations

from dataclasses import dataclass

DOCS = "https://pytorch.org/docs/stable"
NCCL_TROUBLESHOOTING = "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html"
NCCL_ENV = "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html"


@dataclass(frozen=True)
class Rule:
    id: str
    title: str
    patterns: tuple[str, ...]
    cause: str
    fix: str
    reference: str
    consequence: bool = False
    generic: bool = False
    warning: bool = False


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
         r"failed to connect/validate to host",
         # torch/distributed/elastic/rendezvous/c10d_rendezvous_backend.py; older TCPStore: "connect() timed out"
         r"The connection to the C10d store has failed",
         r"connect\(\) timed out\. Original timeout was"),
        "This process could not connect to the rendezvous at MASTER_ADDR:MASTER_PORT: rank 0's node is not up yet, "
        "the address or port is wrong (a script that sets MASTER_ADDR/MASTER_PORT itself overrides the launcher), "
        "or a firewall blocks the port.",
        "Do not set MASTER_ADDR/MASTER_PORT in the script; on several machines pass the first node's reachable "
        "address and an open port to every node (--rdzv-endpoint HOST:PORT) and check it with `nc -zv HOST PORT`.",
        f"{DOCS}/elastic/run.html"),
    # ------------------------------------------------------------------ one rank failed, the others notice
    Rule(
        "peer-closed", "another rank went away",
        (r"Connection closed by peer", r"Connection reset by peer", r"Remote peer closed the connection"),
        "gloo lost the connection to another rank in the middle of a collective: that rank crashed, was killed, "
        "or left the collective (an exception, an early exit, or a branch that skips it); a rank that returns from "
        "dist.isend()/irecv() without wait() and exits closes the connection under its peer the same way.",
        "This is a consequence: find the rank that failed first (torchrun's 'Root Cause (first observed failure)', "
        "or the earliest traceback) and fix that error.",
        f"{DOCS}/elastic/errors.html", consequence=True),
    Rule(
        "collective-timeout", "a collective timed out",
        (r"Watchdog caught collective operation timeout",
         r"Timed out waiting \d+ms for (?:recv|send) operation",
         r"ran for \d+ milliseconds before timing out",
         r"timed out in blocking wait"),
        "A collective waited longer than the process-group timeout: one rank never called it (a rank-dependent "
        "branch, an uneven number of batches, a crash or hang elsewhere) or called a different collective/shape.",
        "Make every rank run the same collectives in the same order (equal batches per rank: DistributedSampler; "
        "no collective inside `if rank == 0:`); rerun with TORCH_DISTRIBUTED_DEBUG=DETAIL, or under "
        "`ddplab launch --hang-timeout 60` to see every rank's stack.",
        f"{DOCS}/distributed.html#debugging-torch-distributed-applications", consequence=True),
    Rule(
        "worker-killed", "a worker was killed (SIGKILL)",
        (r"exitcode\s*:\s*-9\b", r"Signal 9 \(SIGKILL\)", r"exitcode: -9\)", r"Killed\s*$",
         r"Signals\.SIGKILL: 9", r"killed by signal: Killed", r"exit(?:ed with)? code:? 137\b"),
        "The process got SIGKILL (exit code -9, or 137 from a shell): on a host that is usually the kernel's "
        "out-of-memory killer (host RAM, not GPU memory), or the scheduler (Slurm time or memory limit).",
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
        # torch >= 0.4: 'Unexpected key(s) in state_dict: "module.'; torch 0.3: 'unexpected key "module.'
        (r"(?:Unexpected|Missing) key\(s\) in state_dict: \"module\.", r"[Uu]nexpected key \"module\.",
         r"[Mm]issing keys? in state_dict: \"module\."),
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
        NCCL_TROUBLESHOOTING, generic=True),
    Rule(
        "cuda-oom", "GPU out of memory",
        (r"CUDA out of memory", r"OutOfMemoryError", r"CUDA error: out of memory",
         r"cuda runtime error \(2\) : out of memory"),
        "A rank needed more GPU memory than was free: batch or model too large per GPU, memory kept alive "
        "(losses accumulated with their graph), or several processes on one GPU. Under DDP, GPU 0 often runs out "
        "first because every rank opened a CUDA context there: a missing torch.cuda.set_device(local_rank), or "
        "torch.load of a checkpoint saved from cuda:0 without map_location.",
        "Lower the per-rank batch size (use gradient accumulation to keep the global batch), use mixed precision; "
        "check with nvidia-smi that each rank is on its own GPU and GPU 0 holds one process only: call "
        "torch.cuda.set_device(local_rank) first thing, load with torch.load(path, map_location='cpu'); "
        "store loss.item(), not loss.",
        f"{DOCS}/notes/cuda.html#memory-management"),
    Rule(
        "device-side-assert", "CUDA device-side assert",
        (r"device-side assert triggered",),
        "A CUDA kernel's own check failed, most often an index out of range: a class label >= the number of "
        "classes (or negative) in a loss, or an embedding index beyond the vocabulary.",
        "Run the same batch on CPU (clear error message) or with CUDA_LAUNCH_BLOCKING=1; check label ranges "
        "(targets.min(), targets.max()) against the model's output size.",
        f"{DOCS}/notes/cuda.html#asynchronous-execution"),
    # ------------------------------------------------------------------ added for issue 16 (tests/logs corpus)
    Rule(
        "ddp-model-on-cpu", "nccl collective on a CPU tensor (model not on the GPU yet)",
        # ProcessGroupNCCL.cpp: "Tensors must be CUDA and dense" (torch 1.x: "Only CUDA dense tensor is supported
        # for NCCL collective operations"); torch 2.x on an nccl-only group: "No backend type associated with
        # device type cpu".
        (r"Tensors must be CUDA and dense", r"Only CUDA dense tensor is supported for NCCL",
         r"No backend type associated with device type cpu"),
        "A collective on the nccl backend got a CPU tensor: most often the model was wrapped in "
        "DistributedDataParallel before it was moved to the GPU (DDP broadcasts its parameters at construction), "
        "or a metric/loss tensor on the CPU was all-reduced.",
        "Move the model first, then wrap: model.to(device); model = DDP(model, device_ids=[local_rank]); keep "
        "tensors you all-reduce on torch.device('cuda', local_rank) (or use the gloo backend for CPU tensors).",
        f"{DOCS}/generated/torch.nn.parallel.DistributedDataParallel.html"),
    Rule(
        "find-unused-warning", "find_unused_parameters=True, but no parameter was unused (warning)",
        # torch/csrc/distributed/c10d/reducer.cpp
        (r"find_unused_parameters=True was specified in DDP constructor, but did not find any unused "
         r"parameters",),
        "Not an error: DDP was built with find_unused_parameters=True but every parameter got a gradient, so the "
        "extra traversal of the autograd graph each iteration only costs time.",
        "Drop find_unused_parameters=True (the default is False) unless some iterations really leave parameters "
        "unused; with static_graph=True DDP learns the used set once.",
        f"{DOCS}/generated/torch.nn.parallel.DistributedDataParallel.html", warning=True),
    Rule(
        "shm-too-small", "shared memory (/dev/shm) is too small",
        # NCCL src/misc/shmutils.cc ("Call to posix_fallocate failed", "Error while creating shared memory
        # segment"); torch/utils/data/_utils/signal_handling.py and torch/csrc/DataLoader.cpp (bus error text).
        (r"Error while creating shared memory segment", r"posix_fallocate failed",
         r"insufficient shared memory \(shm\)", r"out of shared memory",
         r"killed by signal: Bus error", r"unable to write to file </torch_"),
        "/dev/shm filled up: NCCL's shared-memory transport between ranks on one machine, or DataLoader workers "
        "passing batches to the main process, need more than it holds. Docker gives a container 64 MB by default.",
        "Run the container with --shm-size=8g (or --ipc=host; in Kubernetes mount an emptyDir with medium: "
        "Memory at /dev/shm); check `df -h /dev/shm`; as a stopgap lower num_workers or set NCCL_SHM_DISABLE=1 "
        "(slower).",
        f"{DOCS}/data.html#multi-process-data-loading"),
    Rule(
        "collective-mismatch", "ranks called different collectives",
        # torch ProcessGroupWrapper (TORCH_DISTRIBUTED_DEBUG=DETAIL); NCCL enqueue checks and net_ib.cc.
        (r"Detected mismatch between collectives on ranks", r"Mismatched collective detected",
         r"collective mismatch error"),
        "The ranks reached a collective with different operations, shapes or dtypes, or in a different order: "
        "rank-dependent code (a branch, a different model graph, per-rank metric keys) or tensors sized by the "
        "rank's own data.",
        "Read the two fingerprints the message prints (op, shape, sequence number) and make every rank issue the "
        "same collectives in the same order with the same shapes; pad tensors to a common size before "
        "all_gather.",
        f"{DOCS}/distributed.html#debugging-torch-distributed-applications"),
    Rule(
        "gloo-size-mismatch", "gloo received a different size than it expected",
        # gloo/transport/tcp/pair.cc: "Received data size doesn't match expected size. Is there a distributed
        # collective mismatch in your code?"; before 2025 the bare enforce "op.preamble.length <= op.nbytes".
        (r"Received data size doesn't match expected size", r"op\.preamble\.length <= op\.nbytes"),
        "Two ranks ran a collective (or send/recv) with tensors of different sizes, or different collectives at "
        "the same point: the rank that received more bytes than it expected aborted. The other ranks then report "
        "a closed connection: a consequence.",
        "Make every rank pass the same shape to each collective (pad per-rank tensors to a common size before "
        "all_reduce/all_gather); TORCH_DISTRIBUTED_DEBUG=DETAIL names the two shapes.",
        f"{DOCS}/distributed.html#debugging-torch-distributed-applications"),
    Rule(
        "no-kernel-image", "torch has no kernels for this GPU",
        # torch/cuda/__init__.py (incompatible_device_warn, old_gpu_warn); CUDA's cudaErrorNoKernelImageForDevice.
        (r"no kernel image is available for execution on the device",
         r"is not compatible with the current PyTorch installation",
         r"PyTorch no longer supports this GPU because it is too old"),
        "The installed torch build has no compiled kernels for this GPU's architecture (sm_XX): a new GPU with an "
        "old build (RTX 50xx / sm_120 needs cu128 or later) or an old GPU the build dropped.",
        "Install a torch wheel built for this GPU's compute capability (pytorch.org/get-started/locally: pick the "
        "CUDA version that lists sm_XX; `python -c 'import torch; print(torch.cuda.get_arch_list())'`).",
        "https://pytorch.org/get-started/locally/"),
    Rule(
        "syncbn-single-process", "SyncBatchNorm outside a process group",
        # torch 1.x batchnorm.py; in torch 1.8-1.12 SyncBatchNorm.forward called get_world_size() first
        (r"SyncBatchNorm is only supported within torch\.nn\.parallel\.DistributedDataParallel",
         r"(?:SyncBatchNorm|sync_batch_norm|batchnorm\.py)[^\n]*\n(?:[^\n]*\n){0,20}?[^\n]*"
         r"Default process group has not been initialized"),
        "SyncBatchNorm ran in a process that is not in a process group (a single-GPU or plain `python` run): "
        "it synchronises statistics across ranks, so it needs init_process_group.",
        "For one process use plain BatchNorm (set norm 'BN' instead of 'SyncBN' in the config), or convert with "
        "nn.SyncBatchNorm.convert_sync_batchnorm(model) only when dist.is_initialized() and world_size > 1.",
        f"{DOCS}/generated/torch.nn.SyncBatchNorm.html"),
    Rule(
        "nccl-remote-error", "NCCL: a remote rank exited or the network failed",
        # NCCL ncclRemoteError (2.13+), torch NCCLUtils getNcclErrorDetailStr
        # NCCL misc/socket.cc reports a peer's closed socket as "Connection closed by remote peer" (ncclRemoteError)
        (r"remote process exited or there was a network error", r"ncclRemoteError",
         r"Connection closed by remote peer"),
        "NCCL lost a peer in the middle of communication: another rank crashed or was killed first (look for its "
        "error), or the network between nodes failed (InfiniBand/RoCE port errors, a flapping link).",
        "Find the rank that failed first (torchrun's Root Cause, the earliest traceback); if none failed, check "
        "the fabric (ibstat, NCCL_DEBUG=INFO's NET lines) and retry with NCCL_IB_DISABLE=1 to isolate IB.",
        NCCL_TROUBLESHOOTING, generic=True),
    Rule(
        "nccl-invalid-usage", "NCCL: invalid usage",
        (r"invalid usage \(run with NCCL_DEBUG=WARN", r"ncclInvalidUsage", r", invalid usage, NCCL version"),
        "NCCL rejected how it was called: most often two ranks on one GPU, ranks that disagree on the world size, "
        "or a collective issued on a communicator that was already aborted. NCCL's 'Last error' line says which.",
        "Read the 'Last error' line (rerun with NCCL_DEBUG=WARN if it is missing); one process per GPU with "
        "torch.cuda.set_device(local_rank) before init_process_group.",
        NCCL_TROUBLESHOOTING, generic=True),
    Rule(
        "nccl-internal-error", "NCCL: internal error",
        (r"ncclInternalError", r", internal error(?: - please report this issue to the NCCL developers)?, "
         r"NCCL version"),
        "NCCL failed inside (often during bootstrap: no usable network interface, mismatched NCCL versions "
        "between nodes, or a peer that vanished). NCCL's 'Last error' line names the failing step.",
        "Rerun with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET; check NCCL_SOCKET_IFNAME and that every node runs "
        "the same torch/NCCL version.",
        NCCL_TROUBLESHOOTING, generic=True),
    Rule(
        "nccl-socket-ifname", "NCCL found no usable network interface (NCCL_SOCKET_IFNAME)",
        # NCCL src/misc/socket.cc / bootstrap.cc
        (r"Bootstrap : no socket interface found", r"no NCCL_SOCKET_IFNAME interface found",
         r"is neither AF_INET\(2\) nor AF_INET6\(10\)"),
        "NCCL's bootstrap needs an IP interface: NCCL_SOCKET_IFNAME names one that does not exist on this "
        "machine (interface names differ between machines and containers), or the container has none but lo.",
        "Check `ip -br addr` on every node; set NCCL_SOCKET_IFNAME to the interface the nodes reach each other on "
        "(a list such as eth0,eno1 or a prefix works), or unset it to let NCCL choose (it skips lo and docker*).",
        NCCL_ENV),
    Rule(
        "no-route-to-host", "no route to the other node",
        # strerror(EHOSTUNREACH) = "No route to host"; logs cut at the line's end keep at least "No route to"
        (r"No route to(?: host)?\b", r"EHOSTUNREACH"),
        "A socket connect to another node failed with EHOSTUNREACH (errno 113): the address is not reachable from "
        "this machine: a firewall rejects the port range, the nodes are on different subnets, or NCCL/gloo picked "
        "an interface (docker0, a VPN) the other node cannot reach.",
        "Open the ports between nodes (NCCL and gloo use random high ports, not just MASTER_PORT), check `ping` "
        "and `nc -zv` between nodes, set NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME to the shared interface.",
        NCCL_TROUBLESHOOTING),
    Rule(
        "worker-bus-error", "a worker died of SIGBUS (bus error)",
        # torch/distributed/elastic/multiprocessing/api.py: "Signal 7 (SIGBUS) received by PID"
        (r"exitcode\s*:\s*-7\b", r"Signal 7 \(SIGBUS\)", r"Signals\.SIGBUS", r"signal SIGBUS",
         r"exit(?:ed with)? code:? 135\b"),
        "The process touched memory-mapped memory that could not be backed: almost always /dev/shm (shared "
        "memory) is full: NCCL's shared-memory transport or DataLoader workers in a container with Docker's "
        "64 MB default.",
        "Give the container more shared memory (--shm-size=8g or --ipc=host), check `df -h /dev/shm`; lower "
        "DataLoader num_workers; NCCL_SHM_DISABLE=1 as a stopgap.",
        f"{DOCS}/elastic/errors.html", generic=True),
    Rule(
        "worker-abort", "a worker aborted (SIGABRT)",
        (r"exitcode\s*:\s*-6\b", r"Signal 6 \(SIGABRT\)", r"Signals\.SIGABRT", r"signal SIGABRT",
         r"exit(?:ed with)? code:? 134\b"),
        "The process called abort(): a C++ exception nobody caught (`terminate called after throwing ...`, e.g. "
        "the NCCL watchdog taking the process down after a failed or timed-out collective) or a failed assertion "
        "in native code. The real error is the `what():` or assertion text that rank printed just before.",
        "Read that rank's last lines before the abort (the `what():` line); rerun with "
        "TORCH_SHOW_CPP_STACKTRACES=1 and NCCL_DEBUG=INFO if there is none.",
        f"{DOCS}/elastic/errors.html", generic=True),
    Rule(
        "worker-segfault", "a worker crashed (SIGSEGV)",
        (r"exitcode\s*:\s*-11\b", r"Signal 11 \(SIGSEGV\)", r"Signals\.SIGSEGV", r"signal SIGSEGV",
         r"Segmentation fault", r"exit(?:ed with)? code:? 139\b"),
        "The process crashed in native code (a segmentation fault): a C/C++/CUDA extension built for another "
        "torch or CUDA version, a library bug on this GPU or driver, or a stack overflow.",
        "Rerun the failing rank with `python -X faulthandler` (or PYTHONFAULTHANDLER=1) to see the Python frame; "
        "rebuild compiled extensions against the installed torch; try another torch/driver version.",
        f"{DOCS}/elastic/errors.html", generic=True),
    Rule(
        "worker-exception", "a worker raised a Python exception (exit code 1)",
        (r"^\s*(?:\[[\w]+\]:)?\s*exitcode\s*:\s*1\b",),
        "A worker exited with code 1: it raised a Python exception; torchrun's summary only points at it. The "
        "exception is the traceback that rank printed above the summary.",
        "Read that rank's traceback (its lines start with [rankN]: or [defaultN]:); decorate main with "
        "torch.distributed.elastic.multiprocessing.errors.record to get it into the summary.",
        f"{DOCS}/elastic/errors.html", generic=True),
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
