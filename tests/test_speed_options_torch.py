"""ddlab.training.speed_options_torch: the options that change how fast a step runs (cuDNN's search,
CPU threads, bf16 autocast, channels-last) and the result fields that record them."""
import argparse

import pytest
import torch

from ddlab.training import models_torch, speed_options_torch


def args(**kw):
    base = dict(cudnn_benchmark="on", cpu_threads=1, channels_last=False, compile="none")
    return argparse.Namespace(**{**base, **kw})


def test_set_up_on_cpu_sets_the_threads():
    threads = torch.get_num_threads()
    try:
        assert speed_options_torch.set_up(args(cpu_threads=1), torch.device("cpu")) == torch.device("cpu")
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(threads)


def test_memory_format():
    assert speed_options_torch.memory_format(args()) is torch.contiguous_format
    assert speed_options_torch.memory_format(args(channels_last=True)) is torch.channels_last


def test_autocast_bf16_and_its_cache_off_while_capturing():
    cpu = torch.device("cpu")
    with speed_options_torch.autocast("fp32", cpu, capturing=lambda: False)():
        assert not torch.is_autocast_enabled("cpu")
    capturing = [True]
    context = speed_options_torch.autocast("bf16", cpu, capturing=lambda: capturing[0])
    with context():
        assert torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16
        assert not torch.is_autocast_cache_enabled()
    capturing[0] = False   # asked at every step: a failed capture turns the cache back on
    with context():
        assert torch.is_autocast_cache_enabled()


def test_for_cpu_evaluation_uses_every_core_and_channels_last_weights():
    threads = torch.get_num_threads()
    model = models_torch.build("cnn")
    try:
        speed_options_torch.for_cpu_evaluation(model)
        assert model[0].weight.is_contiguous(memory_format=torch.channels_last)
    finally:
        torch.set_num_threads(threads)


def test_device_fields_on_cpu():
    fields = speed_options_torch.device_fields(args(channels_last=True, compile="default"), torch.device("cpu"),
                                               False, "off: CUDA graphs need a GPU")
    assert fields == {"device": "cpu", "device_name": None, "cuda_graph": False,
                      "cuda_graph_reason": "off: CUDA graphs need a GPU", "compile": "default",
                      "channels_last": True, "cudnn_benchmark": False}


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_device_fields_and_set_up_on_a_gpu():
    """CPU twin: test_device_fields_on_cpu."""
    dev = speed_options_torch.set_up(args(cudnn_benchmark="off"), torch.device("cuda"))
    assert dev == torch.device("cuda", torch.cuda.current_device()) and torch.backends.cudnn.benchmark is False
    fields = speed_options_torch.device_fields(args(), dev, True, "on")
    assert fields["device"] == "cuda" and fields["device_name"] and fields["cudnn_benchmark"] is True
