"""The rule table of `ddplab explain`: error text -> cause -> fix -> reference. Data, not code.

A rule matches when any of its patterns (Python regular expressions, searched in the whole log with re.MULTILINE; a
match is attributed to the line it starts on) occurs in the log. Patterns are the invariant part of the message as
PyTorch, NCCL or gloo print it (their source is cited next to the rule when it is not obvious), never one log's wording.
Flags that order the diagnoses when a log holds several errors (ddplab/explain/matcher.py):
`consequence=True`: the error usually follows another rank's failure: look at the root cause first.
`generic=True`: a wrapper message (NCCL's "invalid usage", a worker's exit signal) that a more specific error in the
same log explains better; it comes after the specific ones.
`warning=True`: not an error at all (a performance warning); it comes last.
`mechanism`: "difference" (versions, drivers, interfaces differ between machines) and "resource" (a limit) explain the
errors they cause, so they come first (mechanism_rank, order_findings).
`covers`: a family rule - a whole layer's messages (NCCL's IB transport, the store, FSDP...), selected by source file
from the message catalogue (explain/catalogue, extracted from the software by tools/make_catalogue.py); its
patterns include the literal parts of those templates. A family explains only lines no specific rule explains.
Every rule is checked against real error text (tests/explain/test_explain.py, test_rules.py, test_catalogue.py):
made there by running the failing code when a CPU can, otherwise quoted from a public report cited in tests/logs/;
family rules against their own templates, the software's text.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace

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
    # What kind of cause it is, for ordering findings (order_findings): a difference between machines (versions,
    # drivers, interfaces) explains the transport errors it causes, and a resource limit the crash it causes.
    mechanism: str = "error"  # one of MECHANISMS
    # A family rule covers whole source files of the catalogue ("SOURCE:REGEX" on the template's file); its patterns
    # are its own plus the literal parts of those templates (explain/catalogue, tools/make_catalogue.py).
    covers: tuple[str, ...] = ()
    # Words a log must contain somewhere for any pattern of this rule to match (a cheap test before the regexes;
    # empty: always run them). For families, whose patterns are many.
    needs: tuple[str, ...] = ()
    # The layer its cause belongs to ("gloo", "nccl"; empty: any): it does not fire on a message (or a log) that
    # proves another layer and not this one (matcher, explain/extent.py). Rules named nccl-* / gloo-* have theirs.
    layer: str = ""

    @property
    def layer_of(self) -> str:
        return self.layer or next((p for p in ("nccl", "gloo") if self.id.startswith(p + "-")), "")


# The start of a line NCCL did not print ("host:pid:tid [dev] file:line NCCL WARN ..."): an errno text on NCCL's own
# socket line (its bootstrap and socket transport connect to every rank on random ports) is NCCL's socket layer
# (nccl-socket: a firewall, an interface the peer cannot reach, a peer that exited), not the MASTER_ADDR rendezvous
# or gloo's pair that the same errno text means elsewhere.
# NCCL's socket.cc also prints its failed socket call without that prefix, under "Last error:" (a paste, pdsh's
# "node2: " prefix): "Net : Call to recv from ADDR<PORT> failed : Connection refused" (NCCL < 2.19),
# "socketProgressOpt: Call to recv from ADDR<PORT> failed : ..." (later).
NOT_NCCL_LINE = r"^(?![^\n]*(?:\bNCCL (?:WARN|INFO)\b|\bCall to \w+ from \S+ failed :|\bsocketProgress))[^\n]*?"

# The variables a launcher (torchrun, torch.distributed.launch, ddplab launch) sets and env:// reads
LAUNCHER_ENV = r"(?:RANK|LOCAL_RANK|WORLD_SIZE|LOCAL_WORLD_SIZE|GROUP_RANK|ROLE_RANK|MASTER_ADDR|MASTER_PORT)"

# Where torch puts NCCL's result text (ncclGetErrorString): ProcessGroupNCCL / NCCLUtils "NCCL error in: FILE:LINE,
# TEXT[, NCCL version X]" (every torch since 1.0) and torch/csrc/cuda/nccl.cpp "NCCL Error N: TEXT". The slot holds one
# of eight fixed texts, told apart by their key words; a title or a retyped line changes their case, drops the
# "(run with NCCL_DEBUG=...)" tail or the version, or misspells the first word ("unhanled system error").
# nccl-tests (src/common.h NCCLCHECK) puts the same text in quotes: "[Test ]NCCL failure FILE:LINE 'TEXT'".
NCCL_RESULT = r"(?:NCCL [Ee]rror(?: in: \S+:\d+,| \d+:) [^\n,]*?|NCCL failure \S+:\d+ '[^\n']*?)"


def _nccl_result(number: int, words: str) -> tuple[str, str]:
    """The result `number` (ncclResult_t) in torch's slot: by its key words, or by the number nccl.cpp prints."""
    return NCCL_RESULT + rf"\b(?i:{words})\b", rf"NCCL [Ee]rror {number}\b"


# gloo/transport/tcp/pair.cc's read() on a connected pair: EOF ("Connection closed by peer"), a failed read ("Read
# error [ADDR]: Connection reset by peer") or none in time ("Read timeout"). The peer was reached, then went away or
# hung: not an address that cannot be reached (gloo-address), whatever step (connectFullMesh, a collective) it was in.
_PAIR_READ_FAILED = r"(?:Connection closed by peer|Read error|Read timeout|Connection reset by peer)"

# What the kernel's siginfo si_code says about a fault, as UCX (ucs/debug/debug.c: "Caught signal %d (%s: %s)") and
# the handlers that copy it print it after the strsignal text: "Bus error: nonexistent physical address" (BUS_ADRERR,
# a mapped page that cannot be backed: a full /dev/shm). Matched after the signal's text, in any case.
_SI_CODES = {
    7: ("invalid address alignment", "nonexistent physical address", "object-specific hardware error"),
    11: ("address not mapped to object", "invalid permissions for mapped object"),
    4: (
        "illegal opcode",
        "illegal operand",
        "illegal addressing mode",
        "illegal trap",
        "privileged opcode",
        "privileged register",
        "coprocessor error",
        "internal stack error",
    ),
}


def _cut(text: str, keep: int) -> str:
    """A pattern for a fixed message that a paste may cut short at a word boundary (an issue title, a wrapped or
    truncated line): the first `keep` words are required, each later word only after the one before it.
    "no kernel image is available for execution" still names cudaErrorNoKernelImageForDevice's text."""
    words = text.split(" ")
    tail = ""
    for word in reversed(words[keep:]):
        tail = f"(?: {re.escape(word)}{tail})?"
    return re.escape(" ".join(words[:keep])) + tail + r"(?![\w-])"


def _signal_patterns(number: int, name: str, text: str, anywhere: bool = False) -> tuple[str, ...]:
    """Every layer's way of saying that a process died of (or caught) signal `number`: `name` is its signal name (SIGBUS),
    `text` its strsignal text. `anywhere`: the text is distinctive enough to match anywhere in a line ("Segmentation
    fault"); otherwise ("Killed", "Aborted", "Bus error") only where a shell or launcher puts it."""
    t = re.escape(text)
    # "(core dumped)" after the text (bash pads its job report with spaces) is the shell's own report wherever the
    # line starts: behind a launcher's prefix too (pdsh's "node1: ", Ray's "(pid=42) "), where the bare text alone
    # would be an ordinary word
    # srun names the tasks that ended alike as a list of ranges: "srun: error: node1: tasks 0-1,3,6: Terminated"
    where = (
        t
        if anywhere
        else (
            rf"(?:^\s*{t}(?: \(core dumped\))?\s*$|(?:\d |tasks? [\d,\-]+: ){t}(?: \(core dumped\))?"
            rf"(?:\s|$)|\b{t} +\(core dumped\))"
        )
    )
    return (
        rf"exitcode\s*:\s*-{number}\b",  # torchrun's summary and agent: "exitcode  : -7", "failed (exitcode: -7)"
        rf"Signal {number} \({name}\)",  # elastic/multiprocessing/api.py: "Signal 7 (SIGBUS) received by PID 42"
        # torchrun itself got the signal and passes it to its workers (elastic/multiprocessing/api.py raises
        # SignalException("Process {} got signal: {}"); elastic/agent/server/api.py warns "Received %s death signal")
        rf"got signal: {number}\b",
        rf"Received {number} death signal",
        rf"Signals\.{name}\b",  # Python's enum: "died with <Signals.SIGBUS: 7>"
        rf"signal {name}\b",  # "received signal SIGBUS", "killed by signal SIGBUS"
        rf"\*\*\* {name}\b",  # glog/absl failure handlers: "*** SIGBUS received at time=", "*** SIGSEGV (@0x0) ..."
        rf"Caught signal {number} \(",  # UCX (ucs/debug/debug.c): "Caught signal 7 (Bus error: nonexistent ...)"
        rf"Signal: {t} \({number}\)",  # Open MPI's handler: "Signal: Bus error (7)"
        rf"exited on signal {number}\b",  # mpirun: "exited on signal 7 (Bus error)"
        rf"Fatal Python error: {t}",  # faulthandler (PYTHONFAULTHANDLER=1, -X faulthandler)
        where,  # a shell ("Bus error (core dumped)", bash's "line 1: 42 Bus error   python x.py"), srun ("task 3: ")
        rf"exit(?:ed with)? (?:code|status):? {128 + number}\b",  # a shell's 128 + N
        # DeepSpeed's launcher (deepspeed/launcher/launch.py sigkill_handler): f"{cmd} exits with return code =
        # {last_return_code}", Popen's -N for a child that died of signal N
        rf"exits with return code = -{number}\b",
        # torch/csrc/DataLoader.cpp: "DataLoader worker (pid N) is killed by signal: " + strsignal(si_status)
        rf"killed by signal: {t}(?![\w ])",
    ) + ((rf"{t}: (?i:{'|'.join(map(re.escape, _SI_CODES[number]))})",) if number in _SI_CODES else ())


_SPECIFIC: tuple[Rule, ...] = (
    # ------------------------------------------------------------------ start-up: backend, launcher, rendezvous
    Rule(
        "nccl-not-built",
        "nccl backend on a torch build without NCCL",
        # distributed_c10d.py; matched without its last words, which source pastes often split into another literal
        (r"Distributed package doesn't have NCCL\b",),
        "init_process_group asked for the nccl backend, but this torch build has no NCCL (a CPU-only or macOS build).",
        "Pick the backend from the hardware: backend = 'nccl' if torch.cuda.is_available() else 'gloo' "
        "(gloo runs the same collectives between CPU processes), or install a CUDA build of torch.",
        f"{DOCS}/distributed.html#backends",
    ),
    Rule(
        "pg-not-initialized",
        "collective or DDP before init_process_group",
        # torch >= 1.8 (_get_default_group); torch <= 1.7's _check_default_pg assert and c10d's C++ TORCH_CHECK
        (r"Default process group (?:has not been|is not) initialized",),
        "A collective, DistributedDataParallel or DistributedSampler ran in a process that never joined a "
        "process group (or already left it).",
        "Call dist.init_process_group(...) first, in every process, and start the script with torchrun / "
        "`ddplab launch` so that RANK and WORLD_SIZE are set; destroy_process_group() only at the very end.",
        f"{DOCS}/distributed.html#initialization",
    ),
    Rule(
        "pg-initialized-twice",
        "init_process_group called twice",
        (r"trying to initialize the default process group twice",),
        "init_process_group ran a second time in the same process (for example from a helper and again from main).",
        "Initialise once; guard a helper with `if not dist.is_initialized():`.",
        f"{DOCS}/distributed.html#torch.distributed.is_initialized",
    ),
    Rule(
        "launcher-env-missing",
        "started without a launcher",
        # However it surfaces: torch's ValueError (rendezvous.py `_env_error`), the source line of that raise when
        # a paste stops there, the script's own os.environ["RANK"] (KeyError), or int(os.environ.get("RANK")) (None).
        (
            rf"environment variable {LAUNCHER_ENV} expected, but not set",
            r"MASTER_ADDR/MASTER_PORT are not set",
            # launchers' own wordings: ColossalAI's launch_from_torch, f"Could not find {KeyError} in the torch
            # environment, visit https://www.colossalai.org/ ..."
            rf"Could not find ['\"]?{LAUNCHER_ENV}['\"]? in the torch environment",
            rf"KeyError: ['\"]{LAUNCHER_ENV}['\"]",
            # str(KeyError) is repr(key): a paste without the type leaves a line that is the quoted name alone, a
            # logger that prints the exception (logger.error(e)) the quoted name after its prefix's "- " / "] " / ": "
            rf"(?:^\s*|[\]:|-]\s+)['\"]{LAUNCHER_ENV}['\"]\s*$",
            rf"\b(?:_env_error|_get_env_or_raise)\(['\"]{LAUNCHER_ENV}['\"]\)",
            rf"(?:environ\.get|getenv)\(['\"]{LAUNCHER_ENV}['\"]\)[^\n]*\n(?:[^\n]*\n){{0,8}}?[^\n]*"
            r"TypeError: int\(\) argument must be",
        ),
        "The process reads the variables a launcher sets (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT; "
        "init_process_group's env:// reads them too), and none was set: the script was started with plain `python`, "
        "or with the old `python -m torch.distributed.launch` without --use_env (before torch 1.10 it passed "
        "--local_rank as an argument instead of LOCAL_RANK in the environment).",
        "Start it with `torchrun --nproc-per-node N script.py` or `ddplab launch --nproc-per-node N script.py`; to "
        "run it alone too, read them with defaults: int(os.environ.get('LOCAL_RANK', 0)).",
        f"{DOCS}/elastic/run.html#environment-variables",
    ),
    Rule(
        "local-rank-argument",
        "the launcher passed --local-rank, the script does not accept it",
        # torch/distributed/launch.py passes "--local-rank=N" to the script (torch >= 2.0; "--local_rank=N" before);
        # argparse: "error: unrecognized arguments: --local-rank=0"
        (r"unrecognized arguments?:[^\n]*--local[-_]rank",),
        "`python -m torch.distributed.launch` (and deepspeed's launcher) pass the local rank as a command-line "
        "argument, `--local-rank=N` since torch 2.0 (`--local_rank=N` before), and the script's argument parser does "
        "not know that spelling (or has no such argument: it was written for torchrun, which passes LOCAL_RANK in "
        "the environment).",
        "Start it with torchrun (or `ddplab launch`) and read int(os.environ['LOCAL_RANK']); or accept both "
        "spellings: parser.add_argument('--local-rank', '--local_rank', type=int, default=0).",
        f"{DOCS}/distributed.html#launch-utility",
    ),
    Rule(
        "script-not-found",
        "python could not open the script the launcher started",
        # CPython Modules/main.c pymain_run_file (returns 2): 3.10+ PySys_FormatStderr("%S: can't open file %R: "
        # "[Errno %d] %s\n") (repr: '...' or "..." quotes), 3.8/3.9 and 2.7 fprintf("%ls: can't open file '%s': "
        # "[Errno %d] %s\n"); a folder given as the script: "%S: %R is a directory, cannot continue" (3.x).
        (
            r"\bcan't open file ['\"][^\n]*['\"]: \[Errno \d+\]",
            r"^[^\n]*python[\w.]*: ['\"][^\n]*['\"] is a directory, cannot continue",
        ),
        "The Python interpreter each worker runs could not open the script path it was given (exit code 2, before "
        "any of the script ran): `[Errno 2] No such file or directory` - the path is relative to a working directory "
        "the launcher did not start in (another folder, another node, a container without that mount), or it is "
        "misspelt; `[Errno 13]` - not readable by this user. The launcher's failure summary that follows is its "
        "consequence.",
        "Pass the script's path as it exists on every node (an absolute path, or cd into the folder first; check "
        "`ls PATH` on each node, inside the container); for a module use `torchrun -m pkg.module` / `python -m`.",
        "https://docs.python.org/3/using/cmdline.html#interface-options",
    ),
    Rule(
        "rank-out-of-range",
        "RANK is not below WORLD_SIZE",
        (r"rank < size\. \d+ vs \d+", r"RANK=\d+ is outside 0\.\.WORLD_SIZE"),
        "A process was given a rank outside 0..WORLD_SIZE-1: RANK or WORLD_SIZE was set by hand, or passed to "
        "init_process_group(rank=..., world_size=...) with values that disagree with the launcher.",
        "Let the launcher set RANK and WORLD_SIZE and call init_process_group without rank=/world_size=; "
        "world size = nodes x processes per node.",
        f"{DOCS}/distributed.html#torch.distributed.init_process_group",
    ),
    Rule(
        "rendezvous-incomplete",
        "not every rank joined the process group",
        (
            # TCPStore.cpp "Timed out after {} seconds waiting for clients. {}/{} clients joined." (an issue title
            # keeps only its head)
            r"waiting for clients\. \d+/\d+ clients joined",
            r"Timed out after \d+ seconds waiting for clients\b",
            r"wait timeout after \d+ms, keys: ",
            r"RendezvousTimeoutError",
            # c10d Utils.hpp recvBytes/sendBytes (torch < 2.2): the store was reached (a failed connect says "client
            # socket has timed out ... while trying to connect"), then a get()/wait() for a key other ranks set got no
            # answer before the timeout: the old wording of "wait timeout after ...ms, keys:"
            r"(?:DistStoreError|DistNetworkError|RuntimeError): Socket Timeout\b",
            # distributed_c10d.py _store_based_barrier: init_process_group/new_group wait until world_size ranks
            # have added themselves to the store's barrier key; torch 2.x says num_workers_joined=, torch 1.x
            # worker_count= (more than world_size: two launchers started the same ranks, e.g. srun x mp.spawn)
            r"[Tt]imed out initializing process group in store based barrier",
        ),
        "Some ranks never arrived: a rank crashed or is still starting, WORLD_SIZE/RANK do not match the processes "
        "that were started (for example rank=0 hard-coded in every process), or nodes disagree on --nnodes.",
        "Check that nnodes x nproc-per-node processes start and none of them sets RANK/WORLD_SIZE itself; look at "
        "the other ranks' logs for an earlier error; on several machines, start every node with the same "
        "--nnodes and --rdzv-endpoint.",
        f"{DOCS}/elastic/run.html",
        consequence=True,
    ),
    Rule(
        "rendezvous-store-lost",
        "torchrun's agent lost the rendezvous store it had reached",
        # elastic/rendezvous/dynamic_rendezvous.py: the agent's keep-alive heartbeat and its shutdown write to the
        # store ("The node '{}' has failed to send a keep-alive heartbeat to / shutdown the rendezvous '{}' due to an
        # error of type {}."); elastic/agent/server/api.py polls num_nodes_waiting() only while the workers are
        # HEALTHY. A RendezvousConnectionError there comes after the store was reached and the workers started.
        (
            r"has failed to send a keep-alive heartbeat to the rendezvous '[^'\n]*' due to an error of type "
            r"RendezvousConnectionError",
            # the shutdown runs as the agent exits, whatever ended it, and logs before that error is printed: not
            # when the agent is leaving on a failed rendezvous (the store's host gave up first: that is the cause)
            r"has failed to shutdown the rendezvous '[^'\n]*' due to an error of type RendezvousConnectionError"
            r"(?![\s\S]*\bRendezvous(?:Timeout|Closed)Error\b)",
            r"\bnum_nodes_waiting\b[^\n]*\n(?:[^\n]*\n){0,16}?[^\n]*\bRendezvousConnectionError\b",
            # c10d_rendezvous_backend.py _call_store (a call on the connected store) failing on a connection the
            # server closed: the store's server exited (a timed-out wait is rendezvous-incomplete's)
            r"\bin _call_store\s*\n(?:[^\n]*\n){0,3}?[^\n]*\b(?:Broken pipe|Connection reset by peer|Connection "
            r"closed by peer)",
        ),
        "The c10d rendezvous store is served by the torchrun agent on the node of --rdzv-endpoint. This agent had "
        "reached it, then lost it (its keep-alive heartbeat, its monitor loop while the workers ran, or its shutdown "
        "at exit failed on the store): the agent that served it exited. Either that node's job ended first (it failed - "
        "its log holds the first error - or finished), or several jobs on one machine share the endpoint's port "
        "(the same --rdzv-endpoint / --master-port, or --standalone in releases that fixed it to 29400): the first "
        "job serves the store for all of them, and when it ends the others lose it.",
        "Read the log of the node that serves the endpoint first. For concurrent jobs on one machine give each its "
        "own port: --rdzv-endpoint localhost:0 (or --standalone on a recent torch) picks a free one; on several "
        "machines, a distinct HOST:PORT per job.",
        f"{DOCS}/elastic/run.html#stacked-single-node-multi-worker",
        consequence=True,
    ),
    Rule(
        "port-in-use",
        "the rendezvous port is already in use",
        (r"EADDRINUSE", r"[Aa]ddress already in use", r"port:? \S+ already in use"),
        "Another process (often a previous run that did not exit, or a second job) already listens on MASTER_PORT.",
        "Use another port (--master-port), or `torchrun --standalone` / `ddplab launch`, which pick a free one on a "
        "single machine; end the stale run (`ps aux | grep torchrun`).",
        f"{DOCS}/elastic/run.html#stacked-single-node-multi-worker",
    ),
    Rule(
        "master-unreachable",
        "cannot reach MASTER_ADDR:MASTER_PORT",
        (
            # (not a gloo pair's connect to the address a peer advertised: that peer, not the store, refused)
            NOT_NCCL_LINE.replace(r"|\bsocketProgress", r"|\bsocketProgress|pair\.cc:\d+\]\s*connect \[")
            + r"[Cc]onnection refused",
            r"client socket has timed out after \d+m?s while trying to connect to",
            r"client socket has failed to connect to",
            r"failed to connect/validate to host",
            # torch/distributed/elastic/rendezvous/c10d_rendezvous_backend.py; older TCPStore: "connect() timed out"
            r"The connection to the C10d store has failed",
            r"connect\(\) timed out\. Original timeout was",
        ),
        "This process could not connect to the rendezvous at MASTER_ADDR:MASTER_PORT: rank 0's node is not up yet, "
        "the address or port is wrong (a script that sets MASTER_ADDR/MASTER_PORT itself overrides the launcher), "
        "or a firewall blocks the port.",
        "Do not set MASTER_ADDR/MASTER_PORT in the script; on several machines pass the first node's reachable "
        "address and an open port to every node (--rdzv-endpoint HOST:PORT) and check it with `nc -zv HOST PORT`.",
        f"{DOCS}/elastic/run.html",
    ),
    Rule(
        "slurm-more-cpus-than-granted",
        "Slurm refused a step asking for more CPUs than granted",
        # Slurm's ESLURM_TOO_MANY_REQUESTED_CPUS text (slurm_errno.c), from srun ("srun: error: Unable to create step
        # for job N: ...") and sbatch ("sbatch: error: Batch job submission failed: ...")
        (r"More processors requested than permitted",),
        "Slurm refused the job step (srun) or the job (sbatch): it asks a node for more CPUs (tasks per node x "
        "--cpus-per-task) than the allocation, or the node, grants. Usual ways there: an srun inside the sbatch "
        "script asking for its own -n/-c beyond what #SBATCH requested, a tool that calls srun again inside a step, "
        "nodes with fewer usable cores than assumed (core specialisation reserves some; a mixed partition's "
        "smallest node).",
        "Make the step fit the allocation: `srun` with no -n/-c inherits the job's; request per node what the "
        "node holds (`sinfo -o '%N %c'`, `scontrol show node`): one torchrun per node (--ntasks-per-node=1) with "
        "--cpus-per-task for all its ranks, or one task per GPU (--ntasks-per-node=G) with cores/G each.",
        "https://slurm.schedmd.com/srun.html#OPT_cpus-per-task",
    ),
    Rule(
        "slurm-oom-kill",
        "Slurm's memory cgroup killed a process of the job",
        # slurmstepd (task/cgroup, jobacct_gather): "Detected %u oom-kill event(s) in step %u.%u cgroup. Some of your
        # processes may have been killed by the cgroup out-of-memory handler." (older), "... in StepId=%u.%u ..."
        # and "Detected %u oom_kill event%s in %ps. Some of the step tasks have been OOM Killed." (newer); srun:
        # "srun: error: %s: task %s: Out Of Memory"
        (
            r"Detected \d+ oom[-_]kill events?(?:\(s\))? in ",
            r"killed by the cgroup out-of-memory handler",
            r"srun: error: \S+: tasks? [\d,\-]+: Out Of Memory",
        ),
        "The job step used more host memory than Slurm granted it (--mem, --mem-per-cpu or --mem-per-gpu): the "
        "kernel's OOM killer, inside the job's memory cgroup, killed a process - a rank or one of its DataLoader "
        "workers (which torchrun then reports as exit code -9 / SIGKILL). Host RAM, not GPU memory; memory-backed "
        "/tmp and /dev/shm count too.",
        "Compare what was granted with what the job used (`sacct -j JOB -o JobID,ReqMem,MaxRSS,State`; spikes "
        "shorter than its 30 s sampling do not show there); request more (--mem, or --mem-per-gpu per rank), or "
        "lower host memory per rank (DataLoader num_workers, the dataset held once per rank, pinned memory).",
        "https://slurm.schedmd.com/sbatch.html#OPT_mem",
        mechanism="resource",
    ),
    Rule(
        "slurm-time-limit",
        "Slurm ended the job at its time limit",
        # slurmstepd: "*** %s ON %s CANCELLED AT %s DUE TO TIME LIMIT ***" for the job and for each step ("JOB 42",
        # "STEP 42.0"; the string as Debian's slurmstepd binary holds it); Slurm < 14.03 had no "ON %s"
        (r"\bCANCELLED AT \S+ DUE TO TIME LIMIT\b",),
        "The job ran past the wall time it was granted (sbatch/srun --time, or the partition's default or maximum "
        "when none was asked for): Slurm sent every task SIGTERM, then SIGKILL after the KillWait grace period. The "
        "'Terminated' tasks and the ranks torchrun stopped are this, not a failure of their own. A job that hung "
        "(no progress in its last lines: a collective some rank never reached) also ends here.",
        "Ask for more time (--time=HH:MM:SS, within the partition's MaxTime: `sinfo -o '%P %l'`) or a partition "
        "that allows it; save checkpoints often enough to resume from the last one (--signal=B:USR1@120 warns "
        "the batch script before the limit). If the log shows no progress before the limit, it hung: rerun under "
        "`ddplab launch --hang-timeout 60` to see where.",
        "https://slurm.schedmd.com/sbatch.html#OPT_time",
        mechanism="resource",
    ),
    # slurmstepd's other reasons, in the same line (the strings as Debian's slurmstepd binary holds them):
    # "... CANCELLED AT %s DUE TO PREEMPTION ***", "... DUE TO JOB REQUEUE ***", "... DUE TO NODE FAILURE, SEE
    # SLURMCTLD LOG FOR DETAILS ***", and "... CANCELLED AT %s ***" with no reason (scancel).
    Rule(
        "slurm-preempted",
        "Slurm took the nodes back: the job was preempted or requeued",
        (r"\bCANCELLED AT \S+ DUE TO (?:PREEMPTION|JOB REQUEUE)\b",),
        "A job of higher priority needed these nodes (the partition's or QOS's PreemptMode: CANCEL or REQUEUE), or "
        "the job was requeued (`scontrol requeue`): Slurm sent every task SIGTERM, then SIGKILL after the grace "
        "period. The 'Terminated' tasks and the ranks torchrun stopped are this, not a failure of their own.",
        "Make the job resumable rather than unpreemptible: submit with --requeue and save on SIGTERM, resuming from "
        "the last checkpoint (`ddplab slurm` writes such a script: its ranks save at the next step and exit 4, and "
        "the job requeues itself); --signal=B:TERM@120 warns the batch script earlier. To avoid preemption, use a "
        "partition or QOS that cannot be preempted (`scontrol show partition` shows PreemptMode).",
        "https://slurm.schedmd.com/preempt.html",
        mechanism="resource",
    ),
    Rule(
        "slurm-node-failure",
        "a node of the job failed: Slurm cancelled the job",
        (r"\bCANCELLED AT \S+ DUE TO NODE FAILURE\b",),
        "A node of this job stopped answering slurmctld (it crashed or rebooted, lost its network, or its slurmd "
        "died), so Slurm cancelled the job and its steps on every node. The ranks stopped or disconnected on the "
        "other nodes are consequences.",
        "Resubmit and resume from the last checkpoint (with --requeue Slurm requeues the job itself); "
        "`sacct -j JOBID -o JobID,State,NodeList` shows which node, and `--exclude=NODE` keeps the next run off it "
        "until the admins have looked (its reason: `sinfo -R`).",
        "https://slurm.schedmd.com/sbatch.html#OPT_requeue",
        mechanism="resource",
    ),
    Rule(
        "slurm-cancelled",
        "the job was cancelled (scancel)",
        (r"\*\*\* (?:JOB|STEP) \S+ (?:ON \S+ )?CANCELLED AT \S+ \*\*\*",),
        "Someone cancelled the job or this step with scancel (you, an administrator, or a script or dependency "
        "that does), without a reason of Slurm's own: a time limit, a preemption or a node failure would be named "
        "in the same line. The 'Terminated' tasks are this, not a failure of the training.",
        "See who and when: `sacct -j JOBID -o JobID,State%30,End` (State reads 'CANCELLED by UID'); if no one "
        "meant to, look for an scancel in the job's own scripts or a dependency (--dependency=afterok) that failed.",
        "https://slurm.schedmd.com/scancel.html",
        mechanism="resource",
    ),
    # ------------------------------------------------------------------ one rank failed, the others notice
    Rule(
        "peer-closed",
        "another rank went away",
        (
            NOT_NCCL_LINE + r"(?:Connection closed by peer|Connection reset by peer|Remote peer closed the connection"
            r"|Broken pipe|Software caused connection abort|ECONNRESET|EPIPE\b)",
        ),
        "gloo lost the connection to another rank in the middle of a collective. Either that rank failed (crashed, "
        "was killed, raised an exception), or it exited normally while this rank was still waiting in a collective "
        "only some ranks called: an evaluation, a metric all_reduce or a forward through the DDP model (DDP "
        "broadcasts buffers in forward) inside `if rank == 0:`, or dist.isend()/irecv() without wait() before exit.",
        "If another rank printed an error, fix that one first (torchrun's 'Root Cause (first observed failure)', or "
        "the earliest traceback). If none did - only this rank's text is here, or this rank is the root cause - the "
        "peer finished normally while this rank waited: make every rank call the same collectives (evaluate on all "
        "ranks, or on rank 0 through model.module with no collective inside) and wait() every isend/irecv.",
        f"{DOCS}/elastic/errors.html",
        consequence=True,
        layer="gloo",  # NCCL's own lost connection (its `Last error:` socket line) is nccl-socket's
    ),
    Rule(
        "collective-timeout",
        "a collective timed out",
        (
            r"Watchdog caught collective operation timeout",
            r"Timed out waiting \d+ms for (?:recv|send) operation",
            r"ran for \d+ milliseconds before timing out",
            r"timed out in blocking wait",
            r"dump debug info, due to collective timeout or exception",  # the watchdog's exit line (torch >= 2.5)
        ),
        "A collective waited longer than the process-group timeout: one rank never called it (a rank-dependent "
        "branch, an uneven number of batches, a crash or hang elsewhere) or called a different collective/shape.",
        "Make every rank run the same collectives in the same order (equal batches per rank: DistributedSampler; "
        "no collective inside `if rank == 0:`); rerun with TORCH_DISTRIBUTED_DEBUG=DETAIL, or under "
        "`ddplab launch --hang-timeout 60` to see every rank's stack.",
        f"{DOCS}/distributed.html#debugging-torch-distributed-applications",
        consequence=True,
    ),
    Rule(
        "nccl-watchdog-stuck",
        "the NCCL watchdog made no progress: its heartbeat monitor ended the process",
        # ProcessGroupNCCL.cpp's heartbeat monitor (torch >= 2.2): the first line, then the fatal one
        (
            r"watchdog got stuck for \d+ seconds without making progress",
            r"Heartbeat monitor timed out! Process will be terminated",
            r"dump debug info, due to ProcessGroupNCCL watchdog hang",  # its exit line (torch >= 2.5)
        ),
        "ProcessGroupNCCL's watchdog thread, which checks every collective for errors and timeouts, made no progress "
        "for TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC (480 s by default; 600 s in torch 2.2-2.3), so its heartbeat monitor "
        "dumped the debug info and aborted the process (exit code -6). The watchdog sits in a CUDA or NCCL call that "
        "does not return: the abort of a communicator after an earlier collective timeout or NCCL error, a GPU that "
        "hung or fell off the bus (an Xid in the kernel log), or another thread holding the GIL inside a CUDA call.",
        "Look for the first error before it (a collective timeout, an NCCL error: fix that one) and in `dmesg` for "
        "Xid errors; the Flight Recorder dump names the collective each rank was in (`ddplab launch` collects it). "
        "If the wait was legitimate (a long step on the host), raise TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC; "
        "TORCH_NCCL_ENABLE_MONITORING=0 turns the monitor off.",
        f"{DOCS}/torch_nccl_environment_variables.html",
        consequence=True,  # of the error that left the watchdog stuck (a timeout's abort), when the log has it
        generic=True,
    ),
    Rule(
        "dataloader-worker-died",
        "a DataLoader worker process died",
        # torch/utils/data/dataloader.py (_try_get_data) and _utils/signal_handling.py
        (
            r"DataLoader worker \(pid\(s\) [\d, ]+\) exited unexpectedly",
            r"DataLoader worker \(pid \d+\) exited unexpectedly with exit code",
            # the sentence libtorch_python's worker-status check appends, kept where a paste drops the "(pid N)"
            r"Details are lost due to multiprocessing\. Rerunning with num_workers=0",
        ),
        "A worker process of a DataLoader (num_workers > 0) ended while the loop waited for its batch: killed for "
        "memory (the kernel's OOM killer; every rank runs its own workers, each with its copy of what the dataset "
        "holds), a bus error from a /dev/shm too small for the batches the workers pass (Docker's 64 MB), an "
        "exception or crash in the dataset's code, or, where workers start by spawn (Windows, macOS), the script "
        "run again in each worker because its top-level code is not under `if __name__ == '__main__':`.",
        "Rerun with num_workers=0 to see the dataset's own error; in a container give it shared memory "
        "(--shm-size=8g or --ipc=host); check `dmesg` for the OOM killer and lower num_workers or what each worker "
        "holds (read samples in __getitem__, not the whole set in __init__); guard the script's top level with "
        "`if __name__ == '__main__':`.",
        f"{DOCS}/data.html#multi-process-data-loading",
        consequence=True,  # of what ended the worker: a bus error, a signal, the dataset's exception in the log
        generic=True,
    ),
    Rule(
        "worker-killed",
        "a worker was killed (SIGKILL)",
        # the kernel's OOM killer (mm/oom_kill.c): "Out of memory: Killed process 42 (python)" ("Kill process" before 5.0)
        _signal_patterns(9, "SIGKILL", "Killed")
        + (r"Killed\s*$", r"killed by signal: Killed", r"Out of memory: Kill(?:ed)? process \d+"),
        "The process got SIGKILL (exit code -9, or 137 from a shell): on a host that is usually the kernel's "
        "out-of-memory killer (host RAM, not GPU memory), or the scheduler (Slurm time or memory limit).",
        "Check `dmesg | grep -i oom` or the job's accounting; lower host memory per rank (DataLoader num_workers, "
        "dataset kept in RAM once per rank, pinned memory) or ask for more memory.",
        f"{DOCS}/elastic/errors.html",
        mechanism="resource",
    ),
    # ------------------------------------------------------------------ DDP itself
    Rule(
        "ddp-static-graph",
        "the training graph changed under DDP(static_graph=True)",
        # reducer.cpp: static_graph promises the same used parameters and hook counts in every iteration
        (
            r"not compatible with static_graph set to True",
            r"Your training graph (?:has changed|is changed) in this "
            r"iteration",
        ),
        "DistributedDataParallel(static_graph=True) (or _set_static_graph()) records in the first iteration which "
        "parameters get gradients and how often each hook fires; a later iteration differed: a parameter used only "
        "on some steps (a branch, an auxiliary head), or forward called twice before one backward.",
        "Drop static_graph and pass find_unused_parameters=True if the set of used parameters really changes; "
        "otherwise make every step use the same parameters, one forward per backward.",
        f"{DOCS}/generated/torch.nn.parallel.DistributedDataParallel.html",
    ),
    Rule(
        "unused-parameters",
        "parameters that got no gradient",
        # reducer.cpp starts both of its reports with this sentence; with static_graph the rest of the same message
        # says the graph changed (ddp-static-graph's), whichever line a paste wraps it onto
        (
            r"Expected to have finished reduction in the prior iteration(?![\s\S]{0,400}?(?:not compatible with\s+"
            r"static_graph|training\s+graph\s+(?:has|is)\s+changed))",
            r"parameters that were not used in producing loss",
        ),
        "Some parameters took no part in computing the loss, so DDP waited for their gradients forever.",
        "Make every parameter reach the loss, freeze the unused ones (requires_grad=False), or wrap with "
        "DistributedDataParallel(..., find_unused_parameters=True) (slower).",
        f"{DOCS}/generated/torch.nn.parallel.DistributedDataParallel.html",
    ),
    Rule(
        "ddp-model-mismatch",
        "the ranks built different models",
        # reducer.cpp verify_params_across_processes: torch 2.x's summary, and its per-parameter check (every
        # version): "params[N] in this process with sizes [..] appears not to match sizes|strides of the same param
        # in process 0." (strides: a memory format that differs between ranks, e.g. another cuDNN/torch build)
        (
            r"DDP expects same model across all ranks",
            r"appears not to match (?:sizes|strides) of the same param in process \d+",
        ),
        "DistributedDataParallel found a different number, shape or layout (strides) of parameters on different "
        "ranks: the model depends on the rank, on unseeded randomness, or on data read differently per rank.",
        "Build the identical model on every rank (same config, same code path); only data may differ per rank.",
        f"{DOCS}/notes/ddp.html",
    ),
    Rule(
        "ddp-device-ids-cpu",
        "device_ids given for a CPU model",
        # torch >= 1.8: "... only work with single-device/multiple-device GPU modules or CPU modules"; torch 1.x's
        # nn/parallel/distributed.py asserted "... only work with single-device CUDA modules" (AssertionError)
        (r"device_ids and output_device arguments only work with single-device",),
        "DistributedDataParallel got device_ids, but the model's parameters are on the CPU.",
        "Pass device_ids=[local_rank] only for a model on cuda:local_rank; on CPU leave device_ids=None.",
        f"{DOCS}/generated/torch.nn.parallel.DistributedDataParallel.html",
    ),
    Rule(
        "ddp-multi-device-ids",
        "DDP given several GPUs for one process",
        # torch/nn/parallel/distributed.py, DistributedDataParallel.__init__
        (r"device_ids can only be None or contain a single element",),
        "DistributedDataParallel was given device_ids with several GPUs (device_ids=[0, 1, 2, 3], as DataParallel "
        "takes them): DDP runs one process per GPU, each with its own single device.",
        "Start one process per GPU (torchrun --nproc-per-node N, or `ddplab launch`) and give each "
        "DDP(model, device_ids=[local_rank]) after torch.cuda.set_device(local_rank).",
        f"{DOCS}/generated/torch.nn.parallel.DistributedDataParallel.html",
    ),
    Rule(
        "spawn-main-guard",
        "workers started by spawn re-ran the script's top level",
        # CPython's multiprocessing/spawn.py, _check_not_importing_main
        (r"current process has finished its bootstrapping phase",),
        "torch.multiprocessing.spawn (and any start method 'spawn': DataLoader workers on Windows and macOS) starts "
        "each worker as a new interpreter that imports the main script again; the script starts processes at its "
        "top level (mp.spawn, a DataLoader with workers), so each worker tried to start processes of its own while "
        "still importing, and refused. The parent then reports its workers' exit (ProcessExitedException).",
        "Put the script's top-level work under `if __name__ == '__main__':` (mp.spawn(main, ...) inside it); under "
        "torchrun or `ddplab launch` the script needs no mp.spawn at all.",
        "https://docs.python.org/3/library/multiprocessing.html#the-spawn-and-forkserver-start-methods",
    ),
    Rule(
        "syncbn-cpu",
        "SyncBatchNorm on CPU",
        (r"SyncBatchNorm expected input tensor to be on GPU",),
        "SyncBatchNorm synchronises statistics only for GPU (or XPU) tensors; the input is on the CPU.",
        "On CPU keep plain BatchNorm: convert with nn.SyncBatchNorm.convert_sync_batchnorm(model) only when "
        "torch.cuda.is_available().",
        f"{DOCS}/generated/torch.nn.SyncBatchNorm.html",
    ),
    Rule(
        "inplace-before-backward",
        "a tensor saved for the backward was changed in place",
        # autograd's saved-variable check (torch/csrc/autograd/saved_variable.cpp): "one of the variables needed for
        # gradient computation has been modified by an inplace operation: [TYPE [SHAPE]] ... is at version N;
        # expected version M instead."
        (r"one of the variables needed for gradient computation has been modified\s+by an inplace operation",),
        "Autograd saved a tensor in the forward, and something changed it in place before the backward ran. Under "
        "DDP the usual one is DDP itself: with broadcast_buffers=True (the default) every forward copies rank 0's "
        "buffers (BatchNorm's running_mean and running_var) into the model in place, so a model called twice before "
        "one backward (a GAN's discriminator on fake then real, two augmented views, a recomputed checkpoint) fails "
        "at the backward; a tensor the size of a BatchNorm's channels in the message is the sign. Otherwise an "
        "in-place operation of the model (x += y, ReLU(inplace=True), x[i] = ..., an optimizer step between the "
        "forward and the backward).",
        "Under DDP: one forward per backward (model(torch.cat([fake, real])) and split the output), or "
        "DDP(model, broadcast_buffers=False) (each rank keeps its own BatchNorm statistics), or SyncBatchNorm "
        "(torch.nn.SyncBatchNorm.convert_sync_batchnorm(model)). Otherwise torch.autograd.set_detect_anomaly(True) "
        "names the forward operation whose saved tensor changed: use its out-of-place form.",
        f"{DOCS}/generated/torch.nn.parallel.DistributedDataParallel.html",
    ),
    # ------------------------------------------------------------------ checkpoints
    Rule(
        "module-prefix",
        "state_dict keys with/without DDP's 'module.' prefix",
        # torch >= 0.4: 'Unexpected key(s) in state_dict: "module.'; torch 0.3: 'unexpected key "module.'. A prefix
        # that differs leaves every key of one side unmatched, so missing "module." keys come with unexpected ones
        # (nn.Module.load_state_dict puts "Missing key(s)" first, then "Unexpected key(s)" on the next line);
        # missing keys alone are checkpoint-missing-keys.
        (
            r"Unexpected key\(s\) in state_dict: \"module\.",
            r"[Uu]nexpected key \"module\.",
            r"Missing key\(s\) in state_dict: \"module\.[^\n]*\n?[^\n]*Unexpected key\(s\) in state_dict: \"",
        ),
        "The checkpoint was saved from the DDP wrapper (keys start with 'module.') and loaded into the plain model, "
        "or the other way round.",
        "Save ddp_model.module.state_dict(); to load an old file, strip the prefix: "
        "{k.removeprefix('module.'): v for k, v in state.items()}.",
        "https://pytorch.org/tutorials/intermediate/ddp_tutorial.html#save-and-load-checkpoints",
    ),
    Rule(
        "checkpoint-missing-keys",
        "the checkpoint has no weights for some of the model's parameters",
        # nn.Module.load_state_dict (torch/nn/modules/module.py): "Missing key(s) in state_dict: ..." and no
        # "Unexpected key(s)" line after it: nothing in the file was left over, so the keys are not renamed - absent
        (
            r"Missing key\(s\) in state_dict: (?![^\n]*Unexpected key\(s\))[^\n]*$"
            r"(?!\n[^\n]*Unexpected key\(s\) in state_dict)",
        ),
        "load_state_dict(strict=True) found parameters or buffers of the model that the checkpoint does not hold, "
        "and nothing in the checkpoint left over: not a renamed prefix but layers the checkpoint never had (the "
        "model gained layers after it was saved, or the file is of a smaller model).",
        "If the missing keys are exactly the new layers, load with load_state_dict(state, strict=False) and check "
        "the returned missing_keys (those layers keep their initialisation); otherwise load the checkpoint that "
        "matches this model.",
        # generic: when ranks' lines interleave, the "Unexpected key(s)" line may not follow its "Missing" line; a
        # prefix rule (module-prefix, compile-prefix) found in the same log explains the keys better
        f"{DOCS}/generated/torch.nn.Module.html#torch.nn.Module.load_state_dict",
        generic=True,
    ),
    Rule(
        "compile-prefix",
        "state_dict keys with torch.compile's '_orig_mod.' prefix",
        (r"(?:Unexpected|Missing) key\(s\) in state_dict: \"_orig_mod\.",),
        "The checkpoint was saved from a torch.compile'd model (keys start with '_orig_mod.') and loaded into the "
        "uncompiled one, or the other way round.",
        "Save the original module (compiled._orig_mod.state_dict(), or keep a reference to the model before "
        "compiling); to load an old file strip '_orig_mod.' from the keys.",
        f"{DOCS}/generated/torch.compile.html",
    ),
    Rule(
        "weights-only-load",
        "torch.load refused a pickled object (weights_only)",
        (r"Weights only load failed", r"Unsupported global: GLOBAL"),
        "Since torch 2.6 torch.load defaults to weights_only=True and refuses arbitrary pickled objects "
        "(dataclasses, argparse.Namespace, numpy objects) saved in the checkpoint.",
        "Save only tensors and plain containers (dict/list/int/float/str), e.g. vars(args) instead of args; for a "
        "trusted old file use torch.serialization.add_safe_globals([...]) or weights_only=False.",
        f"{DOCS}/generated/torch.load.html",
    ),
    Rule(
        "folder-made-by-every-rank",
        "a folder that already existed was made without exist_ok",
        # Python's OSError text for EEXIST (FileExistsError, errno 17; Windows' WinError 183), which os.makedirs,
        # os.mkdir, Path.mkdir and the log writers built on them (SummaryWriter's log_dir) raise for a folder that
        # is there already
        (
            r"FileExistsError: \[Errno 17\] File exists",
            r"FileExistsError: \[WinError 183\]",
        ),
        "A folder (or file) that already existed was created without exist_ok: in a run of several processes every "
        "rank runs the same code, so every rank makes the same output, log or checkpoint folder (directly, or "
        "through a SummaryWriter or a logger each rank builds), and all but the first to get there fail; a test "
        "that it exists before making it only narrows the race. Or it was left there by an earlier run.",
        "os.makedirs(path, exist_ok=True) on every rank; or make it, and build writers and loggers, on global rank "
        "0 only (`if dist.get_rank() == 0:`), then dist.barrier() before the other ranks use it.",
        "https://docs.python.org/3/library/os.html#os.makedirs",
    ),
    # ------------------------------------------------------------------ devices (GPU)
    Rule(
        "cuda-not-compiled",
        "CUDA used with a CPU-only torch",
        (r"Torch not compiled with CUDA enabled", r"Found no NVIDIA driver on your system"),
        "The script moves tensors to CUDA (.cuda(), 'cuda:N'), but this torch build or this machine has no CUDA.",
        "Choose the device from the hardware: device = torch.device('cuda', local_rank) if "
        "torch.cuda.is_available() else torch.device('cpu'); use the gloo backend on CPU.",
        f"{DOCS}/notes/cuda.html",
    ),
    Rule(
        "invalid-device-ordinal",
        "LOCAL_RANK beyond the visible GPUs",
        (
            r"invalid device ordinal",
            r"LOCAL_RANK=\d+ but only \d+ GPU\(s\) are visible",
            # Lightning's device parser (MisconfigurationException, every release since 0.7): "You requested gpu:
            # [0, 1]\n But your machine only has: [0]" (older: "You requested GPUs:"); a repr keeps the "\n" literal
            r"You requested (?:gpu|GPUs): \[[^\]\n]*\](?:\\n|\s)+But your machine only has: \[",
        ),
        "A process asked for a GPU index beyond the GPUs it can see: more processes per node than GPUs, "
        "CUDA_VISIBLE_DEVICES hides some (Slurm's --gpus-per-task or --gres give each task only its own GPUs), or "
        "the script passes another number where the local index belongs: the "
        "global RANK (set_device(rank) fails from the second node on, where RANK >= GPUs per node) or a physical GPU "
        "id read from CUDA_VISIBLE_DEVICES (inside the process the visible GPUs are renumbered 0..n-1).",
        "Start at most one process per visible GPU: --nproc-per-node gpu (or the count nvidia-smi shows), check "
        "CUDA_VISIBLE_DEVICES, and select the GPU by the local index: "
        "torch.cuda.set_device(int(os.environ['LOCAL_RANK'])). Lightning under Slurm: ask the Trainer for the "
        "GPUs each node was granted (devices = --ntasks-per-node = the N of --gres=gpu:N).",
        f"{DOCS}/elastic/run.html",
    ),
    Rule(
        "duplicate-gpu",
        "two ranks on the same GPU",
        (r"Duplicate GPU detected",),
        "NCCL found two ranks driving the same GPU: every rank used cuda:0 (.cuda() or 'cuda:0' without "
        "torch.cuda.set_device(local_rank)), or more processes than GPUs.",
        "Call torch.cuda.set_device(local_rank) before init_process_group and use torch.device('cuda', local_rank) "
        "everywhere; start one process per GPU.",
        "https://pytorch.org/tutorials/intermediate/ddp_tutorial.html",
    ),
    Rule(
        "nccl-system-error",
        "NCCL: unhandled system error",
        # ncclGetErrorString's text; an issue title retypes its case ("Unhandled System Error")
        (r"[Uu]nhandled [Ss]ystem [Ee]rror", r"ncclSystemError") + _nccl_result(2, "system error"),
        "NCCL failed in a system call: most often the network interface (wrong NCCL_SOCKET_IFNAME, a down "
        "InfiniBand port), too little shared memory in a container (/dev/shm), or a peer that died.",
        "Rerun with NCCL_DEBUG=INFO to see the failing call; in Docker pass --shm-size=1g or --ipc=host; set "
        "NCCL_SOCKET_IFNAME to the interface the nodes share; try NCCL_IB_DISABLE=1 to rule out InfiniBand.",
        NCCL_TROUBLESHOOTING,
        generic=True,
    ),
    Rule(
        "cuda-oom",
        "GPU out of memory",
        (
            r"CUDA out of memory",
            r"OutOfMemoryError",
            r"CUDA error: out of memory",
            r"cuda runtime error \(2\) : out of memory",
            r"Cuda failure (?:\d+ )?'out of memory'",  # NCCL's CUDACHECK (its `Last error:` / WARN line)
        ),
        "A rank needed more GPU memory than was free: batch or model too large per GPU, memory kept alive "
        "(losses accumulated with their graph), or several processes on one GPU. Under DDP, GPU 0 often runs out "
        "first because every rank opened a CUDA context there: a missing torch.cuda.set_device(local_rank), or "
        "torch.load of a checkpoint saved from cuda:0 without map_location.",
        "Lower the per-rank batch size (use gradient accumulation to keep the global batch), use mixed precision; "
        "check with nvidia-smi that each rank is on its own GPU and GPU 0 holds one process only: call "
        "torch.cuda.set_device(local_rank) first thing, load with torch.load(path, map_location='cpu'); "
        "store loss.item(), not loss.",
        f"{DOCS}/notes/cuda.html#memory-management",
        mechanism="resource",
    ),
    Rule(
        "device-side-assert",
        "CUDA device-side assert",
        (r"device-side assert triggered",),
        "A CUDA kernel's own check failed, most often an index out of range: a class label >= the number of "
        "classes (or negative) in a loss, or an embedding index beyond the vocabulary.",
        "Run the same batch on CPU (clear error message) or with CUDA_LAUNCH_BLOCKING=1; check label ranges "
        "(targets.min(), targets.max()) against the model's output size.",
        f"{DOCS}/notes/cuda.html#asynchronous-execution",
    ),
    # ------------------------------------------------------------------ added for issue 16 (tests/logs corpus)
    Rule(
        "ddp-model-on-cpu",
        "nccl collective on a CPU tensor (model not on the GPU yet)",
        # ProcessGroupNCCL.cpp: "Tensors must be CUDA and dense" (torch 1.x: "Only CUDA dense tensor is supported
        # for NCCL collective operations"); torch 2.x on an nccl-only group: "No backend type associated with
        # device type cpu".
        (
            r"Tensors must be CUDA and dense",
            r"Only CUDA dense tensor is supported for NCCL",
            r"No backend type associated with device type cpu",
        ),
        "A collective on the nccl backend got a CPU tensor: most often the model was wrapped in "
        "DistributedDataParallel before it was moved to the GPU (DDP broadcasts its parameters at construction), "
        "or a metric/loss tensor on the CPU was all-reduced.",
        "Move the model first, then wrap: model.to(device); model = DDP(model, device_ids=[local_rank]); keep "
        "tensors you all-reduce on torch.device('cuda', local_rank) (or use the gloo backend for CPU tensors).",
        f"{DOCS}/generated/torch.nn.parallel.DistributedDataParallel.html",
    ),
    Rule(
        "find-unused-warning",
        "find_unused_parameters=True, but no parameter was unused (warning)",
        # torch/csrc/distributed/c10d/reducer.cpp
        (
            r"find_unused_parameters=True was specified in DDP constructor, but did not find any unused "
            r"parameters",
        ),
        "Not an error: DDP was built with find_unused_parameters=True but every parameter got a gradient, so the "
        "extra traversal of the autograd graph each iteration only costs time.",
        "Drop find_unused_parameters=True (the default is False) unless some iterations really leave parameters "
        "unused; with static_graph=True DDP learns the used set once.",
        f"{DOCS}/generated/torch.nn.parallel.DistributedDataParallel.html",
        warning=True,
    ),
    Rule(
        "shm-too-small",
        "shared memory (/dev/shm) is too small",
        # NCCL src/misc/shmutils.cc ("Call to posix_fallocate failed", "Error while creating shared memory
        # segment"); torch/utils/data/_utils/signal_handling.py and torch/csrc/DataLoader.cpp (bus error text).
        (
            r"Error while creating shared memory segment",
            r"posix_fallocate failed",
            r"failed to extend /dev/shm/",
            r"insufficient shared memory \(shm\)",
            r"out of shared memory",
            r"killed by signal: Bus error",
            r"unable to write to file </torch_",
        ),
        "/dev/shm filled up: NCCL's shared-memory transport between ranks on one machine, or DataLoader workers "
        "passing batches to the main process, need more than it holds. Docker gives a container 64 MB by default.",
        "Run the container with --shm-size=8g (or --ipc=host; in Kubernetes mount an emptyDir with medium: "
        "Memory at /dev/shm); check `df -h /dev/shm`; as a stopgap lower num_workers or set NCCL_SHM_DISABLE=1 "
        "(slower).",
        f"{DOCS}/data.html#multi-process-data-loading",
        mechanism="resource",
    ),
    Rule(
        "nccl-shm-attach",
        "NCCL could not open a peer's shared-memory segment",
        # NCCL src/misc/shmutils.cc ncclShmOpen: the creating rank makes /dev/shm/nccl-<6 random characters>
        # ("Error while creating ..."), its peers on the same machine open it ("Error while attaching to shared
        # memory segment %s (size %zu), error: %s (%d)"; older releases print the errno on the line before: "Call to
        # open failed : ...").
        (r"Error while attaching to shared memory segment",),
        "A rank could not open the shared-memory segment that a peer NCCL believes is on the same machine created: "
        "attaching allocates nothing, so /dev/shm being full is not the cause. The segment is not where this process "
        "looks: the ranks do not share one /dev/shm (separate containers or pods without --ipc=host, or systemd-logind "
        "RemoveIPC removed it), or NCCL itself passed a wrong name - a garbled name with size 0 is NCCL reading its "
        "cuMem descriptor as a file path, an NCCL bug on machines with memoryless NUMA nodes (NCCL pull request 2059).",
        "Check the NCCL version first (another release, e.g. the one a different torch wheel ships, is the quickest "
        "test; a garbled name with size 0 is that bug); make the ranks of one machine share /dev/shm (--ipc=host, "
        "one pod); NCCL_SHM_DISABLE=1 bypasses the shared-memory transport meanwhile (slower).",
        NCCL_TROUBLESHOOTING,
        # the ranks see different /dev/shm (or run an NCCL that names the segment wrongly): it explains the
        # shared-memory family's "Call to open failed" printed with it, so it leads
        mechanism="difference",
    ),
    Rule(
        "collective-mismatch",
        "ranks called different collectives",
        # torch ProcessGroupWrapper (TORCH_DISTRIBUTED_DEBUG=DETAIL); NCCL enqueue checks and net_ib.cc.
        (
            r"Detected mismatch between collectives on ranks",
            r"Mismatched collective detected",
            r"collective mismatch error",
        ),
        "The ranks reached a collective with different operations, shapes or dtypes, or in a different order: "
        "rank-dependent code (a branch, a different model graph, per-rank metric keys) or tensors sized by the "
        "rank's own data.",
        "Read the two fingerprints the message prints (op, shape, sequence number) and make every rank issue the "
        "same collectives in the same order with the same shapes; pad tensors to a common size before "
        "all_gather.",
        f"{DOCS}/distributed.html#debugging-torch-distributed-applications",
    ),
    Rule(
        "gloo-size-mismatch",
        "gloo received a different size than it expected",
        # gloo/transport/tcp/pair.cc: "Received data size doesn't match expected size. Is there a distributed
        # collective mismatch in your code?"; before 2025 the bare enforce "op.preamble.length <= op.nbytes".
        (r"Received data size doesn't match expected size", r"op\.preamble\.length <= op\.nbytes"),
        "Two ranks ran a collective (or send/recv) with tensors of different sizes, or different collectives at "
        "the same point: the rank that received more bytes than it expected aborted. The other ranks then report "
        "a closed connection: a consequence.",
        "Make every rank pass the same shape to each collective (pad per-rank tensors to a common size before "
        "all_reduce/all_gather); TORCH_DISTRIBUTED_DEBUG=DETAIL names the two shapes.",
        f"{DOCS}/distributed.html#debugging-torch-distributed-applications",
    ),
    Rule(
        "no-kernel-image",
        "torch has no kernels for this GPU",
        # torch/cuda/__init__.py (incompatible_device_warn, old_gpu_warn); CUDA's cudaErrorNoKernelImageForDevice.
        # cudaGetErrorString(cudaErrorNoKernelImageForDevice), also cut short after "available" (titles, pastes)
        (
            _cut("no kernel image is available for execution on the device", 5),
            r"is not compatible with the current PyTorch installation",
            r"PyTorch no longer supports this GPU because it is too old",
            # ROCm: the HIP runtime's hipErrorNoBinaryForGpu (hip_code_object.cpp), "Unable to find code object for
            # all current devices!" (ROCm >= 4.1) and its older "Coudn't find binary for current devices!" (sic)
            r"hipErrorNoBinaryForGpu",
            r"Unable to find code object for all current devices",
            r"Cou(?:l)?dn't find binary for current devices",
        ),
        "The installed torch build has no compiled kernels for this GPU's architecture (sm_XX on CUDA, gfxNNNN on "
        "ROCm): a new GPU with an old build (RTX 50xx / sm_120 needs cu128 or later), an old GPU the build dropped, "
        "or a ROCm wheel whose target list lacks this gfx architecture.",
        "Install a torch wheel built for this GPU's compute capability (pytorch.org/get-started/locally: pick the "
        "CUDA version that lists sm_XX; `python -c 'import torch; print(torch.cuda.get_arch_list())'`); on ROCm "
        "compare `rocminfo | grep gfx` with that list and use a ROCm release that builds for it.",
        "https://pytorch.org/get-started/locally/",
        mechanism="difference",
    ),
    Rule(
        "syncbn-single-process",
        "SyncBatchNorm outside a process group",
        # torch 1.x batchnorm.py; in torch 1.8-1.12 SyncBatchNorm.forward called get_world_size() first
        (
            r"SyncBatchNorm is only supported within torch\.nn\.parallel\.DistributedDataParallel",
            r"(?:SyncBatchNorm|sync_batch_norm|batchnorm\.py)[^\n]*\n(?:[^\n]*\n){0,20}?[^\n]*"
            r"Default process group has not been initialized",
        ),
        "SyncBatchNorm ran in a process that is not in a process group (a single-GPU or plain `python` run): "
        "it synchronises statistics across ranks, so it needs init_process_group.",
        "For one process use plain BatchNorm (set norm 'BN' instead of 'SyncBN' in the config), or convert with "
        "nn.SyncBatchNorm.convert_sync_batchnorm(model) only when dist.is_initialized() and world_size > 1.",
        f"{DOCS}/generated/torch.nn.SyncBatchNorm.html",
    ),
    Rule(
        "syncbn-double-backward",
        "SyncBatchNorm has no second derivative",
        # torch/nn/modules/_functions.py: SyncBatchNorm's forward and backward are the batch_norm_stats /
        # _gather_stats_with_counts / _elemt / _backward_reduce / _backward_elemt kernels, whose own derivatives
        # derivatives.yaml leaves not implemented ("the derivative for 'X' is not implemented."; torch < 1.10:
        # "derivative for X is not implemented")
        (
            r"derivative for '?(?:aten::)?batch_norm_(?:backward_elemt|backward_reduce|elemt|"
            r"gather_stats_with_counts|stats)'? is not implemented",
        ),
        "A second derivative was taken through SyncBatchNorm: the loss contains a gradient (torch.autograd.grad "
        "with create_graph=True - a gradient penalty, forces as the gradient of an energy, a Jacobian term), and "
        "SyncBatchNorm's backward kernels have no derivative of their own.",
        "Keep SyncBatchNorm out of the part whose gradient enters the loss (plain BatchNorm, GroupNorm or LayerNorm "
        "there), or compute that term with the module in eval mode; with DDP, plain BatchNorm keeps per-rank "
        "statistics.",
        f"{DOCS}/generated/torch.nn.SyncBatchNorm.html",
    ),
    Rule(
        "nccl-remote-error",
        "NCCL: a remote rank exited or the network failed",
        # NCCL ncclRemoteError (2.13+), torch NCCLUtils getNcclErrorDetailStr
        # NCCL misc/socket.cc reports a peer's closed socket as "Connection closed by remote peer" (ncclRemoteError)
        _nccl_result(6, "remote process exited|network error")
        + (
            r"remote process exited or there was a network error",
            r"ncclRemoteError",
            r"Connection closed by remote peer",
        ),
        "NCCL lost a peer in the middle of communication: another rank crashed or was killed first (look for its "
        "error), or the network between nodes failed (InfiniBand/RoCE port errors, a flapping link).",
        "Find the rank that failed first (torchrun's Root Cause, the earliest traceback); if none failed, check "
        "the fabric (ibstat, NCCL_DEBUG=INFO's NET lines) and retry with NCCL_IB_DISABLE=1 to isolate IB.",
        NCCL_TROUBLESHOOTING,
        generic=True,
    ),
    Rule(
        "nccl-invalid-usage",
        "NCCL: invalid usage",
        (r"invalid usage \(run with NCCL_DEBUG=WARN", r"ncclInvalidUsage", r", invalid usage, NCCL version")
        + _nccl_result(5, "invalid usage"),
        "NCCL rejected how it was called: most often two ranks on one GPU, ranks that disagree on the world size, "
        "or a collective issued on a communicator that was already aborted. NCCL's 'Last error' line says which.",
        "Read the 'Last error' line (rerun with NCCL_DEBUG=WARN if it is missing); one process per GPU with "
        "torch.cuda.set_device(local_rank) before init_process_group.",
        NCCL_TROUBLESHOOTING,
        generic=True,
    ),
    Rule(
        "nccl-internal-error",
        "NCCL: internal error",
        (
            r"ncclInternalError",
            r", internal error(?: - please report this issue to the NCCL developers)?, "
            r"NCCL version",
        )
        + _nccl_result(3, "internal error"),
        "NCCL failed inside (often during bootstrap: no usable network interface, mismatched NCCL versions "
        "between nodes, or a peer that vanished). NCCL's 'Last error' line names the failing step.",
        "Rerun with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET; check NCCL_SOCKET_IFNAME and that every node runs "
        "the same torch/NCCL version.",
        NCCL_TROUBLESHOOTING,
        generic=True,
    ),
    Rule(
        "nccl-socket-ifname",
        "NCCL found no usable network interface (NCCL_SOCKET_IFNAME)",
        # NCCL src/misc/socket.cc / bootstrap.cc
        (
            r"Bootstrap : no socket interface found",
            r"no NCCL_SOCKET_IFNAME interface found",
            r"is neither AF_INET\(2\) nor AF_INET6\(10\)",
            # NCCL < 2.12 include/socket.h: WARN("Socket creation failed : %s", strerror(errno)) from socket(family, ..)
            # with the family of the address NCCL chose; EAFNOSUPPORT: that address has none - no interface was found
            # (newer NCCL says so with the "neither AF_INET nor AF_INET6" text above)
            r"Socket creation failed\s*:\s*Address family not supported",
        ),
        "NCCL's bootstrap needs an IP interface: NCCL_SOCKET_IFNAME names one that does not exist on this "
        "machine (interface names differ between machines and containers), or the container has none but lo. "
        "'connecting to address ... is neither AF_INET nor AF_INET6' means the address a peer sent could not be "
        "read: that peer found no interface, or the nodes run different NCCL versions (pip's nvidia-nccl-cu12 "
        "against a system libnccl).",
        "Check `ip -br addr` on every node; set NCCL_SOCKET_IFNAME to the interface the nodes reach each other on "
        "(a list such as eth0,eno1 or a prefix works), or unset it to let NCCL choose (it skips lo and docker*); "
        "check that `python -c 'import torch; print(torch.cuda.nccl.version())'` agrees on every node.",
        NCCL_ENV,
        mechanism="difference",
    ),
    Rule(
        "no-route-to-host",
        "no route to the other node",
        # strerror(EHOSTUNREACH) = "No route to host"; logs cut at the line's end keep at least "No route to"
        (r"No route to(?: host)?\b", r"EHOSTUNREACH"),
        "A socket connect to another node failed with EHOSTUNREACH (errno 113): the address is not reachable from "
        "this machine: a firewall rejects the port range, the nodes are on different subnets, or NCCL/gloo picked "
        "an interface (docker0, a VPN) the other node cannot reach.",
        "Open the ports between nodes (NCCL and gloo use random high ports, not just MASTER_PORT), check `ping` "
        "and `nc -zv` between nodes, set NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME to the shared interface.",
        NCCL_TROUBLESHOOTING,
    ),
    Rule(
        "worker-bus-error",
        "a worker died of SIGBUS (bus error)",
        # torch/distributed/elastic/multiprocessing/api.py: "Signal 7 (SIGBUS) received by PID"
        _signal_patterns(7, "SIGBUS", "Bus error"),
        "The process touched memory-mapped memory that could not be backed: almost always /dev/shm (shared "
        "memory) is full: NCCL's shared-memory transport or DataLoader workers in a container with Docker's "
        "64 MB default.",
        "Give the container more shared memory (--shm-size=8g or --ipc=host), check `df -h /dev/shm`; lower "
        "DataLoader num_workers; NCCL_SHM_DISABLE=1 as a stopgap.",
        f"{DOCS}/elastic/errors.html",
        generic=True,
        mechanism="resource",
    ),
    Rule(
        "worker-abort",
        "a worker aborted (SIGABRT)",
        _signal_patterns(6, "SIGABRT", "Aborted"),
        "The process called abort(): a C++ exception nobody caught (`terminate called after throwing ...`, e.g. "
        "the NCCL watchdog taking the process down after a failed or timed-out collective) or a failed assertion "
        "in native code. The real error is the `what():` or assertion text that rank printed just before.",
        "Read that rank's last lines before the abort (the `what():` line); rerun with "
        "TORCH_SHOW_CPP_STACKTRACES=1 and NCCL_DEBUG=INFO if there is none.",
        f"{DOCS}/elastic/errors.html",
        generic=True,
    ),
    Rule(
        "worker-segfault",
        "a worker crashed (SIGSEGV)",
        _signal_patterns(11, "SIGSEGV", "Segmentation fault", anywhere=True),
        "The process crashed in native code (a segmentation fault): a C/C++/CUDA extension built for another "
        "torch or CUDA version, a library bug on this GPU or driver, or a stack overflow.",
        "Rerun the failing rank with `python -X faulthandler` (or PYTHONFAULTHANDLER=1) to see the Python frame; "
        "rebuild compiled extensions against the installed torch; try another torch/driver version.",
        f"{DOCS}/elastic/errors.html",
        generic=True,
    ),
    Rule(
        "worker-exception",
        "a worker raised a Python exception (exit code 1)",
        (
            r"^\s*(?:\[[\w]+\]:)?\s*exitcode\s*:\s*1\b",
            # the agent's own line before its summary (elastic/multiprocessing/api.py: "failed (exitcode: {exitcode})
            # local_rank: {local_rank} (pid: {pid}) of binary: {entrypoint}"), all that is left when a paste is cut
            r"\bfailed \(exitcode: 1\) local_rank: \d+",
            r"exits with return code = 1\b",
        ),  # DeepSpeed's launcher (launch.py sigkill_handler)
        "A worker exited with code 1: it raised a Python exception; torchrun's summary only points at it. The "
        "exception is the traceback that rank printed above the summary.",
        "Read that rank's traceback (its lines start with [rankN]: or [defaultN]:); decorate main with "
        "torch.distributed.elastic.multiprocessing.errors.record to get it into the summary.",
        f"{DOCS}/elastic/errors.html",
        generic=True,
    ),
    # ------------------------------------------------------------------ issue 27: read from the catalogue
    Rule(
        "ddp-ready-twice",
        "a parameter's DDP hook fired twice in one backward",
        # reducer.cpp mark_variable_ready
        (r"Expected to mark a variable ready only once", r"has been marked as ready twice"),
        "DDP's reducer saw the gradient of one parameter arrive twice in one backward pass: reentrant activation "
        "checkpointing (torch.utils.checkpoint with use_reentrant=True, or a trainer's gradient_checkpointing) "
        "re-runs the wrapped layers in a second backward, or one parameter is used by several concurrent forward "
        "passes (a module called twice, weights shared outside forward).",
        "Use non-reentrant checkpointing (checkpoint(..., use_reentrant=False); in transformers "
        "gradient_checkpointing_kwargs={'use_reentrant': False}), or DDP(static_graph=True) if the graph is the same "
        "every step; TORCH_DISTRIBUTED_DEBUG=DETAIL names the parameter.",
        f"{DOCS}/generated/torch.nn.parallel.DistributedDataParallel.html",
    ),
    Rule(
        "ddp-no-trainable-params",
        "DDP wrapped a module with no trainable parameter",
        # torch/nn/parallel/distributed.py, DistributedDataParallel.__init__
        (r"DistributedDataParallel is not needed when a module doesn't have any parameter that requires a gradient",),
        "Every parameter of the module given to DistributedDataParallel has requires_grad=False: a frozen model "
        "(an EMA or teacher copy, a feature extractor, a model only evaluated) or the parameters frozen before the "
        "wrapper was built. DDP only averages gradients, so it refuses a module that makes none.",
        "Wrap only the module that trains (the student, the head over a frozen backbone); leave a frozen or "
        "evaluation-only model unwrapped on each rank; unfreeze before wrapping if it is meant to train.",
        f"{DOCS}/generated/torch.nn.parallel.DistributedDataParallel.html",
    ),
    Rule(
        "input-weight-mismatch",
        "a layer's input and its weights are on different devices or of different types",
        # aten's convolution checks: "Input type (torch.FloatTensor) and weight type (torch.cuda.FloatTensor) should
        # be the same", and on a CPU "Input type (float) and bias type (double) should be the same"
        (r"Input type \(.+?\) and (?:weight|bias) type \(.+?\) should be the same",),
        "A layer got its input and its weights on different devices or in different dtypes (`torch.FloatTensor` "
        "lives on the CPU, `torch.cuda.FloatTensor` on a GPU; Half, BFloat16 and Float are dtypes). Input on the "
        "CPU: the batch was not moved to the rank's device (in the training loop, or only in the evaluation loop). "
        "Weights on the CPU: part of the model was not moved: layers kept in a plain Python list or dict are not "
        "registered, so model.to(device) leaves them behind, as it does a module created after the move or inside "
        "forward. A dtype: a half input without autocast, or a model converted to half with a float input.",
        "Move every batch to the rank's device (x = x.to(device), device = torch.device('cuda', local_rank)) and the "
        "model before wrapping it in DDP; hold sub-layers in nn.ModuleList / nn.ModuleDict; for a dtype, run the "
        "forward under torch.autocast or give the input the model's dtype.",
        f"{DOCS}/generated/torch.nn.ModuleList.html",
    ),
    Rule(
        "ddp-grad-strides",
        "gradient layout differs from DDP's bucket (warning)",
        (r"Grad strides do not match bucket view strides",),
        "Not an error: a parameter's gradient came with other strides than DDP's bucket view (typically "
        "channels_last convolutions, or parameters whose strides changed after DDP was built), so DDP copies it "
        "each step.",
        "Build DDP after converting the model's memory format (model.to(memory_format=torch.channels_last) before "
        "DistributedDataParallel(...)); or ignore it: the cost is one copy per gradient.",
        f"{DOCS}/generated/torch.nn.parallel.DistributedDataParallel.html",
        warning=True,
    ),
    Rule(
        "fsdp-flat-param",
        "FSDP cannot flatten parameters of different kinds into one unit",
        # fsdp/_flat_param.py _validate_tensors_to_flatten; fully_shard's _fsdp_param_group.py
        (
            r"Must flatten tensors with uniform",
            r"FlatParameter`? requires uniform",
            r"Cannot flatten integer dtype "
            r"tensors",
            r"FSDP expects uniform original parameter dtype",
        ),
        "FSDP (FullyShardedDataParallel) flattens all parameters of one wrapped module into one FlatParameter, so "
        "they must share dtype, device and (with use_orig_params=False) requires_grad. The model mixes them: fp32 "
        "adapters (LoRA) on a bf16/fp16 base, quantized integer weights, or frozen and trainable parameters in one "
        "unit.",
        "Cast the model to one dtype before wrapping (model.to(torch.bfloat16)) and let MixedPrecision handle "
        "compute dtypes; pass use_orig_params=True for frozen+trainable mixes; wrap adapter or quantized modules in "
        "their own units (auto_wrap_policy), or use FSDP2 fully_shard, which shards per parameter.",
        f"{DOCS}/fsdp.html",
    ),
    Rule(
        "checkpoint-world-size",
        "the checkpoint was saved with another number of data-parallel ranks",
        # DeepSpeed runtime/engine.py _load_zero_checkpoint (ZeRORuntimeException), every release since 0.3
        (
            r"The checkpoint being loaded used a DP world size of \d+ but the current world size is \d+",
            r"Automatic adjustment of ZeRO's optimizer state partitioning with a new world size is not",
        ),
        "A ZeRO checkpoint holds the optimizer state split into one partition per data-parallel rank of the run "
        "that saved it; DeepSpeed cannot load it into a run with another number of data-parallel ranks (more or "
        "fewer GPUs or nodes, or another tensor/pipeline-parallel size, which changes the DP size).",
        "Resume with the same number of GPUs and the same parallel sizes; otherwise keep only the weights: "
        "zero_to_fp32.py (in the checkpoint folder) writes the fp32 model to start a new run from (the optimizer "
        "state is lost), or convert with DeepSpeed's ds_to_universal.py and load it with 'load_universal': true.",
        "https://www.deepspeed.ai/tutorials/universal-checkpointing/",
        mechanism="difference",
    ),
    Rule(
        "deepspeed-batch-size",
        "DeepSpeed's batch sizes do not multiply out for this world size",
        # DeepSpeed runtime/config.py _batch_assertion: f"Check batch related parameters. train_batch_size is not
        # equal to micro_batch_per_gpu * gradient_acc_step * world_size {train} != {micro} * {acc} * {world}"
        # (a wrapped paste breaks it anywhere)
        (r"train_batch_size\s+is\s+not\s+equal\s+to\s+micro_batch_per_gpu\s+\*\s+gradient_acc_step\s+\*\s+world_size",),
        "DeepSpeed requires train_batch_size == train_micro_batch_size_per_gpu * gradient_accumulation_steps * "
        "world size; the config's numbers were worked out for another number of processes than the run has (the "
        "last factor of the message is the world size DeepSpeed saw: fewer GPUs than planned, a launcher that "
        "started one process, or a hard-coded train_batch_size).",
        "Give two of the three and let DeepSpeed derive the third (or 'auto' under HF Trainer / accelerate), or "
        "set them so the product holds for this world size; check that the launcher started the number of "
        "processes you expect.",
        "https://www.deepspeed.ai/docs/config-json/#batch-size-related-parameters",
    ),
    Rule(
        "store-hostname",
        "the rendezvous host name does not resolve",
        # c10d socket.cpp: "The {}network addresses of ({}, {}) cannot be retrieved (gai error: ...)"; older torch:
        # "host not found: Name or service not known"; getaddrinfo's texts (gai_strerror)
        (
            r"network addresses of \(.*?\) cannot be retrieved \(gai error",
            r"host not found: ",
            r"Name or service not known",
            r"Temporary failure in name resolution",
            r"nodename nor servname provided",
        ),
        "A host name the store or torchrun must connect to (MASTER_ADDR, --rdzv-endpoint, or the node's own "
        "hostname that torchrun passes on) does not resolve on this machine: DNS not ready yet (Kubernetes pods), a "
        "name only another machine knows, a typo, or a stray space in the variable.",
        "Use an IP address for MASTER_ADDR / --rdzv-endpoint, or check `getent hosts NAME` on every node and fix "
        "/etc/hosts or DNS; in Kubernetes wait for the headless service's DNS before starting.",
        f"{DOCS}/elastic/run.html",
        mechanism="difference",
    ),
    Rule(
        "gloo-address",
        "gloo could not pick a usable network address",
        # gloo/transport/tcp/device.cc: "Unable to find address for: X" (GLOO_SOCKET_IFNAME or the hostname)
        (
            r"Unable to find address for:? ",
            r"Gloo connectFullMesh failed(?![\s\S]{0,300}?" + _PAIR_READ_FAILED + r")[\s\S]{0,300}?\b127\.0\.0\.1\b",
            # connectFullMesh runs after every rank has put its address in the store (so the store and the peers were
            # reachable); a failure in a TCP pair's connect then means the address a peer advertised cannot be
            # reached from here (gloo/rendezvous/context.cc, gloo/transport/tcp/pair.cc)
            # (the catalogue's template is "Gloo connectFullMesh failed with" and the pair's error; a paste may cut
            # the bracketed source path: "Gloo connectFullMesh failed ... timed out connecting: SO_ERROR: ...")
            # ... but not a read on a connected pair that failed (_PAIR_READ_FAILED): that peer was reached
            r"Gloo connectFullMesh failed with \[[^\]\n]*gloo/transport/tcp/pair\.cc:\d+\](?!\s*"
            + _PAIR_READ_FAILED
            + ")",
            r"Gloo connectFullMesh failed\b[^\n]*?(?:timed out connecting|SO_ERROR)",
            # gloo/transport/tcp/pair.cc's connect to the address a peer advertised, refused on a loopback address
            # (127.0.1.1 is the address Debian/Ubuntu's /etc/hosts gives the hostname): the peer's hostname resolved
            # to loopback, so the connect reached this machine, where nothing listens on that port
            r"pair\.cc:\d+\]\s*connect \[127\.\d+\.\d+\.\d+\]:\d+: Connection refused",
        ),
        "gloo binds to the interface GLOO_SOCKET_IFNAME names, or else to the address this machine's hostname "
        "resolves to. Here that name gave no usable address: GLOO_SOCKET_IFNAME is not an interface on this machine "
        "(it takes one interface name, not NCCL's '^lo,docker' syntax), or the hostname has no address or resolves "
        "to a loopback address (127.0.0.1, or Debian/Ubuntu's 127.0.1.1), which other machines cannot reach.",
        "Set GLOO_SOCKET_IFNAME to the interface the nodes reach each other on (`ip -br addr`; the one `ip route "
        "get PEER_IP` names), on every node; or fix /etc/hosts so the hostname maps to that interface's address.",
        f"{DOCS}/distributed.html#common-environment-variables",
        mechanism="difference",
    ),
    Rule(
        "network-unreachable",
        "no route to the peer's network",
        # strerror(ENETUNREACH)
        (r"Network is unreachable", r"ENETUNREACH"),
        "A connect to another rank failed with ENETUNREACH (errno 101): this machine has no route to that address's "
        "network. gloo/NCCL advertised an address on an interface the other machine is not connected to (docker0, "
        "a VPN, a storage network), or the routing table lacks the route.",
        "Set GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME to the interface the nodes share and check `ip route get "
        "PEER_IP` on each node.",
        NCCL_TROUBLESHOOTING,
        mechanism="difference",
    ),
    Rule(
        "port-privileged",
        "the port needs root (below 1024)",
        # c10d socket.cpp: "failed to bind to [::]:520 (errno: 13 - Permission denied)"; the libuv store (torch >= 2.4):
        # "The server socket has failed to bind. port: {}, useIpv6: {}, code: {}, name: EACCES, message: ..."
        # (a user's retelling puts the errno text first: "Permission denied: The server socket has failed to bind")
        (
            r"failed to bind\b[^\n]{0,120}?(?:errno: 13 - Permission denied|EACCES|permission denied)",
            r"Permission denied\W{0,4}[^\n]{0,40}?failed to bind\b",
            r"bind\S*: Permission denied",
        ),
        "Binding the rendezvous/store port failed with EACCES (errno 13): ports below 1024 are reserved for root "
        "(MASTER_PORT or --rdzv-endpoint chose one), or a security policy forbids this port.",
        "Use a port between 1024 and 65535 (torchrun's default is 29500), or `--standalone` / `ddplab launch`, "
        "which pick a free one.",
        f"{DOCS}/elastic/run.html",
    ),
    Rule(
        "nccl-message-truncated",
        "NCCL received more bytes than the collective expected",
        # net_socket.cc / net_ib.cc / bootstrap.cc: "message truncated : receiving %d bytes instead of %d"
        # \s+: a terminal or a paste wraps this long WARN line, often right after the colon
        (r"[Mm]essage truncated ?:\s+(?:receiving|received)\s+\d+\s+bytes\s+instead\s+of\s+\d+",),
        "A rank received a message larger than the one it posted: the ranks issued different collectives or sizes "
        "at the same point (rank-dependent shapes or order), or they run with different NCCL settings or versions "
        "(NCCL_PROTO, NCCL_ALGO, another NCCL build on one node), so the two sides cut the data differently.",
        "Compare the environment and `torch.cuda.nccl.version()` on every node (NCCL_DEBUG=INFO "
        "NCCL_DEBUG_SUBSYS=ENV prints both); if they agree, rerun with TORCH_DISTRIBUTED_DEBUG=DETAIL to find the "
        "collective whose shape differs; try NCCL_PROTO=Simple to tell the two apart.",
        NCCL_TROUBLESHOOTING,
    ),
    Rule(
        "nccl-version-mismatch",
        "NCCL versions differ (library vs build, or between nodes)",
        # NCCL allocator.cc / devcomm / ras.cc / plugin/net.cc texts (the catalogue's nccl source)
        (
            r"NCCL library is (?:too old|not backwards compatible)",
            r"compiled with too old version of NCCL",
            r"NCCL version mismatch with remote peer",
            r"plugin has incompatible version",
            # include/coll_net.h: "Mismatched NCCL version detected : rank %d version %d rank %d version %d"
            r"Mismatched NCCL version detected",
            # the dynamic loader (glibc dl-lookup.c "undefined symbol: %s"): torch (or a plugin) calls an NCCL API
            # function the libnccl that was loaded does not have - an older NCCL found first (a second
            # nvidia-nccl-cu* wheel, a system libnccl on LD_LIBRARY_PATH); retold in titles without the colon
            r"undefined symbol:? nccl[A-Z]\w*",
            # two NCCL versions in one job's output: torch puts each rank's own in its error ("..., internal error,
            # NCCL version 2.20.5", NCCLUtils getNcclErrorDetailStr), NCCL's INFO line "NCCL version 2.19.3+cuda12.3"
            # and ProcessGroupNCCL's options line "NCCL version: 2.19.3"; compared on x.y.z, each with the next one
            # (when any two differ, two neighbours do; the search stays linear in the log), within 50 kB
            r"NCCL version:? v?(\d+\.\d+\.\d+)\b(?=(?:(?!NCCL version)[\s\S]){0,50000}?NCCL version:? v?"
            r"(?!\1\b)\d+\.\d+\.\d+)",
        ),
        "The NCCL library loaded at run time is not the one torch (or a plugin) was built for, or another node runs "
        "another NCCL: a system libnccl found first on LD_LIBRARY_PATH (or LD_PRELOAD) shadowing the "
        "nvidia-nccl-cu12 wheel, or different images/environments on different nodes.",
        "Print `python -c 'import torch; print(torch.cuda.nccl.version())'` on every node and make them agree: one "
        "image everywhere, no other libnccl on LD_LIBRARY_PATH/LD_PRELOAD; rebuild plugins for this NCCL.",
        NCCL_TROUBLESHOOTING,
        mechanism="difference",
    ),
    Rule(
        "nccl-p2p",
        "GPUs cannot access each other (P2P)",
        # NCCL transport/p2p.cc and transport/shm.cc (cuMem host sharing); CUDA's cudaErrorPeerAccessUnsupported
        (
            _cut("peer access is not supported between these two devices", 5),
            r"failed to open CUDA IPC handle",
            r"cudaErrorPeerAccessUnsupported",
        ),
        "NCCL tried direct GPU-to-GPU (P2P/IPC) access that this machine does not support: consumer or cloud GPUs "
        "without P2P (RTX 40xx/50xx, L4), an IOMMU/ACS setting that blocks it, a VM; NCCL's cuMem shared host "
        "memory also needs it.",
        "Set NCCL_P2P_DISABLE=1 (and NCCL_CUMEM_HOST_ENABLE=0 when the failure is in shm.cc); check `nvidia-smi "
        "topo -p2p r`; on bare metal disable the IOMMU (iommu=pt) or PCIe ACS.",
        NCCL_ENV,
        mechanism="difference",
    ),
    Rule(
        "cuda-too-many-peers",
        "a GPU ran out of peer (P2P) mappings",
        # CUDA's cudaErrorTooManyPeers (711, 60 before CUDA 10.1) text, as torch's "CUDA error: ..." / THC's "cuda
        # runtime error (60) : ...", NCCL's "Cuda failure 711 '...'" or the driver API's CUDA_ERROR_TOO_MANY_PEERS
        (r"peer mapping resources exhausted", r"cudaErrorTooManyPeers", r"CUDA_ERROR_TOO_MANY_PEERS"),
        "cudaDeviceEnablePeerAccess failed: each GPU can hold peer mappings to at most 8 other GPUs, system-wide. "
        "One process enabled peer access among more than 8 GPUs (DataParallel, a model split over devices, or old "
        "torch enabling P2P between every pair of visible GPUs; a K80 board counts as 2), or several libraries in "
        "the process each mapped their own peers.",
        "Give each process at most 8 GPUs that need peer access: one process per GPU (DistributedDataParallel) needs "
        "none; restrict CUDA_VISIBLE_DEVICES to groups of <= 8; NCCL_P2P_DISABLE=1 when NCCL's P2P transport hits "
        "it.",
        "https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__PEER.html",
        mechanism="resource",
    ),
    Rule(
        "memlock-limit",
        "locked-memory limit too low for InfiniBand",
        # NCCL misc/ibvwrap.cc: "Call to ibv_%s failed with error %s" with strerror(ENOMEM)
        (
            r"ibv_(?:create_cq|reg_mr|reg_dmabuf_mr|create_qp|alloc_pd)\w* failed with (?:error )?Cannot allocate "
            r"memory",
        ),
        "An InfiniBand verbs call could not pin memory (ENOMEM): the locked-memory limit (ulimit -l) of the "
        "process or container is too low for NCCL's IB buffers.",
        "Raise the memlock limit: `ulimit -l unlimited` (docker run --ulimit memlock=-1, Slurm "
        "PropagateResourceLimits, /etc/security/limits.conf) on every node.",
        NCCL_TROUBLESHOOTING,
        mechanism="resource",
    ),
    Rule(
        "too-many-open-files",
        "too many open files",
        (
            r"Too many open files",
            r"EMFILE",
            # CPython multiprocessing/reduction.py recvfds(): a tensor (DataLoader worker, torch.multiprocessing queue)
            # arrives as a file descriptor over a Unix socket (SCM_RIGHTS); at the limit the kernel drops it and no
            # ancillary data arrives
            r"received 0 items of ancdata",
            # ATen MapAllocator.cpp: "unable to open shared memory object <NAME> in read-write mode: STRERROR (ERRNO)":
            # shm_open needs a descriptor; a paste cut before the errno text is read as the usual EMFILE, any other
            # errno text that follows is that errno's
            r"unable to open shared memory object\b[^\n]*? in read-write mode(?!\s*:\s*(?!Too many open files))",
        ),
        "The process reached its open-file limit (ulimit -n): every rank's sockets, DataLoader workers passing "
        "tensors through file descriptors, and NCCL/gloo connections each hold descriptors.",
        "Raise the limit (`ulimit -n 65536`, docker --ulimit nofile=65536); for DataLoader workers also "
        "torch.multiprocessing.set_sharing_strategy('file_system').",
        f"{DOCS}/multiprocessing.html#sharing-strategies",
        mechanism="resource",
    ),
    Rule(
        "cuda-driver-too-old",
        "the NVIDIA driver is older than torch's CUDA",
        # CUDA's cudaErrorInsufficientDriver (35); torch/cuda/__init__.py's driver check
        (
            r"CUDA driver version is insufficient for CUDA runtime version",
            r"cudaErrorInsufficientDriver",
            r"The NVIDIA driver on your system is too old",
            r"driver (?:version )?is too old",
        ),
        "The installed NVIDIA driver supports an older CUDA than the one torch (or NCCL) was built with, so CUDA "
        "cannot start: often one node's driver differs from the others.",
        "Update the driver on that machine (nvidia-smi shows the CUDA version it supports), or install a torch "
        "built for that CUDA (pytorch.org/get-started: cu118/cu121/...); keep drivers equal across nodes.",
        "https://pytorch.org/get-started/locally/",
        mechanism="difference",
    ),
    Rule(
        "cuda-illegal-address",
        "CUDA: illegal memory access",
        (_cut("an illegal memory access was encountered", 4), r"cudaErrorIllegalAddress"),
        "A GPU kernel read or wrote outside its memory: an index out of range in a custom or fused kernel, a "
        "buffer freed while a collective still used it, or a bug in an extension. The NCCL watchdog often reports "
        "it later, from another call (CUDA errors are asynchronous).",
        "Rerun with CUDA_LAUNCH_BLOCKING=1 to see the failing kernel, or under compute-sanitizer; check custom "
        "kernels and that tensors passed to async collectives stay alive until wait().",
        f"{DOCS}/notes/cuda.html#asynchronous-execution",
    ),
    Rule(
        "device-mesh-size",
        "the DeviceMesh does not match the world size",
        # torch/distributed/device_mesh.py
        (
            r"Mesh should not be bigger than default world size",
            r"mesh_shape .{0,80}world size",
            r"must be divisible by the number of .{0,40}world",
        ),
        "init_device_mesh / DeviceMesh was given a shape whose ranks do not fit the job: the product of mesh_shape "
        "must equal the number of processes (nnodes x nproc-per-node), and a mesh may not name more ranks than "
        "the world has.",
        "Make mesh_shape multiply to WORLD_SIZE (e.g. (nnodes, nproc_per_node) for DP x TP) and start that many "
        "processes; every rank must call init_device_mesh with the same shape.",
        f"{DOCS}/distributed.html#torch.distributed.device_mesh.init_device_mesh",
    ),
    Rule(
        "address-not-available",
        "MASTER_ADDR is not an address of this machine",
        # strerror(EADDRNOTAVAIL)
        (r"Cannot assign requested address", r"EADDRNOTAVAIL"),
        "Binding a socket failed with EADDRNOTAVAIL (errno 99): the address is not one of this machine's - the "
        "node that hosts the store (rank 0 / the rdzv endpoint) was given another machine's address or a stale "
        "one, or an interface that is down.",
        "Give MASTER_ADDR / --rdzv-endpoint the address of the node that runs rank 0 (`hostname -I` there); on "
        "the other nodes it is the address they connect to.",
        f"{DOCS}/elastic/run.html",
        mechanism="difference",
    ),
    Rule(
        "address-family",
        "IPv6 not available (address family not supported)",
        # c10d socket.cpp tries IPv6 first: "(errno: 97 - Address family not supported by protocol)"
        (r"Address family not supported by protocol", r"EAFNOSUPPORT"),
        "The machine (or container) has IPv6 disabled; c10d tries IPv6 first and falls back to IPv4, so on its "
        "own this is a harmless warning. If the run failed, the error after it is the real one.",
        "Nothing to fix for the warning; read the error that follows. To silence it, use an IPv4 MASTER_ADDR "
        "(not a host name that also resolves to IPv6).",
        f"{DOCS}/elastic/run.html",
        warning=True,
    ),
    Rule(
        "connect-timed-out",
        "a connection attempt timed out",
        # strerror(ETIMEDOUT); NCCL's "Call to ibv_modify_qp failed with error Connection timed out" is nccl-ib's
        (r"(?<!failed with error )Connection timed out",),
        "A TCP connect to another machine got no answer (ETIMEDOUT, errno 110): a firewall silently drops the port, "
        "the address is wrong or belongs to an interface the peer cannot reach, or the peer machine is down.",
        "Check `nc -zv HOST PORT` from this node; open the ports between nodes (NCCL and gloo use random high "
        "ports besides MASTER_PORT); set NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME to the shared interface.",
        NCCL_TROUBLESHOOTING,
    ),
    Rule(
        "host-out-of-memory",
        "out of host memory (ENOMEM / No space left on device)",
        (r"Cannot allocate memory", r"No space left on device", r"ENOMEM", r"ENOSPC", r"Disk quota exceeded"),
        "A memory or file allocation failed: host RAM (or the container's memory limit) is exhausted, or the "
        "filesystem being written (/dev/shm, /tmp, the checkpoint folder) is full.",
        "Check `free -g`, `df -h /dev/shm /tmp` and the checkpoint folder; lower host memory per rank (DataLoader "
        "workers, datasets held once per rank) or free space; in containers raise --memory / --shm-size.",
        f"{DOCS}/notes/faq.html",
        mechanism="resource",
    ),
    Rule(
        "worker-terminated",
        "a worker was stopped (SIGTERM)",
        _signal_patterns(15, "SIGTERM", "Terminated"),
        "The process was asked to stop from outside: torchrun stops the other ranks after one fails (then this is a "
        "consequence), or the scheduler ended the job (Slurm time limit, preemption, a spot instance reclaimed).",
        "If another rank failed, read its error first; otherwise check the scheduler's record (sacct -j JOB, the "
        "job's time limit) and save checkpoints often enough to resume.",
        f"{DOCS}/elastic/errors.html",
        consequence=True,
    ),
    Rule(
        "worker-illegal-instruction",
        "a worker died of SIGILL (illegal instruction)",
        _signal_patterns(4, "SIGILL", "Illegal instruction", anywhere=True),
        "The CPU met an instruction it does not have: a binary (torch, numpy, an extension, a container image) "
        "built for a newer CPU (AVX-512, AVX2) than this machine's - often one node of a mixed cluster.",
        "Run the same image on a machine with the CPU it was built for, or install builds for this CPU; compare "
        "`lscpu | grep -o avx[^ ]*` between nodes.",
        f"{DOCS}/elastic/errors.html",
        mechanism="difference",
    ),
    Rule(
        "worker-signal",
        "a worker died of a signal",
        (
            r"Signals\.SIG(?:FPE|HUP|QUIT|INT|XCPU|XFSZ|SYS|TRAP|USR1|USR2|ALRM|VTALRM|PROF|STKFLT|PWR)",
            r"Signal (?:8|1|3|2|24|25|31|5|14) \(SIG\w+\)",
            r"Floating point exception",
            r"^\s*Hangup\s*$",
            r"Received (?:8|1|3|2|24|25|31|5|14) death signal",
            # torchrun's agent handles only SIGTERM, SIGINT, SIGHUP and SIGQUIT (elastic/multiprocessing/api.py) and
            # raises SignalException("Process {} got signal: {}") on them: any but SIGTERM (worker-terminated's) is
            # this rule's, also where a paste garbles the number
            r"SignalException: Process \d+ got (?!signal: (?:15|Signals\.SIGTERM)\b)",
            # the class name without its message (a title, the last line cut at its colon), not the `raise
            # SignalException(...)` source line a traceback shows for every signal, SIGTERM too
            r"\bSignalException\b(?!\(|:\s*\S)",
            r"CPU time limit exceeded",
            r"File size limit exceeded",
            r"Bad system call",
            r"Trace/breakpoint trap",
            r"\d Hangup\b",
            r"^\s*Quit\s*$",
            r"^\s*Interrupt\s*$",
            r"Alarm clock",
            r"Virtual timer expired",
            r"Profiling timer expired",
            r"Stack fault",
            r"Power failure",
            r"User defined signal [12]",
        ),
        "The process was ended by a signal other than KILL/TERM/ABRT/SEGV/BUS/ILL: SIGFPE (an integer division by "
        "zero in native code), SIGHUP (its terminal or ssh session closed), SIGINT/SIGQUIT (Ctrl-C, Ctrl-\\), "
        "SIGXCPU/SIGXFSZ (a CPU-time or file-size limit), SIGSYS (a system call a container's seccomp forbids), "
        "SIGTRAP (a breakpoint or a native assertion), SIGALRM/SIGUSR1/2 (a signal nobody handled).",
        "Match the signal to its cause above: for SIGHUP run under nohup/tmux or the scheduler, for limits check "
        "`ulimit -a`, for SIGFPE/SIGTRAP rerun with PYTHONFAULTHANDLER=1 to see the frame.",
        f"{DOCS}/elastic/errors.html",
        generic=True,
    ),
    # ------------------------------------------------------------------ exit (tests/test_teardown.py)
    Rule(
        "teardown-abort",
        "aborted at exit, after the work was done",
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
        "https://github.com/pytorch/pytorch/issues/190489",
    ),
)

# ------------------------------------------------------------------ families (issue 27): the long tail, by layer
# Each covers whole source files of the catalogue; explain matches the literal parts of their templates as well as
# the patterns below (which also catch older wordings: NCCL prints its source file in every WARN line). They are
# generic: a specific rule on the same log explains it better.
NCCL_DEBUG_NET = "rerun with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET"


def _family(
    id: str,
    title: str,
    covers: tuple[str, ...],
    patterns: tuple[str, ...],
    cause: str,
    fix: str,
    reference: str,
    **flags,
) -> Rule:
    return Rule(id, title, patterns, cause, fix, reference, generic=True, covers=covers, **flags)


_FAMILIES: tuple[Rule, ...] = (
    # NCCL (format strings of libnccl.so; nccl-* sources)
    _family(
        "nccl-ib",
        "NCCL: InfiniBand/RoCE transport failed",
        (r"nccl:(transport/net_ib|net_ib|misc/ibvwrap|include/ibv|misc/ibvsymbols|misc/mlx5dv|include/mlx5)",),
        (
            r"\b(?:net_ib\w*|ibvwrap)(?:/\w+)?\.(?:cc|h):?\d* NCCL WARN",
            r"NET/IB\w*(?:/\w+)? ?: ",
            r"\bibv_\w+ failed",
            r"IBV_WC_\w+_ERR",
        ),
        "NCCL's InfiniBand/RoCE transport between nodes failed: a port down or flapping, RoCE using a GID "
        "that is not routed (a link-local address: wrong NCCL_IB_GID_INDEX), NICs that cannot reach each "
        "other (not cross-rail connected, a switch filtering), or a completion error (error 12 = retries "
        "exceeded: the peer did not answer).",
        "Check the ports (`ibstat`, `ibv_devinfo`) and, for RoCE, the GID table (`show_gids`: set "
        "NCCL_IB_GID_INDEX to the RoCE v2 entry of the IP you use); run NCCL_IB_DISABLE=1 once to confirm "
        f"IB is the problem (NCCL falls back to sockets); {NCCL_DEBUG_NET}.",
        NCCL_TROUBLESHOOTING,
        needs=("NCCL", "ibv_", "IBV_"),
    ),
    _family(
        "nccl-socket",
        "NCCL: socket (TCP) connection between ranks failed",
        (
            r"nccl:(misc/socket|transport/net_socket|bootstrap|transport/rma_socket|include/socket)",
            # NCCL 2.3x moved its socket calls into os/linux.cc, beside the shared-memory ones (nccl-shm's)
            r"nccl:os/linux\.cc@@[Cc]onnect to|ncclOsSocket|[Aa]ccept|sockopt|[Aa]ddress family|recv from",
        ),
        (
            r"\b(?:socket|net_socket\w*|bootstrap)(?:/\w+)?\.cc:\d+ NCCL WARN",
            r"NET/Socket ?: ",
            r"\b(?:ncclOs)?[Ss]ocket(?:Progress\w*|StartConnect|Connect|Accept|Finalize\w*|PollConnect|TryAccept)\b",
            # NCCL prints a socket address as ip<port> (ncclSocketToString), in every version's connect failure
            r"\b[Cc]onnect to \S+<\d+> (?:failed|returned)",
            # socket.cc's failed call on a connection, under "Last error:" without its WARN prefix (NOT_NCCL_LINE)
            r"\bCall to \w+ from \S+<\d+> failed :",
        ),
        "NCCL's TCP sockets (its bootstrap, or the socket transport when there is no InfiniBand) could not "
        "connect or lost a connection: a peer rank exited first, a firewall blocks NCCL's random ports, or "
        "NCCL chose an interface the other node cannot reach.",
        "If another rank failed, read its error first; otherwise set NCCL_SOCKET_IFNAME to the interface "
        f"the nodes share, open the ports between nodes, and {NCCL_DEBUG_NET}.",
        NCCL_TROUBLESHOOTING,
        needs=("NCCL",),
    ),
    _family(
        "nccl-shm",
        "NCCL: shared-memory transport or host OS call failed",
        (r"nccl:(transport/shm|misc/shmutils|os/|include/shm)",),
        (r"\b(?:shm|shmutils)\.cc:\d+ NCCL WARN",),
        "NCCL's shared-memory transport between ranks of one node (or an OS call it makes) failed: /dev/shm "
        "too small or not shared between the processes (containers), cuMem host memory not supported by the "
        "driver or VM, or a segment another rank removed.",
        "Give the container --ipc=host or --shm-size=8g and check `df -h /dev/shm`; NCCL_SHM_DISABLE=1 "
        "confirms it (slower); with cuMem errors try NCCL_CUMEM_HOST_ENABLE=0.",
        NCCL_TROUBLESHOOTING,
        mechanism="resource",
        needs=("NCCL",),
    ),
    _family(
        "nccl-proxy",
        "NCCL: the proxy thread lost a rank",
        (r"nccl:(proxy|include/proxy|transport\.cc)",),
        (r"\bproxy\.cc:\d+ NCCL WARN", r"\[Service thread\]", r"\[Proxy Service \d+\]", r"\[Proxy Progress\]"),
        "NCCL's proxy thread sets up and drives the network and shared-memory connections of the ranks on a "
        "node; it reports that a local rank stopped answering ('Could not receive type from localRank N', "
        "'Failed to execute operation'): usually that rank had already failed.",
        "Find the rank that failed first (torchrun's Root Cause, the earliest traceback) and fix that; if "
        f"none did, {NCCL_DEBUG_NET},PROXY.",
        NCCL_TROUBLESHOOTING,
        consequence=True,
        needs=("NCCL",),
    ),
    _family(
        "nccl-nvls",
        "NCCL: NVLink SHARP / multi-node NVLink setup failed",
        (
            r"nccl:(transport/nvls|transport/mc_arena|transport/multicast|nvls|mnnvl|cft|include/nvls|"
            r"include/mnnvl)",
        ),
        (r"\b(?:nvls|mnnvl)\.cc:\d+ NCCL WARN",),
        "NCCL's NVLink SHARP (NVLS) or multi-node NVLink (MNNVL) could not be set up: the fabric manager or "
        "IMEX service is not running, the driver or container lacks support, or multicast memory ran out.",
        "Check `nvidia-smi -q | grep -i fabric` and the nvidia-fabricmanager / IMEX services; NCCL_NVLS_ENABLE=0 "
        "or NCCL_MNNVL_ENABLE=0 confirms it.",
        NCCL_ENV,
        needs=("NCCL", "NVLS"),
    ),
    _family(
        "nccl-collnet",
        "NCCL: CollNet / SHARP plugin failed",
        (r"nccl:(include/coll_net|transport/coll_net|coll_net)",),
        (r"\bcoll_net\.cc:\d+ NCCL WARN", r"\bCollNet\b.{0,80}(?:fail|error)"),
        "NCCL's in-network reduction (CollNet, e.g. the SHARP plugin) failed to set up or run: the plugin or "
        "the switch's aggregation manager is unavailable or mismatched.",
        "NCCL_COLLNET_ENABLE=0 confirms it; check the SHARP plugin's version against NCCL's.",
        NCCL_ENV,
        needs=("NCCL", "CollNet"),
    ),
    _family(
        "nccl-plugin",
        "NCCL: a plugin failed to load or run",
        (r"nccl:(plugin/|include/plugin|include/nccl_net|include/nccl_tuner|include/nccl_profiler)",),
        (r"NET/Plugin ?: .{0,100}(?:[Ff]ail|[Ee]rror|not found|Could not)", r"\bplugin\w*\.cc:\d+ NCCL WARN"),
        "An NCCL plugin (network: libnccl-net.so such as HPC-X/SHARP or aws-ofi-nccl; tuner; profiler) failed "
        "to load or returned an error: built for another NCCL version, missing libraries, or an "
        "NCCL_NET_PLUGIN that names nothing.",
        "Check NCCL_NET_PLUGIN / LD_LIBRARY_PATH and that the plugin was built for this NCCL "
        "(NCCL_DEBUG=INFO prints which plugin and version loaded); unset it to use NCCL's own transports.",
        NCCL_ENV,
        mechanism="difference",
        needs=("NCCL",),
    ),
    _family(
        "nccl-topology",
        "NCCL: topology detection failed",
        (r"nccl:(graph/|include/graph|include/xml|include/topo)",),
        (r"\b(?:topo|xml|search|paths|connect|tuning)\.cc:\d+ NCCL WARN",),
        "NCCL could not read or use the machine's topology (PCI, NVLink, NICs): /sys not visible in a container, "
        "an NCCL_TOPO_FILE that does not match the machine, or NCCL_P2P_LEVEL/NCCL_NET_GDR_LEVEL values it "
        "cannot satisfy.",
        "Run with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=GRAPH; mount /sys in containers; drop NCCL_TOPO_FILE and "
        "hand-set *_LEVEL variables.",
        NCCL_ENV,
        needs=("NCCL",),
    ),
    _family(
        "nccl-env",
        "NCCL: a setting has a value NCCL cannot use",
        (r"nccl:(misc/param|param/|include/param|config/)",),
        (r"Invalid value \S+ for NCCL_\w+",),
        "An NCCL_* environment variable (or ncclConfig field / nccl.conf line) has a value NCCL rejects; it "
        "falls back to the default or fails.",
        "Fix or unset the variable the message names (see NCCL's environment documentation); check "
        "~/.nccl.conf and /etc/nccl.conf too.",
        NCCL_ENV,
        needs=("NCCL",),
    ),
    _family(
        "nccl-memory",
        "NCCL: memory allocation failed",
        (r"nccl:(allocator|mem_manager|misc/alloc|include/alloc)",),
        (r"\b(?:alloc|allocator|mem_manager)\.(?:cc|h):\d+ NCCL WARN",),
        "NCCL could not allocate or map host or GPU memory for its buffers: the GPU is full (the model took it "
        "all), pinned host memory or cuMem is limited, or the driver lacks a feature it asked for.",
        "Leave GPU memory for NCCL (smaller batch, PYTORCH_CUDA_ALLOC_CONF), raise ulimit -l; NCCL_CUMEM_ENABLE=0 "
        "if cuMem calls fail.",
        NCCL_TROUBLESHOOTING,
        mechanism="resource",
        needs=("NCCL",),
    ),
    _family(
        "nccl-cuda",
        "NCCL: a CUDA call failed",
        (r"nccl:(misc/cudawrap|misc/strongstream|include/cudawrap|include/cuda)",),
        (
            r"Cuda failure (?:\d+ )?'",
            r"\bcudawrap\.cc:\d+ NCCL WARN",
            r"CUDA driver (?:error|failure)",
            # the result a failed CUDA call returns to the caller (ncclUnhandledCudaError, ncclGetErrorString)
            # (an issue title retypes its case: "unhandled CUDA error")
            r"[Uu]nhandled (?:cuda|CUDA|Cuda) [Ee]rror",
            r"ncclUnhandledCudaError",
        )
        + _nccl_result(1, "cuda error"),
        "A CUDA driver or runtime call inside NCCL failed; the quoted CUDA error says which: a driver too old "
        "for a feature (cuMem, memory pools), a platform without it (vGPU, MIG, WSL), a GPU in a bad state, "
        "or an earlier CUDA error surfacing here.",
        "Read the quoted CUDA error; compare the driver (nvidia-smi) with torch's CUDA; NCCL_CUMEM_ENABLE=0 "
        "when cuMem calls fail; CUDA_LAUNCH_BLOCKING=1 to find an earlier kernel error.",
        NCCL_TROUBLESHOOTING,
        needs=("NCCL", "Cuda failure", "ncclUnhandledCudaError"),
    ),
    _family(
        "nccl-call",
        "NCCL rejected a call or failed inside it",
        (
            r"nccl:(enqueue|misc/argcheck|group|collectives|include/comm|include/info|include/enqueue|scheduler|"
            r"tuning|channel|register|sym|rma|gin|devcomm|dev_runtime|ce_coll|init|include/utils|misc/utils|"
            r"transport/generic|include/device|include/channel|include/group|include/register|include/transport|"
            r"misc/nvmlwrap|include/nvml|misc/gdrwrap|include/gdr|misc/tuner|misc/profiler|include/profiler|"
            r"transport/p2p|transport/net\.cc|transport/net/|include/net|misc/|include/)",
        ),
        (r"\b(?:enqueue|argcheck|group|init|channel|register|collectives)\.cc:\d+ NCCL WARN", r"ncclInvalidArgument")
        + _nccl_result(4, "invalid argument"),
        "NCCL refused a call or failed inside it; the message names what: ranks that disagree (different "
        "counts, roots, types or number of ranks), a communicator already aborted after an earlier error, a "
        "buffer registration or feature this GPU/driver does not support, or a GPU/NVML query that failed.",
        "Read the message and NCCL's 'Last error' line; check that every rank issues the same calls "
        "(TORCH_DISTRIBUTED_DEBUG=DETAIL), and rerun with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,COLL.",
        NCCL_TROUBLESHOOTING,
        needs=("NCCL",),
    ),
    _family(
        "nccl-ras",
        "NCCL's RAS monitor reported a problem",
        (r"nccl:(ras/|include/ras)",),
        (r"\bNCCL RAS\b", r"\bRAS\b.{0,60}(?:dead|unresponsive|timeout|fail)"),
        "NCCL's reliability monitor (RAS) found a peer that does not respond, a connection timeout between "
        "NCCL processes, or reported the job's state on request (ncclras).",
        "The rank or node it names is the one to look at first (crashed, hung, or network trouble); "
        "NCCL_RAS_ENABLE=0 turns the monitor off.",
        NCCL_ENV,
        needs=("NCCL", "RAS"),
    ),
    _family(
        "nccl-diag",
        "NCCL's diagnostics reported a problem",
        (r"nccl:(diagnostics/)",),
        (r"NCCL DIAG",),
        "One of NCCL's built-in diagnostic checks (P2P access, PCI, GPU, IB write bandwidth, paths) failed "
        "on this machine; the line names the check.",
        "Treat the named check as the hardware/driver problem to fix (P2P: NCCL_P2P_DISABLE=1; IB: ibstat; "
        "PCI: lspci -vv for the link width/speed).",
        NCCL_TROUBLESHOOTING,
        needs=("NCCL",),
    ),
    _family(
        "cuda-error",
        "a CUDA runtime call failed",
        (r"nccl:onerank\.cu",),
        (r"CUDA error: ", r"cuda runtime error \(\d+\)"),
        "A CUDA runtime call failed; the text after 'CUDA error:' says which. CUDA reports errors "
        "asynchronously, so the call that shows it is often not the one that caused it.",
        "Rerun with CUDA_LAUNCH_BLOCKING=1 (and TORCH_USE_CUDA_DSA builds for device asserts) to see the "
        "failing call; check nvidia-smi for the GPU's state and the driver against torch's CUDA.",
        f"{DOCS}/notes/cuda.html#asynchronous-execution",
        needs=("CUDA error", "cuda runtime error", "CUDA"),
    ),
    # torch's Python (raise / warn / logger texts of torch.distributed)
    _family(
        "rendezvous-failed",
        "torchrun's rendezvous failed",
        (r"torch-python:torch/distributed/elastic/rendezvous/",),
        (r"torch/distributed/elastic/rendezvous/\w+\.py\", line \d+", r"Rendezvous\w*Error"),
        "torchrun's rendezvous (c10d, etcd or static) could not assemble the job: nodes disagree on "
        "--nnodes, --rdzv-id or --rdzv-endpoint, the endpoint's store is unreachable, or a node did not join "
        "before the timeout and the rendezvous closed.",
        "Start every node with the same --nnodes, --rdzv-backend, --rdzv-id and --rdzv-endpoint HOST:PORT "
        "(reachable from all: `nc -zv HOST PORT`); raise --rdzv-conf join_timeout=... for slow starts; read "
        "the first node's log.",
        f"{DOCS}/elastic/rendezvous.html",
    ),
    _family(
        "elastic-agent",
        "torchrun's agent could not run the workers",
        (
            r"torch-python:torch/distributed/elastic/(agent|multiprocessing|timer|utils|events|metrics|"
            r"control_plane|_)",
            r"torch-python:torch/distributed/(run|launcher/)",
        ),
        (r"torch/distributed/elastic/(?:agent|multiprocessing)/[\w/]+\.py\", line \d+",),
        "torchrun (its elastic agent) failed to start, watch or stop the worker processes, or rejected its "
        "arguments; the message names which. When a worker failed, its own error (above the summary) is the "
        "one to read.",
        "Read the failing worker's error first; check torchrun's arguments (--nproc-per-node, --nnodes, the "
        "script path, --log-dir) and that the entrypoint starts on its own (`python script.py` with RANK=0 "
        "WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500).",
        f"{DOCS}/elastic/run.html",
    ),
    _family(
        "c10d-api",
        "a torch.distributed call got something it cannot use",
        (
            r"torch-python:torch/distributed/(distributed_c10d|rendezvous|_functional_collectives|utils|"
            r"c10d_logger)\.py",
        ),
        (r"torch/distributed/distributed_c10d\.py\", line \d+, in \w+\n(?:.*\n){0,3}?\w*(?:Error|Exception)",),
        "A torch.distributed function rejected its arguments or the process state; the message names which: "
        "a rank that is not in the group, tensors on a device the backend does not handle, lists whose length "
        "is not the world size, init_process_group missing or repeated, an unknown backend or init_method.",
        "Fix the argument the message names; every rank must call it with matching arguments; "
        "TORCH_DISTRIBUTED_DEBUG=DETAIL checks collectives across ranks.",
        f"{DOCS}/distributed.html",
    ),
    _family(
        "ddp-api",
        "DistributedDataParallel rejected the model or a call",
        (
            r"torch-python:torch/nn/parallel/distributed\.py",
            r"torch-native:torch/csrc/distributed/c10d/"
            r"(reducer|logger\.cpp|comm\.|python_comm_hook|default_comm_hooks|reducer_timer|sequence_num)",
        ),
        (r"torch/nn/parallel/distributed\.py\", line \d+, in \w+\n(?:.*\n){0,3}?\w*(?:Error|Exception)",),
        "DistributedDataParallel (or its C++ reducer) rejected the module or how it was used; the message names "
        "which: parameters that need no gradient or sit on several devices, device_ids that do not match, a "
        "communication hook registered twice or returning the wrong type, or buckets rebuilt while autograd "
        "ran.",
        "Fix what the message names; wrap the model after moving it to its device, once per process, and run "
        "forward/backward through the wrapper; TORCH_DISTRIBUTED_DEBUG=DETAIL adds parameter names.",
        f"{DOCS}/generated/torch.nn.parallel.DistributedDataParallel.html",
    ),
    _family(
        "syncbn-api",
        "SyncBatchNorm rejected its input or setup",
        (r"torch-python:torch/nn/modules/batchnorm\.py",),
        # SyncBatchNorm._check_input_dim, every version: torch >= 1.6 "expected at least 2D input (got {}D
        # input)"; torch 1.1-1.5 "expected at least 3D input (got {}D input)", which refused the (B, C) input
        # of a converted BatchNorm1d (older prints lack the "(got ...)" tail)
        (r"\bexpected at least [2-9]D input\b",),
        "SyncBatchNorm (or BatchNorm) rejected its input: a tensor of the wrong dimensionality or device, or "
        "SyncBatchNorm used outside a process group.",
        "Check the input's shape and device; use SyncBatchNorm only inside an initialised process group on GPU.",
        f"{DOCS}/generated/torch.nn.SyncBatchNorm.html",
    ),
    _family(
        "fsdp-api",
        "FSDP rejected the model, its state or a call",
        (r"torch-python:torch/distributed/(fsdp|_composable)/",),
        (
            r"torch/distributed/(?:fsdp|_composable)/[\w/]+\.py\", line \d+, in \w+\n(?:.*\n){0,3}?\w*(?:Error|"
            r"Exception)",
        ),
        "FullyShardedDataParallel / fully_shard rejected the model or a call; the message names which: "
        "wrapping order (a submodule wrapped after its parent, a module wrapped twice), parameters of mixed "
        "dtype/device, a state_dict type or optimizer state that does not match how the model was sharded, "
        "or an API used outside forward/backward.",
        "Fix what the message names; wrap from the leaves up (auto_wrap_policy), load/save state dicts with "
        "the matching StateDictType (or torch.distributed.checkpoint.state_dict helpers), and build the "
        "optimizer after wrapping.",
        f"{DOCS}/fsdp.html",
    ),
    _family(
        "dtensor-api",
        "DTensor / tensor parallel: an unsupported op or placement",
        (r"torch-python:torch/distributed/tensor/",),
        (
            r"torch/distributed/tensor/[\w/]+\.py\", line \d+, in \w+\n(?:.*\n){0,3}?\w*(?:Error|Exception)",
            # tensor/_dispatch.py (torch >= 2.2; "{op}: got mixed ..." and, later, a "Please see ..." tail)
            r"got mixed torch\.Tensor and DTensor",
        ),
        "A DTensor operation or redistribution is not supported for these placements or meshes: no sharding "
        "strategy for the op, tensors on different meshes, a DTensor mixed with a plain tensor, or a shape "
        "the sharding cannot split.",
        "Redistribute the inputs to placements the op supports (e.g. Replicate()), convert plain tensors with "
        "DTensor.from_local / distribute_tensor on the same mesh, and check the parallelize plan.",
        f"{DOCS}/distributed.tensor.html",
    ),
    _family(
        "device-mesh",
        "DeviceMesh rejected its shape or use",
        (r"torch-python:torch/distributed/device_mesh\.py",),
        (r"torch/distributed/device_mesh\.py\", line \d+, in \w+\n(?:.*\n){0,3}?\w*(?:Error|Exception)",),
        "init_device_mesh / DeviceMesh rejected its arguments: a shape that does not multiply to the world "
        "size, dimension names missing or repeated, a slice by a name the mesh does not have, or a mesh "
        "created before the process group on some ranks only.",
        "Give a mesh_shape whose product is WORLD_SIZE and unique mesh_dim_names, and call it on every rank.",
        f"{DOCS}/distributed.html#torch.distributed.device_mesh.init_device_mesh",
    ),
    _family(
        "dcp-failed",
        "torch.distributed.checkpoint could not save or load",
        (r"torch-python:torch/distributed/checkpoint/",),
        (
            r"torch/distributed/checkpoint/[\w/]+\.py\", line \d+, in \w+\n(?:.*\n){0,3}?\w*(?:Error|Exception)",
            r"CheckpointException",
        ),
        "Distributed checkpointing failed: the checkpoint's keys or shapes do not match the model (another "
        "parallelism, a renamed module), the storage path is not visible to every rank (a node-local disk), or "
        "ranks called save/load differently; CheckpointException lists each rank's error.",
        "Read the per-rank errors it lists; save to storage all ranks share, load into a model wrapped the "
        "same way (or use get_state_dict/set_state_dict), and call save/load on every rank.",
        f"{DOCS}/distributed.checkpoint.html",
    ),
    # torch's native code (libtorch_*: c10d, gloo)
    _family(
        "store-failed",
        "the c10d store (TCPStore) failed",
        (
            r"torch-native:torch/csrc/distributed/c10d/(TCPStore|socket\.cpp|Store\.|HashStore|FileStore|"
            r"PrefixStore|Utils\.hpp|control_collectives|Backoff)",
        ),
        (
            r"\bTCPStore\w*\.cpp:\d+\]",
            r"\[c10d\] (?:recvValue|sendBytes|recvBytes)\w* failed",
            r"DistStoreError",
            r"Failed to recv, got 0 bytes",
            r"failed to recv, got 0 bytes",
        ),
        "The c10d key-value store that ranks use to find each other (a TCPStore served by rank 0's process or "
        "torchrun's agent at MASTER_ADDR:MASTER_PORT) failed: its server exited (rank 0 or the agent "
        "crashed or finished first), a key never arrived before the timeout (a rank never got that far), or "
        "the connection broke.",
        "Find why the store's host (rank 0 / the agent on the first node) went away - its error comes first; if "
        "a key timed out, look for the rank that did not arrive; check MASTER_ADDR:MASTER_PORT is reachable.",
        f"{DOCS}/distributed.html#torch.distributed.TCPStore",
    ),
    _family(
        "gloo-failed",
        "gloo failed in a collective or its transport",
        (r"torch-native:(third_party/gloo/|torch/csrc/distributed/c10d/ProcessGroupGloo)",),
        (
            r"\[enforce fail at [^\]]*gloo/[^\]]+\]",
            r"Exception raised from \w+ at \S*ProcessGroupGloo\.cpp",
            r"gloo/transport/tcp/\w+\.cc:\d+\]",
        ),
        "gloo (the CPU backend) failed inside a collective or its TCP transport; the enforce text names the "
        "check: sizes or ops that differ between ranks, a peer that went away, a timeout waiting for a peer, "
        "or the address gloo picked.",
        "Make every rank call the same collectives with the same sizes (TORCH_DISTRIBUTED_DEBUG=DETAIL); if a "
        "peer went away, read its error first; GLOO_SOCKET_IFNAME picks the interface.",
        f"{DOCS}/distributed.html#backends",
    ),
    _family(
        "c10d-native",
        "a c10d process-group call failed in C++",
        (
            r"torch-native:torch/csrc/distributed/c10d/(ProcessGroup|Backend|Ops\.cpp|Functional|Types\.hpp|"
            r"Work\.|init\.cpp|GroupRegistry|FakeProcessGroup|NanCheck|symm_mem|control_plane|cuda/|"
            r"FlightRecorder|quantization|comm\.hpp|debug\.cpp|Utils\.cpp|intra_node|ParamCommsUtils|"
            r"TraceUtils|PyProcessGroup|python_callback|logging|WinSockUtils|exception|error\.h)",
            r"torch-native:c10d/gloo \(pooled literal\)",
        ),
        # a C++ error names its origin ("Exception raised from F at .../c10d/X.cpp:N"); a warning's "Triggered
        # internally at .../c10d/X.cpp:N" is not an error
        (r"Exception raised from \w+ at \S*torch/csrc/distributed/c10d/",),
        "A process-group operation failed in torch's C++ (c10d): an op the backend does not implement for "
        "this tensor, device or group, tensors whose devices/sizes differ, a group used after it was destroyed, "
        "or NaNs found by TORCH_NCCL_NAN_CHECK; the message names which.",
        "Fix what the message names; check the backend supports the op on this device (gloo: CPU, nccl: CUDA) "
        "and that every rank passes matching tensors; TORCH_SHOW_CPP_STACKTRACES=1 shows where.",
        f"{DOCS}/distributed.html",
    ),
    # the OS's error texts met by the socket, shared-memory, file and memory calls distributed runs make
    _family(
        "os-error",
        "a system call failed",
        (r"os:strerror",),
        (),
        "A system call failed with this errno text; the call it belongs to is named next to it (connect, bind, "
        "open, mmap, shm_open...).",
        "Read the call and its target next to the text (a path, an address, a device); `man 2 CALL` lists what "
        "the errno means for it.",
        "https://man7.org/linux/man-pages/man3/errno.3.html",
    ),
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
# ...and for a log that shows nothing distributed (no collective, process group, NCCL/gloo, launcher, rank prefix):
# one process's own error, for which NCCL_DEBUG and TORCH_DISTRIBUTED_DEBUG say nothing.
LOCAL_STEPS: tuple[str, ...] = (
    "Read the last traceback from the bottom up: the error line says what failed, the last frame in your own code "
    "(`your code:` above) where; print the shapes, keys or values it names just before that line.",
    "Rerun with TORCH_SHOW_CPP_STACKTRACES=1 (the C++ frames behind a torch error) and, for a CUDA error, "
    "CUDA_LAUNCH_BLOCKING=1 (the error is then reported at the call that caused it).",
    "If it hangs rather than fails: `py-spy dump --pid PID` prints its Python stack (or call "
    "faulthandler.dump_traceback_later(60) at the start of the script).",
)


# ------------------------------------------------------------------ the catalogue behind the rules (issue 27)
MECHANISMS = {"difference": 0, "resource": 1, "error": 2}  # order_findings: lower first

NOT_USER_FACING = {
    "info": "INFO/DEBUG log lines (shown only when asked for: logging at INFO, NCCL_DEBUG=INFO): not an error",
    "internal": "internal invariants (INTERNAL ASSERT, a check without a message, AssertionError): a bug in torch",
    "doc": "documentation compiled into the library (pybind docstrings, op schemas)",
    "no-error-word": "C strings with no error or warning word (labels, units, INFO format strings)",
    "os-unrelated": "errno/signal texts the socket, shared-memory, file and memory calls of c10d, gloo and NCCL "
    "do not return (see OS_MET)",
}
ERROR_WORD = re.compile(
    r"\b(?:error|errors|fail|fails|failed|failure|invalid|cannot|can't|can ?not|could ?not|couldn't|unable|must|"
    # a comparison that failed ("appears not to match sizes of the same param in process 0")
    r"(?:does|do|did|appears?) not (?:to )?match|(?:doesn't|don't) match|"
    r"mismatch\w*|not supported|unsupported|time ?out|timed out|exceed\w*|abort\w*|closed|refused|reset|"
    r"unreachable|missing|wrong|expected|expects|requires?|required|not allowed|incompatible|warning|deprecated|"
    r"out of|unknown|illegal|violation|overflow|truncated|duplicate|no such|not found|not set|not initiali[sz]ed|"
    r"already|denied|corrupt\w*|crash\w*|deadlock|too many|too large|too small|exhausted|insufficient|"
    r"unexpected\w*|lost|disconnect\w*|should|only|bad|negative|empty|mismatched|unable|forbid\w*|disabled)\b",
    re.IGNORECASE,
)
DOC_TEXT = re.compile(r"``|\) -> |^\s*(?:Args|Arguments|Returns|Example)\b|:(?:class|func|meth|attr):|Tensor\(a")
# errnos of connect/bind/accept/send/recv/getaddrinfo/shm_open/ftruncate/fallocate/mmap/open/write (man 2), and the
# signals that end a training process
OS_MET = {
    "EACCES",
    "EADDRINUSE",
    "EADDRNOTAVAIL",
    "EAFNOSUPPORT",
    "ECONNREFUSED",
    "ECONNRESET",
    "ECONNABORTED",
    "EHOSTUNREACH",
    "ENETUNREACH",
    "ENETDOWN",
    "ETIMEDOUT",
    "EPIPE",
    "ENOMEM",
    "ENOSPC",
    "EMFILE",
    "ENFILE",
    "EBADF",
    "EINTR",
    "EAGAIN",
    "EINVAL",
    "ENOENT",
    "EEXIST",
    "EPERM",
    "EIO",
    "EFBIG",
    "EDQUOT",
    "EROFS",
    "ENODEV",
    "ENXIO",
    "EBUSY",
    "EFAULT",
    "ENOBUFS",
    "EPROTO",
    "EHOSTDOWN",
    "ENOTCONN",
    "EISCONN",
    "EINPROGRESS",
    "EALREADY",
    "ENOTSOCK",
    "ENAMETOOLONG",
    "ENOTDIR",
    "EISDIR",
    "ETXTBSY",
    "EOVERFLOW",
    "SIGKILL",
    "SIGTERM",
    "SIGINT",
    "SIGHUP",
    "SIGQUIT",
    "SIGABRT",
    "SIGSEGV",
    "SIGBUS",
    "SIGFPE",
    "SIGILL",
    "SIGPIPE",
    "SIGXCPU",
    "SIGXFSZ",
    "SIGSYS",
    "SIGTRAP",
}


def _template_pattern(templates: list[str], os_texts: bool = False) -> str | None:
    """One regex for the literal parts of templates: per template its longest literal part, when that part is
    distinctive enough not to match unrelated text (>= 24 characters and 3 words)."""
    from ddplab.explain import catalogue

    parts = set()
    if os_texts:
        return rf"\b(?:{_trie(set(templates))})\b"
    # the OS's own words (strerror, strsignal) are printed by every layer whose call failed: a template that is
    # only "No such file or directory" (NCCL's plugin/rma.cc) says nothing about NCCL's plugins
    os_words = {t["text"].lower() for t in (catalogue.load("os") or {}).get("templates", ())}
    for text in templates:
        chunks = [
            c
            for c in catalogue.chunks(text)
            if len(c) >= 24 and len(c.split()) >= 3 and c.rstrip(".:;,!").lower() not in os_words
        ]
        if chunks:
            # without the sentence's last punctuation: an issue title, a retyped or wrapped line drops the final
            # "." or ":" of "Operator {} does not have a sharding strategy registered." but keeps its words
            parts.add(max(chunks, key=len)[:48].rstrip(".:;,!"))
    return _trie(parts) if parts else None


def _trie(words: set[str]) -> str:
    """One regex matching any of `words`, shared prefixes merged: Python's re tries an alternation of literals one by
    one at every position; a trie rejects most positions at the first character (~20x faster on a long log)."""
    tree: dict = {}
    for word in words:
        node = tree
        for ch in word:
            node = node.setdefault(ch, {})
        node[""] = {}

    def build(node: dict) -> str:
        chain = []
        while len(node) == 1 and "" not in node:  # a chain without branches: plain text, no recursion
            ch, node = next(iter(node.items()))
            chain.append(ch)
        out = re.escape("".join(chain))
        branches = [re.escape(ch) + build(child) for ch, child in sorted(node.items()) if ch]
        if not branches:
            return out
        body = branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"
        if "" in node:  # a word ends here and longer ones go on: try the longer first
            body = "(?:" + body + ")?"
        return out + body

    return build(tree)


def _with_templates(families: tuple[Rule, ...]) -> tuple[Rule, ...]:
    """Each family with one more pattern: the literal parts of the user-facing templates of the files it covers."""
    from ddplab.explain import catalogue

    # "SOURCE:FILE_REGEX", or "SOURCE:FILE_REGEX@@TEXT_REGEX": only that file's templates whose text matches (a
    # file that holds two layers: NCCL 2.3x's os/linux.cc has both its socket and its shared-memory calls)
    def parse(sel: str):
        src, rest = sel.split(":", 1)
        file_rx, _, text_rx = rest.partition("@@")
        return src, re.compile(file_rx), re.compile(text_rx) if text_rx else None

    selectors = [[parse(sel) for sel in f.covers] for f in families]
    texts: list[list[str]] = [[] for _ in families]
    owner: dict[tuple[str, str], int | None] = {}  # (source, file) -> the first family that covers it
    claimed: list[tuple[str, re.Pattern, re.Pattern, int]] = [  # text-filtered selectors, checked first
        (src, frx, trx, i) for i, sels in enumerate(selectors) for src, frx, trx in sels if trx is not None
    ]
    for source in catalogue.SOURCES:
        for t in (catalogue.load(source) or {}).get("templates", ()):
            key = (source, t["file"])
            if key not in owner:
                owner[key] = next(
                    (
                        i
                        for i, sels in enumerate(selectors)
                        if any(src == source and rx.match(t["file"]) and trx is None for src, rx, trx in sels)
                    ),
                    None,
                )
            who = next(
                (i for src, frx, trx, i in claimed if src == source and frx.match(t["file"]) and trx.search(t["text"])),
                owner[key],
            )
            if who is not None and internal_reason(source, t) is None:
                texts[who].append(t["text"])
    out = []
    for i, (family, mine) in enumerate(zip(families, texts)):
        derived = _template_pattern(mine, os_texts=all(sel.startswith("os:") for sel in family.covers))
        files = [
            sel.split(":", 1)[1].partition("@@")[0]
            for sel in family.covers
            if sel.startswith("nccl:") and "onerank" not in sel
        ]
        # every NCCL WARN line names its source file ("transport/net_ib.cc:839 NCCL WARN ...", any NCCL version);
        # a line another family claims by its text is that family's, not this file's
        others = [
            trx.pattern
            for src, frx, trx, j in claimed
            if src == "nccl"
            and j != i
            and any(
                src2 == src and frx.match(f) and rx.match(f)
                for (src2, f) in owner
                for s2, rx, _ in selectors[i]
                if s2 == src2
            )
        ]
        but = rf"(?![^\n]*(?:{'|'.join(others)}))" if others else ""
        warn = rf"(?:^|[\s/\]])(?:{'|'.join(files)})[\w/.]*:\d* NCCL WARN{but}" if files else None
        out.append(replace(family, patterns=family.patterns + tuple(p for p in (warn, derived) if p)))
    return tuple(out)


def internal_reason(source: str, template: dict) -> str | None:
    """Why a catalogue template is not user-facing (a key of NOT_USER_FACING), or None when it is."""
    text = template["text"]
    if source == "os":
        name = template.get("signal") or _errno_name(template.get("errno"))
        return None if name in OS_MET else "os-unrelated"
    if "INTERNAL ASSERT" in text or "Could this error message be improved" in text:
        return "internal"
    if source == "torch-python":
        kind = template.get("kind", "")
        if kind in ("log.info", "log.debug"):
            return "info"
        if template.get("exc") == "AssertionError":
            return "internal"
        return None
    if DOC_TEXT.search(text):
        return "doc"
    return None if ERROR_WORD.search(text) else "no-error-word"


def _errno_name(number) -> str | None:
    import errno

    return errno.errorcode.get(number) if number is not None else None


_COVERAGE: dict[str, tuple[str, str | None]] = {}  # a template's coverage, once per process (an explain each)


def coverage(source: str, template: dict) -> tuple[str, str | None]:
    """How explain covers one catalogue template: ("rule" | "family" | "internal" | "uncovered", rule id). Covered
    means explain, given the template as a log shows it (shown_as), names a rule first: a specific one ("rule") or a
    family ("family")."""
    from ddplab.explain.matcher import explain_text

    key = json.dumps([source, template], sort_keys=True)
    if key not in _COVERAGE:
        if internal_reason(source, template) is not None:
            _COVERAGE[key] = ("internal", None)
        else:
            found = explain_text(shown_as(source, template)).matches
            _COVERAGE[key] = (
                (("family" if BY_ID[found[0].rule].covers else "rule"), found[0].rule)
                if found and found[0].rule in BY_ID  # not explain's reading of the message (rule "message")
                else ("uncovered", None)
            )
    return _COVERAGE[key]


def shown_as(source: str, template: dict) -> str:
    """A template as a log shows it: fields filled in, and for torch's Python the line Python adds (the raising
    frame of a traceback, or the logger's file:line prefix torch's logging format writes)."""
    from ddplab.explain import catalogue

    text = catalogue.render(template["text"])
    kind, where = template.get("kind", ""), f"{template.get('file', '')}:{template.get('line', 0)}"
    if source == "torch-python" and kind == "raise":
        return (
            f'  File "/usr/lib/python3/site-packages/{template["file"]}", line {template.get("line", 0)}, in f\n'
            f"    raise {template.get('exc', 'RuntimeError')}(...)\n{template.get('exc', 'RuntimeError')}: {text}"
        )
    if source == "torch-python" and kind.startswith("log."):
        return f"W1203 12:00:00.000000 4242 site-packages/{where}] {text}"
    if source == "nccl" and template.get("file", "").startswith("onerank"):  # CUDA runtime's texts, as torch says
        return f"RuntimeError: CUDA error: {text}"
    if source == "nccl":  # NCCL's WARN lines name their source file
        return f"node1:4242:4243 [0] {template.get('file', '')}:7 NCCL WARN {text}"
    return text


def mechanism_rank(rule_id: str) -> int:
    """0 for a difference between machines, 1 for a resource limit, 2 for the rest (MECHANISMS)."""
    rule = BY_ID.get(rule_id)
    return MECHANISMS.get(rule.mechanism, 2) if rule else 2


def order_findings(rule_ids: list[str]) -> list[str]:
    """The finding that explains the others first, by mechanism: a stable sort that moves differences between
    machines (versions, drivers, interfaces) ahead of the transport errors they cause and resource limits ahead of
    the crash they cause; otherwise the order given (explain's own: root cause, causes before consequences, ...)."""
    return sorted(rule_ids, key=mechanism_rank)


RULES: tuple[Rule, ...] = _SPECIFIC + _with_templates(_FAMILIES)
BY_ID: dict[str, Rule] = {rule.id: rule for rule in RULES}
