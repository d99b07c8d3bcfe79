"""Issue 43: the generic answer read from the message itself, and findings that fit the log. Every text is the
software's own: made here by running the code (an OSError, a DDP reducer error), or a fixed text the software prints
(the CUDA and NCCL result texts from their runtimes, argparse's and Python's messages), in the forms logs show."""

from __future__ import annotations

import json
import os
import socket
import tempfile

import pytest
import torch
from conftest import traceback_of

from ddplab.explain import catalogue, message
from ddplab.explain.matcher import explain_text


def only(text: str):
    e = explain_text(text)
    return e, e.matches[0] if e.matches else None


# ------------------------------------------------------------------ the message's own advice
@pytest.mark.parametrize(
    "line, fix",
    [
        # torch/distributed/distributed_c10d.py (init_process_group without a backend on an old torch)
        (
            "ValueError: Default process group backend not specified. Please specify the `backend` argument.",
            "Please specify the `backend` argument.",
        ),
        ("RuntimeError: Something failed. Consider passing static_graph=True to DDP.", "Consider passing"),
        ("RuntimeError: Bad value. Set NCCL_P2P_DISABLE to 1.", "Set NCCL_P2P_DISABLE to 1."),
        ("RuntimeError: old API. Use torch.amp.autocast('cuda') instead.", "Use torch.amp.autocast('cuda') instead."),
        ("RuntimeError: the module is on cpu. Either move it first or omit device_id.", "Either move it first"),
        # deepspeed/launcher/runner.py's ssh check: the condition and its instruction in one clause, no comma
        (
            "RuntimeError: Using hostfile at /job/hostfile but host=worker-1 was not reachable via ssh. If you are "
            "running with a single node please remove /job/hostfile or setup passwordless ssh.",
            "If you are running with a single node please remove /job/hostfile or setup passwordless ssh.",
        ),
    ],
)
def test_the_message_own_instruction_is_the_fix(line, fix):
    e, m = only(line)
    assert m.rule == "message" and fix in m.fix and "advice" in m.said
    assert not e.matched  # no rule knew it: `ddplab explain` still exits 1


def test_a_request_to_report_a_bug_is_not_a_fix():
    said, _ = message.advice(
        "RuntimeError: internal assert failed. Please report a bug to PyTorch. Please include the traceback."
    )
    assert said == []


def test_a_condition_is_advice_only_with_an_instruction_in_it():
    for text in ("If the run hangs then it is a bug.", "When the rank is 0 please ignore.", "If so, the store died."):
        assert message.advice(text)[0] == [], text


# ------------------------------------------------------------------ errno with its operands
def test_enoent_on_a_write_names_the_missing_folder_and_every_node(tmp_path):
    target = tmp_path / "missing" / "model.pt"
    tb = traceback_of(lambda: open(target, "w"))
    # as a rank of a multi-process run prints it (torch's excepthook prefix)
    log = "\n".join(f"[rank1]: {line}" for line in tb.splitlines())
    _, m = only(log)
    assert m.title.startswith(f"the folder {target.parent} does not exist")
    assert "every node" in m.cause and f"os.makedirs('{target.parent}'" in m.fix
    assert m.rule == "os-error" and m.said == ["errno"]  # beside the errno family: its id stays, its words lead
    # torch.save says it in its own words (torch >= 2.1: "Parent directory ... does not exist.")
    tb = traceback_of(lambda: torch.save({}, str(target)))
    _, m = only("\n".join(f"[rank1]: {line}" for line in tb.splitlines()))
    assert m.title == f"the folder {target.parent} does not exist" and "every node" in m.cause


def test_enoent_on_a_read_names_the_file_not_a_folder(tmp_path):
    tb = traceback_of(lambda: open(tmp_path / "absent.yaml"))
    _, m = only(tb)
    assert m.title.startswith(f"{tmp_path / 'absent.yaml'} does not exist") and "every node" not in m.cause


def test_econnrefused_and_eaddrinuse_name_the_address():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: a connect is refused
        err = traceback_of(lambda: socket.create_connection(("127.0.0.1", port), timeout=5)).strip().splitlines()[-1]
    a = message.answer(f"{err} ('127.0.0.1', {port})")
    assert a.title == f"nothing listens at 127.0.0.1:{port}" and "MASTER_ADDR:MASTER_PORT" in a.fix
    with socket.socket() as s1, socket.socket() as s2:
        s1.bind(("127.0.0.1", 0))
        s1.listen()
        port = s1.getsockname()[1]
        err = traceback_of(lambda: s2.bind(("127.0.0.1", port))).strip().splitlines()[-1]
    a = message.answer(f"{err}: 127.0.0.1:{port}")
    assert a.title == f"address 127.0.0.1:{port} already in use" and f"grep :{port}" in a.fix


def test_eacces_names_the_path():
    a = message.answer("PermissionError: [Errno 13] Permission denied: '/data/ckpt/last.pt'")
    assert a.title == "permission denied on /data/ckpt/last.pt" and "ls -ld /data/ckpt" in a.fix


# ------------------------------------------------------------------ not supported / not implemented
def test_unsupported_names_the_subject_and_the_alternatives():
    # torch 1.x ProcessGroupGloo.cpp: "ProcessGroupGloo does not support reduce_scatter"
    _, m = only("RuntimeError: ProcessGroupGloo does not support reduce_scatter")
    assert m.title == "reduce_scatter is not supported by ProcessGroupGloo"
    gloo = message.runtime_tables()["gloo_cpu_ops"]
    assert "nccl runs on CUDA tensors only" in m.fix and "reduce_scatter" in gloo["ops"] and gloo["torch"] in m.fix


def test_a_torch_built_without_a_feature_is_unsupported_with_the_platform_way_out():
    _, m = only("RuntimeError: use_libuv was requested but PyTorch was built without libuv support")
    assert "libuv" in m.title and "USE_LIBUV=0" in m.fix


# ------------------------------------------------------------------ CUDA and NCCL enums, old numbers included
@pytest.mark.parametrize(
    "line, name",
    [
        ("RuntimeError: CUDA error: uncorrectable ECC error encountered", "cudaErrorECCUncorrectable"),
        ("RuntimeError: CUDA error 2", "cudaErrorMemoryAllocation"),
        # THC (torch <= 1.10) printed the number of CUDA <= 10.0's enum: 59 was cudaErrorAssert (710 since 10.1)
        ("RuntimeError: cuda runtime error (59)", "cudaErrorAssert"),
        (
            "THCudaCheck FAIL file=/pytorch/aten/src/THC/THCGeneral.cpp line=383 error=11 : invalid argument",
            "cudaErrorInvalidValue",
        ),
    ],
)
def test_a_cuda_error_is_mapped_through_the_runtime_enum(line, name):
    a = message.cuda_answer(line)
    assert name in a.cause and "Its header says:" in a.cause


def test_the_table_is_the_runtime_own():
    rows = {r["name"]: r for r in message.runtime_tables()["cuda"]}
    assert rows["cudaErrorIllegalAddress"]["text"] == "an illegal memory access was encountered"
    assert rows["cudaErrorAssert"]["number"] == 710 and rows["cudaErrorAssert"]["number_before_10_1"] == 59
    nccl = {r["name"]: r["number"] for r in message.runtime_tables()["nccl"]}
    assert nccl["ncclSystemError"] == 2 and nccl["ncclRemoteError"] == 6


def test_an_old_release_is_said_with_the_error():
    _, m = only("THCudaCheck FAIL file=/pytorch/aten/src/THC/THCGeneral.cpp line=383 error=11 : invalid argument")
    assert m.rule == "message" and "cudaErrorInvalidValue" in m.cause and "THC was removed in torch 1.11" in m.cause
    assert m.said == ["cuda", "old-release"]


@pytest.mark.parametrize("line", ["RuntimeError: NCCL error 2", "ncclSystemError: System call failed."])
def test_an_nccl_result_is_mapped_through_nccl_result_t(line):
    assert "ncclSystemError (2): A call to the system failed." in message.nccl_answer(line).cause


# ------------------------------------------------------------------ DataParallel is not DDP
def test_a_dataparallel_error_is_told_apart_from_ddp():
    # torch/nn/parallel/data_parallel.py's check of device_ids[0]
    _, m = only(
        "RuntimeError: module must have its parameters and buffers on device cuda:0 (device_ids[0]) but found one "
        "of them on device: cpu"
    )
    assert m.title == "an nn.DataParallel error (not DDP)" and "model.to('cuda:0')" in m.fix


# ------------------------------------------------------------------ Python's own grammar
def test_python_grammar_argparse_imports_and_wrappers():
    _, m = only("train.py: error: the following arguments are required: --local_rank")
    assert "LOCAL_RANK" in m.cause and "os.environ['LOCAL_RANK']" in m.fix
    _, m = only("/usr/bin/python: No module named torch.distributed")
    assert m.title == "torch.distributed is not installed in the interpreter /usr/bin/python"
    model = torch.nn.parallel.DataParallel(torch.nn.Linear(1, 1))
    tb = traceback_of(lambda: model.config)
    _, m = only(tb)
    assert "model.module.config" in m.fix


# ------------------------------------------------------------------ findings fit the log
def test_an_nccl_socket_error_is_not_gloo_lost_connection():
    # torch's DistBackendError with NCCL's `Last error:` block (ProcessGroupNCCL / NCCLUtils, NCCL >= 2.13)
    log = (
        "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970,"
        " remote process exited or there was a network error, NCCL version 2.19.3\n"
        "ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.\n"
        "Last error:\n"
        "socketProgressOpt: Call to recv from 10.0.0.2<36829> failed : Connection reset by peer\n"
    )
    rules = [m.rule for m in explain_text(log).matches]
    assert "peer-closed" not in rules and rules == ["nccl-remote-error", "nccl-socket"]
    # gloo's own lost connection keeps its rule
    gloo = (
        "RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error: Connection reset by peer"
    )
    assert [m.rule for m in explain_text(gloo).matches][0] == "peer-closed"


def test_a_message_continuation_line_makes_no_second_finding():
    # DDP's reducer report of parameters that got no gradient, quoted from a public thread (tests/logs/): its
    # continuation line "If you already have done the above, ..." is in the catalogue under a c10d C++ file, and
    # its family used to explain it again, with advice about TORCH_NCCL_NAN_CHECK
    import sys

    sys.path.insert(0, os.path.dirname(__file__))
    from explaincase import LOGS, read_quoted

    _, quote = read_quoted(LOGS / "unused_params_ddcap35.log")
    assert "If you already have done the above" in quote
    matches = explain_text(quote).matches
    assert [m.rule for m in matches] == ["unused-parameters"]
    assert not any("NAN_CHECK" in m.cause for m in matches)
    # a family still explains a line of its own under the same traceback's frame
    assert (
        first_family_of("RuntimeError: [/x/third_party/gloo/gloo/transport/tcp/pair.cc:9] nbytes mismatch")
        == "gloo-failed"
    )


def first_family_of(text: str) -> str | None:
    matches = explain_text(text).matches
    return matches[0].rule if matches else None


def test_the_closest_known_message_is_close_and_of_a_layer_the_log_involves(tmp_path):
    tb = traceback_of(lambda: open(tmp_path / "x" / "y", "w"))
    closest = explain_text(tb).reading.closest or ""
    assert "nccl" not in closest and "rma.cc" not in closest
    oom = "RuntimeError: CUDA error: out of memory"
    assert "onerank" not in (explain_text(oom).reading.closest or "")
    # a common phrase is not the same message
    mesh = (
        "ValueError: Mesh 'tp' is not available. Ensure the corresponding parallelism dimension is enabled (size > 1)."
    )
    assert catalogue.closest(mesh) is None
    # the software's own text still is
    assert "init_process_group" in catalogue.closest(
        "ValueError: Default process group has not been initialized, please make sure to call init_process_group."
    )


def test_json_carries_what_the_message_said(capsys):
    from ddplab.cli import main

    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "run.log")
        with open(path, "w") as f:
            f.write("RuntimeError: ProcessGroupGloo does not support all_to_all\n")
        code = main(["explain", "--json", path])
    out = json.loads(capsys.readouterr().out)
    assert code == 1 and out["matched"] is False and out["matches"][0]["said"] == ["unsupported"]


def _local_lambda():
    return lambda: 0


def test_torch_grammar_devices_kernels_libraries_and_pickle():
    import ctypes
    import pickle

    # torch's device check (TensorIterator / the dispatcher): the two devices it names
    _, m = only(
        "RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:1 and "
        "cuda:0!"
    )
    assert m.title == "one operation got tensors on cuda:1 and cuda:0" and "set_device(local_rank)" in m.fix
    # the dispatcher's "no kernel for this backend" (c10/core/dispatch: Could not run ... from the ... backend)
    a = message.answer("NotImplementedError: Could not run 'torchvision::nms' with arguments from the 'CUDA' backend.")
    assert a.title == "torchvision::nms has no CUDA kernel here"
    # the dynamic loader, for real
    _, m = only(traceback_of(lambda: ctypes.CDLL("libddplab_absent.so.11")))
    assert m.title.startswith("the loader cannot find libddplab_absent.so.11") and "LD_LIBRARY_PATH" in m.fix
    # pickle, for real: what spawn sends to a process must pickle
    _, m = only(traceback_of(lambda: pickle.dumps(_local_lambda())))
    assert m.title == "_local_lambda.<locals>.<lambda> cannot be pickled" and "module level" in m.fix


def test_pickle_cannot_find_a_class_of_main_in_another_process():
    import subprocess
    import sys

    # for real: a class defined in one interpreter's __main__ (python -c, as a notebook's) unpickled in another
    made = subprocess.run(
        [
            sys.executable,
            "-c",
            "import pickle,sys\nclass Jigsaw: pass\nsys.stdout.buffer.write(pickle.dumps(Jigsaw()))",
        ],
        capture_output=True,
        timeout=60,
    ).stdout
    err = subprocess.run(
        [sys.executable, "-c", "import pickle,sys; pickle.loads(sys.stdin.buffer.read())"],
        input=made,
        capture_output=True,
        timeout=60,
    ).stderr.decode()
    assert "Can't get attribute 'Jigsaw' on <module '__main__'" in err, err
    _, m = only(err)
    assert m.title == "the spawned process cannot find Jigsaw in __main__" and "module level" in m.fix
    # a spawned child imports the main script as __mp_main__ (multiprocessing/spawn.py)
    a = message.answer("AttributeError: Can't get attribute 'Net' on <module '__mp_main__' from '/home/u/train.py'>")
    assert a.title == "the spawned process cannot find Net in __main__" and "__name__" in a.cause
    # the device check retyped without the space after the comma (an issue's paste)
    a = message.answer("found at least two devices,cuda:1 and cuda:0")
    assert a.title == "one operation got tensors on cuda:1 and cuda:0"
