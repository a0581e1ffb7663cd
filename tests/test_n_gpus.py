"""The course on machines of more than two GPUs, faked on CPU: what a notebook says it runs with 4 or 8 GPUs
and with CUDA_VISIBLE_DEVICES naming two, the report's plan and its training step on 4 and 8 GPUs, the
provenance of a run on some of a machine's GPUs, and a real all-reduce sweep between 4 CPU processes."""
import pytest

from ddlab.course import sequence
from ddlab.measure import collectives, collectives_run
from ddlab.report import plan as report_plan
from ddlab.report import steps as report_steps
from ddlab.report.context import Context
from ddlab.system import hardware, policy, provenance
from ddlab.training import experiments


def inventory(n):
    return hardware.Inventory(gpus=[hardware.GPU(index=i, name="NVIDIA H200") for i in range(n)])


def machine(n):
    return policy.Machine(gpus=n, label=f"{n}x NVIDIA H200", nvcc=True, software=lambda f, la: (True, ""))


@pytest.mark.parametrize("n", [4, 8])
def test_a_notebook_on_n_gpus_runs_in_the_multi_gpu_mode_and_with_two_visible_as_two(n, monkeypatch):
    live = sequence.live_here(5, inventory(n), usable=n)
    assert f"{n} GPUs" in live and sequence.NOTEBOOKS[5][1]["multi-gpu"] in live
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    two = sequence.live_here(5, inventory(n), usable=2)
    assert "2 GPUs" in two and "CUDA_VISIBLE_DEVICES='0,1'" in two and sequence.NOTEBOOKS[5][1]["multi-gpu"] in two


@pytest.mark.parametrize("n", [4, 8])
def test_the_policy_runs_two_gpu_parts_live_on_n_gpus_and_refuses_more_than_there_are(n):
    assert policy.decide(policy.Needs(gpus=2, framework="torch", launcher="ddp"), machine(n)).live
    assert not policy.decide(policy.Needs(gpus=n + 1), machine(n)).live
    assert experiments._needed_gpus("scaling", (1, 2, 4, 8)) == 8


@pytest.mark.parametrize("n,pairs", [(4, 12), (8, 56)])
def test_the_report_plans_every_directed_pair_all_ranks_and_each_gpus_host_link_within_its_budget(n, pairs):
    for nodes in (1, 2):
        p = report_plan.plan(machine(n), numa_nodes=nodes)
        assert p.p2p["pairs"] == pairs and p.host_link["devices"] == list(range(n))
        assert p.total_s() <= report_plan.FULL_BUDGET_S
        assert p.paths == ["default", "shm", "socket"] and p.train_device == "cuda"


def test_the_report_training_step_on_eight_gpus_runs_on_two_and_says_so(monkeypatch, tmp_path):
    from _experiment_fakes import fake_paths_result
    seen = {}

    def fake(**kw):
        seen.update(kw)
        return fake_paths_result()
    monkeypatch.setattr(experiments, "nccl_path_comparison", fake)
    ctx = Context(str(tmp_path), machine(8), report_plan.plan(machine(8), numa_nodes=1))
    monkeypatch.setattr(ctx, "save_plot", lambda fig, name: name)
    d = report_steps._training(ctx)
    assert seen["workers"] == 2 and d["workers"] == 2 and d["gpus"] == 8
    assert len(d["result"]["notes"]) == len(fake_paths_result().notes) + 2     # the 2-of-8 note added


def test_a_run_on_some_of_the_gpus_records_which(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,5")
    assert provenance.collect("x", inventory=inventory(8))["cuda_visible_devices"] == "0,5"
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert "cuda_visible_devices" not in provenance.collect("x", inventory=inventory(8))


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_a_real_gloo_sweep_between_four_cpu_processes():
    for op in ("all_reduce", "all_gather"):
        r = collectives_run.sweep(op=op, backend="gloo", nproc=4, sizes=[1 << 10, 64 << 10], iters=3, warmup=1,
                                  timeout=300, inventory=hardware.Inventory())
        assert r.nproc == 4 and [row["bytes"] for row in r.rows] == [1 << 10, 64 << 10]
        for row in r.rows:     # busbw = algbw x 2(n-1)/n for all-reduce, (n-1)/n for all-gather, n = 4
            assert row["busbw_gbps"] == pytest.approx(row["algbw_gbps"] * collectives.bus_factor(op, 4))
        assert collectives.bus_factor(op, 4) == pytest.approx(1.5 if op == "all_reduce" else 0.75)


def test_on_a_mesh_the_best_pairs_share_is_of_its_own_links_peak():
    """DGX-1 V100: NV1, NV2 and SYS pairs, so no one link peak holds for every pair."""
    import json
    import os
    import numpy as np
    from ddlab.measure import p2p_diagnosis
    from ddlab.measure.p2p import P2PResult
    from ddlab.system.topology import Topology
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "..", "source_code", "reference", "topologies", "dgx1-v100.json")) as f:
        topo = Topology.from_dict(json.load(f))
    peaks = np.array(report_steps.link_peaks(topo.to_dict(), ["Tesla V100-SXM2-16GB"] * 8), dtype=float)
    slow = min((i, j) for i in range(8) for j in range(8) if i != j and peaks[i, j] == np.nanmin(peaks))
    m = 0.45 * peaks
    m[slow] = 0.95 * peaks[slow]     # the best pair is on the slowest link, near its peak; the others at 45%
    np.fill_diagonal(m, 800.0)
    best = np.unravel_index(np.nanargmax(np.where(np.eye(8, dtype=bool), -1, m)), m.shape)
    assert best == slow
    r = P2PResult(n=8, labels=list(range(8)), variants={"uni_p2p_on:ce:write": m})
    assert p2p_diagnosis.pair_peak(r, peaks, *best) == peaks[best]
    assert p2p_diagnosis.pair_peak(r, peaks, *best) < np.nanmax(np.where(np.eye(8, dtype=bool), np.nan, peaks))
    text = p2p_diagnosis.summary(r, peaks)
    assert f"{100 * m[best] / peaks[best]:.0f}%" in text      # its own link's share, not the fastest link's
    # one peak for every pair (an NVSwitch machine): the same as the single figure
    flat = np.full((8, 8), 300.0)
    assert p2p_diagnosis.pair_peak(r, flat, 0, 1) == p2p_diagnosis.single_link_peak(r, flat) == 300.0


@pytest.mark.parametrize("visible,want", [(None, list(range(8))), ("0,5", [0, 1]), ("", [0])])
def test_the_host_link_recording_measures_the_gpus_cuda_numbers_here(monkeypatch, visible, want):
    import importlib.util
    import os
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools", "recording", "record_host_link.py")
    spec = importlib.util.spec_from_file_location("record_host_link", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    monkeypatch.setattr(hardware, "inventory", lambda **kw: inventory(8))
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert mod.default_devices() == want


def test_capturing_an_nccl_log_on_more_gpus_than_are_visible_stops_before_launching(monkeypatch):
    from ddlab.measure import launch, nccl_capture
    from ddlab.system import frameworks
    monkeypatch.setattr(hardware, "inventory", lambda **kw: inventory(8))
    monkeypatch.setattr(frameworks, "gpu_count", lambda framework="torch": 2)
    monkeypatch.setattr(launch, "run", lambda *a, **kw: pytest.fail("launched"))
    with pytest.raises(RuntimeError) as exc:
        nccl_capture.capture_allreduce_log(nproc=4)
    assert "2" in str(exc.value) and "8" in str(exc.value)


def test_the_report_topology_on_two_of_eight_gpus_is_of_those_two(monkeypatch, tmp_path):
    import json
    import os
    from ddlab.system.topology import Topology
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "..", "source_code", "reference", "topologies", "dgx1-v100.json")) as f:
        rec = json.load(f)
    monkeypatch.setattr(Topology, "from_system", classmethod(lambda cls: Topology.from_dict(rec)))
    monkeypatch.setattr(hardware, "inventory", lambda **kw: inventory(8))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,5")
    ctx = Context(str(tmp_path), machine(2), report_plan.plan(machine(2), numa_nodes=1))
    monkeypatch.setattr(ctx, "save_plot", lambda fig, name: name)
    d = report_steps._topology(ctx)
    assert d["topology"]["gpus"] == [0, 5] and list(d["best_subsets"]) == ["2"]
    # the link peaks of the two measured GPUs, as the p2p and all-reduce steps read them (2 x 2)
    peaks = report_steps.link_peaks(d["topology"], ["Tesla V100-SXM2-16GB"] * 2)
    assert peaks is not None and len(peaks) == 2
