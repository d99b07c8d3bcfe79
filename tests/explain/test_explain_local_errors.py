"""Errors of one process (not distributed): a missing submodule of an installed package is a version mismatch (or,
named as compiled extensions are, a build without it), and the next steps of a one-process error say nothing distributed. Texts: the logs of public issues (cited) quoted
verbatim, or made here by running the code."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest
from conftest import traceback_of

from ddplab.explain.matcher import explain_text

DISTRIBUTED_STEPS = ("NCCL_DEBUG", "TORCH_DISTRIBUTED_DEBUG")


# ------------------------------------------------------------------ a missing submodule of an installed package
# 2U1/Qwen-VL-Series-Finetune#54: an old transformers imports torch._six, which newer torch removed
QWENVL_54 = (
    "RuntimeError: Failed to import transformers.trainer because of the following error (look up to see its "
    "traceback): No module named 'torch._six'"
)


def test_a_private_submodule_of_torch_is_a_version_mismatch_not_a_missing_install():
    m = explain_text(QWENVL_54).matches[0]
    assert "version mismatch" in m.title and "not installed" not in m.title
    assert "torch._six" in m.cause and "private submodule" in m.cause
    assert "version of torch the code was written for" in m.fix


def test_the_same_from_a_real_import_of_the_installed_torch():
    pytest.importorskip("torch")
    text = traceback_of(lambda: importlib.import_module("torch._six"))  # removed in torch 2.0
    m = explain_text(text).matches[0]
    assert "version mismatch" in m.title and "torch._six" in m.title


def _import_from(root: Path, package: str, init: str, module: str) -> str:
    (root / package).mkdir(parents=True)
    (root / package / "__init__.py").write_text(init)
    sys.path.insert(0, str(root))
    try:
        return traceback_of(lambda: importlib.import_module(module))
    finally:
        sys.path.remove(str(root))
        for name in [n for n in sys.modules if n == package or n.startswith(package + ".")]:
            del sys.modules[name]


def test_any_package_whose_frames_are_under_site_packages(tmp_path):
    # a package that imports its own private submodule, gone from the installed release: its frames prove it installed
    text = _import_from(
        tmp_path / "site-packages", "ddplab_local_pkg", "import ddplab_local_pkg._gone\n", "ddplab_local_pkg"
    )
    assert "No module named 'ddplab_local_pkg._gone'" in text
    m = explain_text(text).matches[0]
    assert "version mismatch" in m.title and "ddplab_local_pkg" in m.fix


def test_the_projects_own_package_and_another_interpreter_stay_not_installed(tmp_path):
    # the project's own package (not under site-packages, not a known one): no claim of a version mismatch
    text = _import_from(tmp_path / "project", "ddplab_local_own", "", "ddplab_local_own.models")
    m = explain_text(text).matches[0]
    assert "version mismatch" not in m.title and "not installed" in m.title
    # `python -m` under another interpreter (open-mmlab/mmdetection#1402): that interpreter lacks it
    m = explain_text("/usr/bin/python: No module named torch.distributed").matches[0]
    assert m.title == "torch.distributed is not installed in the interpreter /usr/bin/python"


def test_a_packages_compiled_extension_missing_is_a_build_not_a_version(tmp_path):
    # a package installed from its source without its build step (open-mmlab/mmcv#409: `pip install -e .` of mmcv,
    # then `ext_loader.load_ext('_ext', ...)` -> "No module named 'mmcv._ext'"): made here the same way
    text = _import_from(
        tmp_path / "site-packages",
        "ddplab_local_ext",
        "import importlib\next = importlib.import_module(__name__ + '._ext')  # as mmcv's ext_loader\n",
        "ddplab_local_ext",
    )
    assert "No module named 'ddplab_local_ext._ext'" in text
    m = explain_text(text).matches[0]
    assert m.title.startswith("ddplab_local_ext's compiled extension ddplab_local_ext._ext is missing"), m.title
    assert "version mismatch" not in m.title and "pip install -v -e ." in m.fix
    # mmcv's as XLearning-SCU/2022-CVPR-AirNet#5 quotes it ("pip install mmcv" has no ops: mmcv-full has), and the
    # names torchvision and detectron2 give theirs; a private module that is no extension stays a version mismatch
    for module in ("mmcv._ext", "torchvision._C", "detectron2._C"):
        title = explain_text(f"ModuleNotFoundError: No module named '{module}'").matches[0].title
        assert f"compiled extension {module} is missing" in title, title
    assert "version mismatch" in explain_text(QWENVL_54).matches[0].title


# ------------------------------------------------------------------ next steps fit the log
# VICO-UoE/MTPSL#3 (a shape bug in one process's model code)
MTPSL_3 = """Traceback (most recent call last):
  File "/share/castor/home/leh/projects/MTPSL/cityscapes_mtl_xtc.py", line 191, in <module>
    con_loss = mapfns(train_pred_ind, train_target_ind, feat_aug[ind_].unsqueeze(0), copy.deepcopy(w), ssl_type=opt.ssl_type)
 File "/share/castor/home/leh/projects/MTPSL/model/mapfns.py", line 167, in forward
    mapout_source = self.mapfns(source_pred, input_task=source_task)
File "/share/castor/home/leh/projects/MTPSL/model/mapfns.py", line 90, in forward
    g_encoder[i][0] = self.encoder_block[i](x)
File "/share/castor/home/leh/projects/MTPSL/model/mapfns.py", line 36, in forward
    gamma = torch.mm(A_taskpair, self.gamma.t())
RuntimeError: mat1 and mat2 shapes cannot be multiplied (1x2 and 6x64)
"""
# rosinality/style-based-gan-pytorch#83 (a cuDNN limit on one GPU)
STYLEGAN_83 = """Traceback (most recent call last):
  File "train.py", line 347, in <module>
    train(args, dataset, generator, discriminator, device)
  File "train.py", line 167, in train
    fake_predict.backward()
  File "/home/edward/anaconda3/lib/python3.6/site-packages/torch/tensor.py", line 195, in backward
    torch.autograd.backward(self, gradient, retain_graph, create_graph)
  File "/home/edward/anaconda3/lib/python3.6/site-packages/torch/autograd/__init__.py", line 99, in backward
    allow_unreachable=True)  # allow_unreachable flag
RuntimeError: cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you passed in a non-contiguous input.
"""


def _steps(text: str) -> str:
    e = explain_text(text)
    assert not e.matched and e.next_steps
    return " ".join(e.next_steps)


@pytest.mark.parametrize(
    "text", [MTPSL_3, STYLEGAN_83, traceback_of(lambda: {"text": 1}["label"])], ids=["shape", "cudnn", "keyerror"]
)
def test_a_one_process_error_gets_no_distributed_next_steps(text):
    steps = _steps(text)
    assert not any(word in steps for word in DISTRIBUTED_STEPS)
    assert "TORCH_SHOW_CPP_STACKTRACES=1" in steps


def _collective_of_a_missing_key(dist=None):
    batch = {"text": 1}
    dist.all_reduce(batch["label"])


def test_a_log_that_shows_ranks_or_a_collective_keeps_them():
    keyerror = traceback_of(lambda: {"text": 1}["label"])
    ranked = "\n".join(f"[rank1]: {line}" for line in keyerror.splitlines())  # torch's rank prefix
    assert all(word in _steps(ranked) for word in DISTRIBUTED_STEPS)
    in_collective = traceback_of(_collective_of_a_missing_key)  # its frame's line calls a collective
    assert all(word in _steps(in_collective) for word in DISTRIBUTED_STEPS)
    titan = Path(__file__).parents[2] / "benchmarks/explain_heldout6/tp_mesh_missing_torchtitan2184.log"
    assert all(word in _steps(titan.read_text()) for word in DISTRIBUTED_STEPS)  # torchtitan's distributed/ sources
