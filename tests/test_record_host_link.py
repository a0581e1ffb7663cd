"""tools/recording/record_host_link.py: the dry run on a machine without a GPU (every GPU part
skipped with its reason, exit 0) and the GPU path with its measurements stood in."""
import json
import os
import sys

import pytest

import _one_gpu_fakes
from ddlab.cost import step_model
from ddlab.system import policy

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tools", "recording"))
import record_host_link  # noqa: E402


@pytest.fixture(autouse=True)
def _machine_name_restored(monkeypatch):
    monkeypatch.setenv("DDLAB_MACHINE", "")     # recorded first, so that monkeypatch removes what the code sets
    monkeypatch.delenv("DDLAB_MACHINE")


def test_the_dry_run_skips_each_gpu_part_with_its_reason(tmp_path, monkeypatch, capsys):
    from ddlab.measure import host_link_torch, p2p_run
    monkeypatch.setattr(p2p_run, "gpu_visible", lambda: False)

    def no_gpu():
        raise host_link_torch.NoGPU("skipped: no GPU visible to PyTorch")
    monkeypatch.setattr(host_link_torch, "_torch", no_gpu)
    monkeypatch.setattr(policy.Machine, "detect", classmethod(lambda cls: policy.Machine(gpus=0)))
    assert record_host_link.main([str(tmp_path)]) == 0
    got = json.loads((tmp_path / "record_host_link.json").read_text())
    assert {k: v["status"] for k, v in got["parts"].items()} == dict.fromkeys(record_host_link.PARTS, "skipped")
    assert all(v["why"].startswith("skipped: ") and "\n" not in v["why"] for v in got["parts"].values())
    assert got["provenance"]["command"].startswith("tools/recording/record_host_link.py")
    out = capsys.readouterr().out
    assert "compiled: skipped: no NVIDIA GPU is visible" in out and "training: skipped: it needs 1 GPU" in out


def test_the_gpu_path_writes_each_part_with_provenance(tmp_path, monkeypatch):
    from ddlab.measure import host_link
    _one_gpu_fakes.patch(monkeypatch)
    monkeypatch.setattr(host_link, "run_compiled", lambda i, timeout: _one_gpu_fakes.host_result(i))
    monkeypatch.setattr(host_link, "measure_torch", lambda i: _one_gpu_fakes.host_result(i))
    monkeypatch.setattr(policy.Machine, "detect", classmethod(
        lambda cls: policy.Machine(gpus=1, software=lambda f, la: (True, ""))))
    assert record_host_link.main([str(tmp_path), "--devices", "0", "--batches", "32,512"]) == 0
    for name in ("hostlink-compiled-gpu0.json", "hostlink-torch-gpu0.json", "pcie-load.json",
                 "one-gpu-torch-none.json", "wrapper-cost-torch.json", "input-pipeline-torch-none.json"):
        assert json.loads((tmp_path / name).read_text())["provenance"], name
    assert _one_gpu_fakes.WRAPPER_CALLS[0]["batches"] == [32, 512]
    assert _one_gpu_fakes.WRAPPER_CALLS[0]["buckets"] == step_model.bucket_count("mlp-small")


def test_a_failing_part_is_reported_and_the_others_still_run(tmp_path, monkeypatch):
    from ddlab.measure import host_link
    _one_gpu_fakes.patch(monkeypatch)

    def broken(i, timeout):
        raise host_link.HostLinkError("the host-link test failed (exit 1):\nCUDA error")
    monkeypatch.setattr(host_link, "run_compiled", broken)
    assert record_host_link.main([str(tmp_path), "--parts", "compiled,pcie", "--devices", "0"]) == 1
    got = json.loads((tmp_path / "record_host_link.json").read_text())["parts"]
    assert got["compiled"] == {"status": "failed", "why": "HostLinkError: the host-link test failed (exit 1):",
                               "seconds": got["compiled"]["seconds"]}
    assert got["pcie"]["status"] == "done"


def test_unknown_parts_are_refused(tmp_path):
    with pytest.raises(SystemExit):
        record_host_link.main([str(tmp_path), "--parts", "compiled,nbody"])
