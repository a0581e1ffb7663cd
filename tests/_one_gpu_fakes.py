"""Shared by the report tests: the one-GPU steps' measurements stood in by results shaped like
real ones (the host link from the synthetic fixture, a PCIe check, training and wrapper-cost
results), so the steps' own code runs on a machine without a GPU."""
import os

from ddlab.measure import host_link, host_link_torch
from ddlab.system import pcie
from ddlab.training import input_pipeline, one_gpu
from ddlab.training.results import ExperimentResult

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURE = os.path.join(HERE, "fixtures", "hostlink", "synthetic_h100_2node.json")
PROV = {"machine": "test", "gpu_model": "NVIDIA H100 80GB HBM3", "gpu_count": 1, "date": "2026-11-25T00:00:00+00:00"}


def host_result(index=0, scale=1.0):
    with open(FIXTURE) as f:
        r = host_link.parse_output(f.read())
    r.device = dict(r.device, index=index)
    r.link = {"gen": 5, "width": 16}
    r.provenance = dict(PROV)
    for row in r.rows:
        row["gbps"] *= scale
    return r


def training_row(model, precision, ips, **more):
    ms = 512 / ips * 1000
    return dict({"model": model, "precision": precision, "workers": 1, "images_per_s": ips, "global_batch": 512,
                 "step_ms_median": ms, "step_ms_p10": ms, "step_ms_p90": ms, "step_ms_spread": f"{ms:.3f}-{ms:.3f}",
                 "test_accuracy": 0.8, "device": "cuda", "backend": "none", "repeats": 1}, **more)


def one_gpu_result(**kw):
    rows = [training_row(m, p, ips) for m, p, ips in (("cnn", "fp32", 150000.0), ("cnn", "bf16", 180000.0),
                                                      ("mlp-small", "bf16", 900000.0))]
    return ExperimentResult("one-gpu", rows, "live", dict(PROV), [], {"framework": "torch", "launcher": "none",
                                                                      "models": ["cnn", "mlp-small"], "device": "cuda"})


def wrapper_result(**kw):
    rows = [training_row("mlp-small", "bf16", 512 / 0.2e-3, batch=512, wrapper="plain", cost_ms=0.0, cost_share=0.0,
                         buckets=1, cost_per_bucket_ms=None),
            training_row("mlp-small", "bf16", 512 / 0.32e-3, batch=512, wrapper="ddp", cost_ms=0.12, cost_share=0.6,
                         buckets=1, cost_per_bucket_ms=0.12),
            training_row("mlp-small", "bf16", 512 / 0.19e-3, batch=512, wrapper="horovod", cost_ms=-0.01,
                         cost_share=-0.05, buckets=1, cost_per_bucket_ms=-0.01)]
    kw.setdefault("buckets", None)
    seen = {"buckets": kw["buckets"]("mlp-small") if kw["buckets"] else None, **{k: v for k, v in kw.items() if k != "buckets"}}
    WRAPPER_CALLS.append(seen)
    return ExperimentResult("wrapper-cost", rows, "live", dict(PROV), [], {"framework": "torch", "launcher": "none",
                                                                           "model": "mlp-small", "batches": [512],
                                                                           "device": "cuda"})


WRAPPER_CALLS: list = []


def pipeline_result(**kw):
    rows = [{"variant": v, "workers": 1, "images_per_s": x, "step_ms_median": 512 / x * 1000, "speedup": x / 900e3}
            for v, x in (("on the GPU", 900e3), ("pageable", 450e3), ("pinned", 650e3),
                         ("pinned + non_blocking", 850e3))]
    return ExperimentResult("input-pipeline", rows, "live", dict(PROV), [], {"model": "mlp-small", "device": "cuda"})


def patch(monkeypatch, slow_gpu=None):
    """Every one-GPU measurement returns its stand-in; ``slow_gpu``: that GPU's host link at half speed."""
    calls = {"host": [], "load": []}

    def measure(i=0, **kw):
        calls["host"].append((i, kw))
        return host_result(i, 0.5 if i == slow_gpu else 1.0)

    def load(seconds):
        calls["load"].append(seconds)
        return pcie.LoadCheck([pcie.LinkUnderLoad(0, "NVIDIA H100", 5, 16, 1, 16, 5, 16, samples=30)], seconds)
    monkeypatch.setattr(host_link, "measure", measure)
    monkeypatch.setattr(host_link_torch, "pcie_under_load", load)
    monkeypatch.setattr(one_gpu, "single_gpu_throughput", one_gpu_result)
    monkeypatch.setattr(one_gpu, "wrapper_cost", wrapper_result)
    monkeypatch.setattr(input_pipeline, "measure", pipeline_result)
    WRAPPER_CALLS.clear()
    return calls
