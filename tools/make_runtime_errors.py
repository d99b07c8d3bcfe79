"""Write the CUDA runtime's and NCCL's result enums, with their texts and documented meanings, for `ddplab explain`.

    python tools/make_runtime_errors.py --cuda /usr/local/cuda-13.0     # writes src/ddplab/explain/catalogue/runtime_errors.json

A CUDA or NCCL error in a log is one of these enums printed through its runtime's own function: torch prints
`CUDA error: TEXT` (cudaGetErrorString), old THC `cuda runtime error (N) : TEXT`, NCCL `NCCL error in: F:L, TEXT`
(ncclGetErrorString). explain maps a text or a number back to the enum's name and the meaning its header documents.

Sources, written into the file with the date:
- cuda: every value of `enum cudaError` in the toolkit's include/driver_types.h, with its doc comment (the meaning),
  and its text and name from the same toolkit's libcudart (cudaGetErrorString / cudaGetErrorName, called through
  ctypes: they need no GPU).
- cuda_before_10_1: CUDA 10.1 renumbered the runtime's errors to the driver's; the older numbers (CUDA <= 10.0's
  driver_types.h, as THC printed them in `cuda runtime error (N)`) are OLD_CUDA below, read from a CUDA 9 copy of
  that header.
- gloo_cpu_ops: the collectives a one-rank gloo group of the installed torch runs on CPU tensors (run here, in a
  child process): what a "gloo does not support X" message of an older torch can move to.
- nccl: ncclResult_t of NCCL's src/nccl.h.in (NVIDIA/nccl), the texts of ncclGetErrorString (src/init.cc; older
  releases print the text without the parenthesised hint) and the meanings of NCCL's documentation
  (docs.nvidia.com/deeplearning/nccl/user-guide/docs/api/types.html).
"""

from __future__ import annotations

import argparse
import ctypes
import datetime
import gzip
import json
import re
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "src" / "ddplab" / "explain" / "catalogue" / "runtime_errors.json.gz"

# CUDA <= 10.0's enum cudaError (driver_types.h of CUDA 9): name -> number, for the names whose number changed
OLD_CUDA = {
    "cudaErrorMissingConfiguration": 1,
    "cudaErrorMemoryAllocation": 2,
    "cudaErrorInitializationError": 3,
    "cudaErrorLaunchFailure": 4,
    "cudaErrorPriorLaunchFailure": 5,
    "cudaErrorLaunchTimeout": 6,
    "cudaErrorLaunchOutOfResources": 7,
    "cudaErrorInvalidDeviceFunction": 8,
    "cudaErrorInvalidConfiguration": 9,
    "cudaErrorInvalidDevice": 10,
    "cudaErrorInvalidValue": 11,
    "cudaErrorInvalidPitchValue": 12,
    "cudaErrorInvalidSymbol": 13,
    "cudaErrorMapBufferObjectFailed": 14,
    "cudaErrorUnmapBufferObjectFailed": 15,
    "cudaErrorInvalidHostPointer": 16,
    "cudaErrorInvalidDevicePointer": 17,
    "cudaErrorInvalidTexture": 18,
    "cudaErrorInvalidTextureBinding": 19,
    "cudaErrorInvalidChannelDescriptor": 20,
    "cudaErrorInvalidMemcpyDirection": 21,
    "cudaErrorAddressOfConstant": 22,
    "cudaErrorTextureFetchFailed": 23,
    "cudaErrorTextureNotBound": 24,
    "cudaErrorSynchronizationError": 25,
    "cudaErrorInvalidFilterSetting": 26,
    "cudaErrorInvalidNormSetting": 27,
    "cudaErrorMixedDeviceExecution": 28,
    "cudaErrorCudartUnloading": 29,
    "cudaErrorUnknown": 30,
    "cudaErrorNotYetImplemented": 31,
    "cudaErrorMemoryValueTooLarge": 32,
    "cudaErrorInvalidResourceHandle": 33,
    "cudaErrorNotReady": 34,
    "cudaErrorInsufficientDriver": 35,
    "cudaErrorSetOnActiveProcess": 36,
    "cudaErrorInvalidSurface": 37,
    "cudaErrorNoDevice": 38,
    "cudaErrorECCUncorrectable": 39,
    "cudaErrorSharedObjectSymbolNotFound": 40,
    "cudaErrorSharedObjectInitFailed": 41,
    "cudaErrorUnsupportedLimit": 42,
    "cudaErrorDuplicateVariableName": 43,
    "cudaErrorDuplicateTextureName": 44,
    "cudaErrorDuplicateSurfaceName": 45,
    "cudaErrorDevicesUnavailable": 46,
    "cudaErrorInvalidKernelImage": 47,
    "cudaErrorNoKernelImageForDevice": 48,
    "cudaErrorIncompatibleDriverContext": 49,
    "cudaErrorPeerAccessAlreadyEnabled": 50,
    "cudaErrorPeerAccessNotEnabled": 51,
    "cudaErrorDeviceAlreadyInUse": 54,
    "cudaErrorProfilerDisabled": 55,
    "cudaErrorProfilerNotInitialized": 56,
    "cudaErrorProfilerAlreadyStarted": 57,
    "cudaErrorProfilerAlreadyStopped": 58,
    "cudaErrorAssert": 59,
    "cudaErrorTooManyPeers": 60,
    "cudaErrorHostMemoryAlreadyRegistered": 61,
    "cudaErrorHostMemoryNotRegistered": 62,
    "cudaErrorOperatingSystem": 63,
    "cudaErrorPeerAccessUnsupported": 64,
    "cudaErrorLaunchMaxDepthExceeded": 65,
    "cudaErrorLaunchFileScopedTex": 66,
    "cudaErrorLaunchFileScopedSurf": 67,
    "cudaErrorSyncDepthExceeded": 68,
    "cudaErrorLaunchPendingCountExceeded": 69,
    "cudaErrorNotPermitted": 70,
    "cudaErrorNotSupported": 71,
    "cudaErrorHardwareStackError": 72,
    "cudaErrorIllegalInstruction": 73,
    "cudaErrorMisalignedAddress": 74,
    "cudaErrorInvalidAddressSpace": 75,
    "cudaErrorInvalidPc": 76,
    "cudaErrorIllegalAddress": 77,
    "cudaErrorInvalidPtx": 78,
    "cudaErrorInvalidGraphicsContext": 79,
    "cudaErrorNvlinkUncorrectable": 80,
    "cudaErrorJitCompilerNotFound": 81,
    "cudaErrorCooperativeLaunchTooLarge": 82,
}

# ncclResult_t (src/nccl.h.in), ncclGetErrorString (src/init.cc), the meaning (NCCL's api/types.html)
NCCL = [
    (
        1,
        "ncclUnhandledCudaError",
        "unhandled cuda error (run with NCCL_DEBUG=INFO for details)",
        "A call to a CUDA function failed.",
    ),
    (
        2,
        "ncclSystemError",
        "unhandled system error (run with NCCL_DEBUG=INFO for details)",
        "A call to the system failed.",
    ),
    (
        3,
        "ncclInternalError",
        "internal error - please report this issue to the NCCL developers",
        "An internal check failed. This is due to either a bug in NCCL or a memory corruption.",
    ),
    (
        4,
        "ncclInvalidArgument",
        "invalid argument (run with NCCL_DEBUG=WARN for details)",
        "An argument has an invalid value.",
    ),
    (
        5,
        "ncclInvalidUsage",
        "invalid usage (run with NCCL_DEBUG=WARN for details)",
        "The call to NCCL is incorrect. This is usually reflecting a programming error.",
    ),
    (
        6,
        "ncclRemoteError",
        "remote process exited or there was a network error",
        "A call failed possibly due to a network error or a remote process exiting prematurely.",
    ),
    (
        7,
        "ncclInProgress",
        "NCCL operation in progress",
        "A NCCL operation on the communicator is being enqueued and is being progressed in the background.",
    ),
    (
        8,
        "ncclTimeout",
        None,
        "An NCCL operation timed out (ncclTimeout: in NVIDIA/nccl src/nccl.h.in at commit 021e804, undocumented in api/types.html).",
    ),
]

ENTRY = re.compile(r"/\*\*((?:(?!\*/)[\s\S])*)\*/\s*(cudaError\w+|cudaSuccess)\s*=\s*(\d+)")


def _meaning(comment: str) -> str:
    text = " ".join(line.strip().lstrip("*").strip() for line in comment.splitlines())
    text = re.sub(r"\\(?:ref|link|note)\b\s*", "", text).replace("::", "")
    text = re.sub(r"\\deprecated\s*", "Deprecated: ", text)
    return re.sub(r"\s+", " ", text).strip()


def cuda_table(root: Path) -> tuple[list[dict], str]:
    header = (root / "include" / "driver_types.h").read_text()
    enum = header[header.index("enum __device_builtin__ cudaError") :]
    enum = enum[: enum.index("};")]
    lib = ctypes.CDLL(str(next((root / "lib64").glob("libcudart.so.*"))))
    lib.cudaGetErrorString.restype = ctypes.c_char_p
    version = ctypes.c_int()
    lib.cudaRuntimeGetVersion(ctypes.byref(version))
    rows = []
    for m in ENTRY.finditer(enum):
        number = int(m.group(3))
        if number == 0:
            continue
        name = m.group(2)
        rows.append(
            {
                "number": number,
                "name": name,
                "text": lib.cudaGetErrorString(number).decode(),
                "meaning": _meaning(m.group(1)),
                "number_before_10_1": OLD_CUDA.get(name),
            }
        )
    v = version.value
    return rows, f"CUDA {v // 1000}.{v % 1000 // 10} ({root}/include/driver_types.h, libcudart)"


# Each collective a gloo group can be asked for, called the way torch.distributed's API calls it
GLOO_PROBE = r"""
import json, os, sys, torch, torch.distributed as dist
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[1])
dist.init_process_group("gloo", rank=0, world_size=1)
t = lambda: torch.ones(4)
ops = {
    "broadcast": lambda: dist.broadcast(t(), 0),
    "all_reduce": lambda: dist.all_reduce(t()),
    "reduce": lambda: dist.reduce(t(), 0),
    "all_gather": lambda: dist.all_gather([t()], t()),
    "all_gather_into_tensor": lambda: dist.all_gather_into_tensor(t(), t()),
    "gather": lambda: dist.gather(t(), [t()], 0),
    "scatter": lambda: dist.scatter(t(), [t()], 0),
    "reduce_scatter": lambda: dist.reduce_scatter(t(), [t()]),
    "reduce_scatter_tensor": lambda: dist.reduce_scatter_tensor(t(), t()),
    "all_to_all": lambda: dist.all_to_all([t()], [t()]),
    "all_to_all_single": lambda: dist.all_to_all_single(t(), t()),
    "barrier": lambda: dist.barrier(),
}
ran = []
for name, call in ops.items():
    try:
        call()
        ran.append(name)
    except Exception:
        pass
dist.destroy_process_group()
print(json.dumps({"torch": torch.__version__, "ops": ran}))
"""


def gloo_cpu_ops() -> dict:
    import socket
    import subprocess
    import sys

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = subprocess.run([sys.executable, "-c", GLOO_PROBE, str(port)], capture_output=True, text=True, timeout=120)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cuda", type=Path, default=Path("/usr/local/cuda"), help="a CUDA toolkit's root")
    args = parser.parse_args(argv)
    cuda, cuda_source = cuda_table(args.cuda)
    data = {
        "written": datetime.date.today().isoformat(),
        "cuda_source": cuda_source,
        "cuda_before_10_1_source": "CUDA 9's include/driver_types.h (enum cudaError; CUDA 10.1 renumbered it)",
        "nccl_source": "NVIDIA/nccl src/nccl.h.in at 021e804 (ncclResult_t) and src/init.cc (ncclGetErrorString); meanings: "
        "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/api/types.html",
        "cuda": cuda,
        "gloo_cpu_ops": gloo_cpu_ops(),
        "nccl": [{"number": n, "name": name, "text": text, "meaning": meaning} for n, name, text, meaning in NCCL],
    }
    # mtime=0: the same extraction writes the same bytes (as the catalogue's files)
    with open(OUT, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as f:
        f.write(json.dumps(data, indent=0, sort_keys=True).encode())
    print(f"{OUT}: {len(cuda)} CUDA errors ({cuda_source}), {len(NCCL)} NCCL results")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
