"""`ddlab report` on one GPU: the host link per NUMA node, the PCIe check under load, one GPU's
training and the wrapper's cost (their measurements stood in, see _one_gpu_fakes); the 2-GPU
steps skipped with their reason; each GPU step skipped in one line without a GPU; the plan
within three minutes; --compare with a recorded machine."""
import html
import json
import os

import pytest

import _one_gpu_fakes
from ddlab.base import reference
from ddlab.cost import step_model
from ddlab.report import html_page, one_gpu_steps, plan as report_plan, runner, steps as report_steps
from ddlab.system import hardware, policy

OK = lambda framework, launcher: (True, "")  # noqa: E731
NO_HOROVOD = lambda framework, launcher: (launcher != "horovod", "Horovod is not installed")  # noqa: E731


def one_gpu_machine(nvcc=True, software=OK):
    return policy.Machine(gpus=1, label="1x NVIDIA H100 80GB HBM3", nvcc=nvcc, software=software)


def test_a_one_gpu_machine_measures_its_gpu_and_skips_the_pair_steps(tmp_path, monkeypatch, capsys):
    calls = _one_gpu_fakes.patch(monkeypatch)
    monkeypatch.setattr(hardware, "inventory", lambda **kw: hardware.Inventory(
        gpus=[hardware.GPU(0, "NVIDIA H100 80GB HBM3", numa_node=0)], torch="2", nvcc="13"))
    monkeypatch.setattr(report_steps, "_topology", lambda ctx: (_ for _ in ()).throw(report_steps.Skip("not here")))
    out = tmp_path / "rep"
    assert runner.main(out=str(out), machine=one_gpu_machine(), compare="h200x2") == 0
    recs = html_page.read_folder(str(out))
    status = {k: r["status"] for k, r in recs.items()}
    assert status == {"doctor": "done", "topology": "skipped", "host-link": "done", "pcie-load": "done",
                      "p2p": "skipped", "allreduce": "skipped", "training": "skipped", "one-gpu-training": "done",
                      "wrapper-cost": "done"}
    assert "one GPU: an all-reduce needs 2 GPUs" in recs["allreduce"]["why"]
    assert "one GPU: the NCCL-path comparison needs 2 GPUs" in recs["training"]["why"]
    # sized by the plan: the full sweep from 4 KiB to 1 GiB on the only GPU, every NUMA node
    (i, kw), = calls["host"]
    assert i == 0 and kw["sizes"][0] == 4096 and kw["sizes"][-1] == 1 << 30
    assert calls["load"] == [report_plan.PCIE_LOAD_COPY_S]
    assert _one_gpu_fakes.WRAPPER_CALLS[0]["buckets"] == step_model.bucket_count("mlp-small") >= 1
    text = capsys.readouterr().out
    assert "h2d % raw" in text and "87%" in text and "This GPU beside the recorded 2-GPU runs" in text
    assert "cost ms/step" in text
    page = html.unescape((out / "report.html").read_text())
    summary = page.split('<section id="summary">', 1)[1].split("</section>", 1)[0]
    assert "pinned, NUMA node 0 (the GPU's), from 256 MiB up: h2d 55.0 GB/s (87%)" in summary
    assert "pinned h2d from NUMA node 1: 41.5 GB/s, 0.75x node 0's" in page
    assert "every link at its maximum" in summary and "ddp at batch 512: +0.120 ms a step (60%" in summary
    assert "horovod (a control: no hooks with one worker) at batch 512: -0.010 ms a step" in summary
    from ddlab.report import one_gpu_page
    assert one_gpu_page._wrapper_name("horovod-hooks") == "horovod with its hooks on (one worker)"
    assert one_gpu_page._wrapper_name("ddp") == "ddp"
    compare = page.split('<section id="compare">', 1)[1].split("</section>", 1)[0]
    assert "host link host->GPU pinned" in compare and "one GPU images/s, cnn bf16" in compare


def test_without_a_gpu_each_gpu_step_is_skipped_in_one_line(tmp_path):
    steps = [s for s in report_steps.STEPS if s.name in ("host-link", "pcie-load", "one-gpu-training", "wrapper-cost")]
    m = policy.Machine(gpus=0, label="CPU only", nvcc=True, software=OK)
    assert runner.main(out=str(tmp_path / "rep"), machine=m, steps=steps) == 0
    for s in steps:
        rec = json.loads((tmp_path / "rep" / f"{s.name}.json").read_text())
        assert rec["status"] == "skipped" and rec["why"].startswith("it needs 1 GPU(s) and") and "\n" not in rec["why"]


def test_quick_leaves_out_the_training_and_says_so(tmp_path, monkeypatch):
    _one_gpu_fakes.patch(monkeypatch)
    steps = [s for s in report_steps.STEPS if s.name in ("host-link", "one-gpu-training", "wrapper-cost")]
    assert runner.main(out=str(tmp_path / "rep"), machine=one_gpu_machine(), steps=steps, quick=True) == 0
    recs = html_page.read_folder(str(tmp_path / "rep"))
    assert recs["host-link"]["status"] == "done"
    assert recs["host-link"]["data"]["sizing"]["sizes"] == list(report_plan.HOST_SIZES_SHORT)
    assert all("--quick" in recs[s]["why"] for s in ("one-gpu-training", "wrapper-cost"))


@pytest.mark.parametrize("nodes", [1, 2, 4])
@pytest.mark.parametrize("built", [True, False])
@pytest.mark.parametrize("software", [OK, NO_HOROVOD])
@pytest.mark.parametrize("nvcc", [True, False])
def test_a_full_report_on_one_gpu_fits_three_minutes_by_design(nodes, built, software, nvcc):
    pl = report_plan.plan(one_gpu_machine(nvcc, software), quick=False, p2p_built=built, host_built=built,
                          numa_nodes=nodes)
    assert pl.total_s() <= report_plan.ONE_GPU_BUDGET_S == 180
    assert set(pl.estimates) == {s.name for s in report_steps.STEPS}
    assert pl.estimates["p2p"] == pl.estimates["allreduce"] == pl.estimates["training"] == 0
    assert all(pl.estimates[s] > 0 for s in ("host-link", "pcie-load", "one-gpu-training", "wrapper-cost"))
    assert pl.host_link["devices"] == [0] and pl.host_link["method"] == ("compiled" if nvcc else "torch")
    assert pl.one_gpu["models"] == ["cnn", "mlp-small", "mlp-large"] and pl.wrapper["models"] == ["mlp-small"]
    assert set(pl.trims) <= set(report_plan.TRIMS)


def test_the_plan_gives_up_the_optional_parts_in_order_and_says_which():
    roomy = report_plan.plan(one_gpu_machine(), numa_nodes=1)
    assert roomy.trims == [] and roomy.wrapper["wrappers"] == ["plain", "ddp", "horovod"]
    assert roomy.wrapper["batches"] == [32, 128, 512] and roomy.one_gpu["precisions"] == ["fp32", "bf16"]
    assert roomy.host_link["sizes"] == list(report_plan.HOST_SIZES) and roomy.host_link["seconds_per_row"] == 0.1
    tight = report_plan.plan(one_gpu_machine(), numa_nodes=4, host_built=False)
    assert tight.trims == list(report_plan.TRIMS[:len(tight.trims)]) and tight.trims
    assert tight.host_link["seconds_per_row"] == 0.05


def test_several_gpus_measure_every_host_link_with_the_short_sweep():
    pl = report_plan.plan(policy.Machine(gpus=8, label="x", nvcc=True, software=OK), numa_nodes=2)
    assert pl.host_link["devices"] == list(range(8)) and pl.host_link["sizes"] == list(report_plan.HOST_SIZES_SHORT)
    assert pl.total_s() <= report_plan.FULL_BUDGET_S


def test_no_gpu_plans_none_of_the_one_gpu_steps():
    pl = report_plan.plan(policy.Machine(gpus=0, software=OK))
    assert pl.host_link is None and pl.one_gpu is None and pl.budget_s is None
    assert all(pl.estimates[s] == 0 for s in ("host-link", "pcie-load", "one-gpu-training", "wrapper-cost"))


def test_compare_with_a_recorded_host_link(tmp_path, monkeypatch):
    r = _one_gpu_fakes.host_result()
    (tmp_path / "hostlink").mkdir()
    (tmp_path / "hostlink" / "h100x1.json").write_text(json.dumps(r.to_dict()))
    monkeypatch.setattr(reference, "REFERENCE_DIR", str(tmp_path))
    other = html_page.load_other("h100x1")
    assert other["source"] == "recorded h100x1" and other["steps"]["host-link"]["status"] == "done"
    assert "H100" in other["label"]
    figures = html_page.key_figures(other["steps"])
    assert figures["hl:pinned:h2d"][2] == 55.0 and figures["hl:lat"][2] == pytest.approx(3.1)
    t = html_page.compare_table({}, other)
    assert any(row["figure"].startswith("host link host->GPU pinned") for row in t.rows)
    with pytest.raises(ValueError, match="h100x1"):
        html_page.load_other("nothing-like-it")
