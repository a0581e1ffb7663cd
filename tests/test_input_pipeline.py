"""ddlab.training.input_pipeline: the same step fed its batches from the device, pageable and
pinned host memory; on the CPU the code path runs with the CUDA-only variants left out."""
import pytest

from ddlab.training import input_pipeline
from ddlab.training.runs import ExperimentError


def test_the_code_path_on_the_cpu():
    res = input_pipeline.measure(model="mlp-small", batch=32, steps=4, warmup=1, device="cpu", repeats=2)
    assert res.name == "input-pipeline" and [r["variant"] for r in res.rows] == ["on the GPU", "pageable"]
    assert all(r["images_per_s"] > 0 and r["batch_bytes"] == 32 * 784 * 4 for r in res.rows)
    assert res.rows[0]["speedup"] == 1.0 and "pinned memory needs CUDA" in res.notes[1]
    text = res.table()
    assert "the input pipeline over the host link" in text and "batches fed" in text


def test_no_gpu_and_unknown_variants_are_one_line():
    import torch
    if not torch.cuda.is_available():
        with pytest.raises(ExperimentError, match="needs a GPU, and PyTorch sees none"):
            input_pipeline.measure()
    with pytest.raises(ExperimentError, match="unknown variant 'mmap'"):
        input_pipeline.measure(variants=["mmap"], device="cpu")
