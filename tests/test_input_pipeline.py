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


def _row(variant, ips, lo, hi):
    return {"variant": variant, "workers": 1, "images_per_s": ips, "images_per_s_min": lo, "images_per_s_max": hi,
            "step_ms_median": 1.0, "repeats": 3}


def test_a_host_fed_variant_faster_than_the_batch_on_the_gpu_is_flagged_with_its_spread():
    from ddlab.training import result_notes
    from ddlab.training.results import ExperimentResult
    base = _row("on the GPU", 100.0, 90.0, 110.0)
    overlap = ExperimentResult("input-pipeline", [base, _row("pinned", 95.0, 80.0, 99.0),
                                                  _row("pinned + non_blocking", 105.0, 100.0, 112.0)])
    notes = [n for n in overlap.table_notes() if "copy cannot" in n]
    assert len(notes) == 1 and notes[0].startswith("pinned + non_blocking ran 1.05x")
    assert "within the run-to-run spread" in notes[0]
    beyond = result_notes.faster_than_on_gpu([base, _row("pinned + non_blocking", 130.0, 120.0, 140.0)])
    assert len(beyond) == 1 and "beyond the spread" in beyond[0]
    # slower than the baseline, or no baseline: nothing to flag
    assert result_notes.faster_than_on_gpu([base, _row("pageable", 70.0, 60.0, 80.0)]) == []
    assert result_notes.faster_than_on_gpu([_row("pageable", 70.0, 60.0, 80.0)]) == []
