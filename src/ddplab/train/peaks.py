"""Each GPU's sourced dense BF16 peak: the denominator of the training's MFU (as nanoGPT reports it), and the speed
ratio `ddplab cost` assumes between boards (ddplab.perf.cost reads these tables; train imports nothing of perf).
Every figure carries its source and the date it was read.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Peak:
    gpu: str
    bf16_dense_tflops: float
    source: str
    date: str  # when the figure was checked


# Relative speed between GPU types is ASSUMED to follow peak dense BF16 tensor throughput (without 2:4 sparsity).
# That is a ceiling: memory-bound models gain less (an H200 equals an H100 here, yet its 4.8 TB/s HBM3e beats the
# H100's 3.35 TB/s on memory-bound work). NVIDIA publishes no tensor peak for the AWS-only A10G, so it has none:
# measure on it (--measured-on A10G) or give peak_tflops for it in a --prices file.
PEAKS: dict[str, Peak] = {
    p.gpu: p
    for p in [
        Peak(
            "RTX4090",
            165.2,
            "NVIDIA Ada GPU Architecture whitepaper v2.01, appendix: Peak BF16 Tensor TFLOPS with FP32 "
            "Accumulate 165.2 (330.4 sparse), https://images.nvidia.com/aem-dam/Solutions/geforce/ada/"
            "nvidia-ada-gpu-architecture.pdf",
            "2026-12-02",
        ),
        Peak(
            "A100",
            312.0,
            "NVIDIA A100 Tensor Core GPU datasheet: BF16 Tensor Core 312 TFLOPS (624 sparse), "
            "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/"
            "nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf",
            "2026-12-02",
        ),
        Peak(
            "H100",
            989.4,
            "NVIDIA H100 Tensor Core GPU datasheet, SXM: BF16 Tensor Core 1,979 TFLOPS with sparsity "
            "(989.4 dense), https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet",
            "2026-12-02",
        ),
        Peak(
            "H200",
            989.4,
            "NVIDIA H200 Tensor Core GPU datasheet, SXM: BF16 Tensor Core 1,979 TFLOPS with sparsity "
            "(989.4 dense; same GH100 compute as H100), https://www.nvidia.com/en-us/data-center/h200/",
            "2026-12-02",
        ),
    ]
}


# The exact names torch reports (torch.cuda.get_device_name: the driver's board name, as `nvidia-smi -L` prints it)
# of the boards each table row describes. Exact, not "contains": a cut-down or slower part whose name contains a
# row's (RTX 4090 D, RTX 4090 Laptop GPU, H100 PCIe, H100 NVL, H200 NVL) has a lower peak and must not get the
# row's. Every A100 is listed: the A100 datasheet above gives 312 dense BF16 TFLOPS to its 40GB/80GB PCIe and SXM
# boards alike (read 2026-12-03). Names as seen in public nvidia-smi/torch output (read 2026-12-03).
DEVICE_NAMES = {
    "NVIDIA A100-SXM4-40GB": "A100",
    "NVIDIA A100-SXM4-80GB": "A100",
    "NVIDIA A100-PCIE-40GB": "A100",
    "NVIDIA A100 80GB PCIe": "A100",
    "NVIDIA H100 80GB HBM3": "H100",  # the SXM5 board; the PCIe one reports "NVIDIA H100 PCIe"
    "NVIDIA H200": "H200",  # SXM; the NVL board reports "NVIDIA H200 NVL"
    "NVIDIA GeForce RTX 4090": "RTX4090",
    "NVIDIA A10G": "A10G",
}


def gpu_of_device(device_name: str) -> str | None:
    """The table key of a torch device name ("NVIDIA H100 80GB HBM3" -> "H100"); None for cpu or other boards."""
    return DEVICE_NAMES.get(" ".join(device_name.split()))


def device_peak(device_name: str) -> Peak | None:
    """The sourced dense BF16 peak of exactly this board, or None (then MFU needs --peak-tflops)."""
    key = gpu_of_device(device_name)
    return PEAKS.get(key) if key else None
