"""The options of ``fmnist_torch.py`` that change how fast a step runs, not what it computes:
cuDNN's algorithm search (``--cudnn-benchmark``), threads per CPU worker (``--cpu-threads``),
bfloat16 autocast (``--precision bf16``: parameters, gradients and the all-reduce stay
float32), the NHWC memory format (``--channels-last``), and the result fields that record
them with the device, the CUDA graph and ``--compile``.

The CUDA graph itself (``--cuda-graph``) is :mod:`ddlab.training.cuda_graph_torch`'s.
"""
from __future__ import annotations

import argparse
import contextlib
import os
from typing import Callable

import torch


def set_up(args: argparse.Namespace, device: torch.device) -> torch.device:
    """Sets the device's speed options and returns the device to train on (on a GPU, the
    one this worker was pinned to)."""
    if device.type == "cuda":
        # Fixed shapes: let cuDNN time its algorithms once and keep the fastest (warm-up time).
        torch.backends.cudnn.benchmark = args.cudnn_benchmark == "on"
        return torch.device("cuda", torch.cuda.current_device())
    torch.set_num_threads(args.cpu_threads)
    return device


def memory_format(args: argparse.Namespace):
    """The memory format of the images and the model's weights (--channels-last: NHWC)."""
    return torch.channels_last if args.channels_last else torch.contiguous_format


def autocast(precision: str, device: torch.device, capturing: Callable[[], bool]) -> Callable:
    """A factory of the context a forward pass runs in: bfloat16 autocast for ``--precision
    bf16``, nothing for fp32. ``capturing()`` says whether the step is (to be) captured as a
    CUDA graph: autocast's weight-cast cache must not outlive a graph capture, so it is off then."""
    def context():
        if precision == "bf16":
            return torch.autocast(device.type, dtype=torch.bfloat16, cache_enabled=not capturing())
        return contextlib.nullcontext()
    return context


def for_cpu_evaluation(model: torch.nn.Module) -> None:
    """Speeds up rank 0's test evaluation on CPU after training, while the other workers wait
    at the barrier: every core, and channels-last weights (oneDNN's CPU convolutions run about
    1.7x faster so; the training is over, so this changes only the evaluation's speed)."""
    torch.set_num_threads(os.cpu_count() or 1)
    model.to(memory_format=torch.channels_last)


def device_fields(args: argparse.Namespace, device: torch.device, cuda_graph: bool, cuda_graph_reason: str) -> dict:
    """The result's fields on where and how the step ran (train_common.build_result's
    ``device_fields``)."""
    on_gpu = device.type == "cuda"
    return {"device": device.type, "device_name": torch.cuda.get_device_name(device) if on_gpu else None,
            "cuda_graph": cuda_graph, "cuda_graph_reason": cuda_graph_reason,
            "compile": args.compile, "channels_last": args.channels_last,
            "cudnn_benchmark": on_gpu and args.cudnn_benchmark == "on"}
