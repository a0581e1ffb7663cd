"""The steps of ``ddlab report``, each a function of the :class:`~ddlab.report.context.Context`
that returns its data (JSON-able) or raises :class:`~ddlab.report.context.Skip` with the reason
this machine cannot run it: doctor, topology, the host link and the PCIe check under load
(:mod:`ddlab.report.one_gpu_steps`), our p2p test, the all-reduce sweep per NCCL path, the
training experiment, and one GPU's training and wrapper cost (:mod:`ddlab.report.one_gpu_steps`).
The data helpers the HTML page shows (:func:`topology_data`, :func:`link_peaks`,
:func:`p2p_data`) live here too; :mod:`ddlab.report.runner` runs the steps and
:mod:`ddlab.report.html_page` draws their data.
"""
from __future__ import annotations

from typing import Optional

from ddlab.report import one_gpu_steps
from ddlab.report.context import Context, Skip, Step  # noqa: F401  (the runner and tests name them here)
from ddlab.system import policy


def _doctor(ctx: Context) -> dict:
    from ddlab.report import doctor
    from ddlab.system import hardware
    from ddlab.training import data
    # `horovodrun --check-build` imports every framework (seconds to minutes on a busy machine):
    # a preflight leaves it out and says so.
    inv = hardware.inventory(horovod_check=not ctx.plan.quick)
    ctx._inventory = inv
    warnings = list(inv.notes)
    if ctx.plan.quick and inv.horovod:
        warnings.append("Horovod's build was not checked (--quick leaves out `horovodrun --check-build`; "
                        "ddlab doctor runs it)")
    dataset = data.dataset_status()
    if not dataset.startswith("ok"):
        warnings.append(f"Fashion-MNIST: {dataset} (get it with: ddlab data)")
    if inv.gpus and not inv.nvcc:
        warnings.append("nvcc (the CUDA compiler) was not found: the p2p test cannot be built")
    if inv.gpus and not inv.torch:
        warnings.append("PyTorch is not installed: the all-reduce sweep and the training cannot run")
    return {"inventory": doctor.doctor_dict(inv, dataset), "warnings": warnings}


def _topology(ctx: Context) -> dict:
    from ddlab.system import topology
    if ctx.topo_file:
        topo = topology.Topology.from_file(ctx.topo_file)
        source = f"read from {ctx.topo_file}"
    else:
        decision = policy.decide(policy.Needs(gpus=1), ctx.machine)
        if not decision.live:
            raise Skip(f"{decision.why}, so there is no nvidia-smi topo -m to read "
                       "(pass --topo-file FILE to read a saved one)")
        from ddlab.system import gpu_pairs
        try:
            whole = topology.Topology.from_system()
        except topology.NoGPUError as exc:
            raise Skip(str(exc).split(" To explore")[0]) from None
        topo = gpu_pairs.visible_topology(whole)      # the GPUs the other steps measure
        source = "nvidia-smi topo -m on this machine" + (
            f", the {len(topo.gpus)} of its {len(whole.gpus)} GPUs CUDA_VISIBLE_DEVICES names"
            if len(topo.gpus) < len(whole.gpus) else "")
    d = topology_data(topo)
    d["source"] = source
    if len(topo.gpus) >= 1:
        from ddlab.views import topology_drawing
        d["plots"] = [ctx.save_plot(topology_drawing.draw(topo).figure, "topology.png")]
    return d


def topology_data(topo) -> dict:
    """A topology's facts as the report keeps them: the parsed matrix, ranked pairs and the best
    subset for every k (whatever :func:`ddlab.system.topology_ranking.best_subset` ranks by)."""
    from ddlab.system import topology_ranking, topology_report
    n = len(topo.gpus)
    d = {"topology": topo.to_dict(), "summary": topology_report.summary(topo), "text": topology_report.report(topo)}
    d["ranked_pairs"] = [g.to_dict() for g in topology_ranking.ranked_pairs(topo)] if n >= 2 else []
    d["best_subsets"] = {str(k): topology_ranking.best_subset(topo, k).to_dict() for k in range(2, n + 1)}
    return d


def nvlink_generation(gpu_names) -> Optional[int]:
    """The NVLink generation of these GPUs, from the catalogue's GPU column in :mod:`ddlab.system.links`
    ("H100/H200" -> 4); None when no catalogue entry names them."""
    from ddlab.system import links
    return links.nvlink_generation_of(gpu_names)


def link_peaks(topo_dict: Optional[dict], gpu_names) -> Optional[list]:
    """Per-pair link peak (GB/s per direction, from :mod:`ddlab.system.links`) from a topology's labels; None when unknown."""
    from ddlab.measure import p2p_diagnosis
    from ddlab.system import topology
    if not topo_dict:
        return None
    topo = topology.Topology.from_dict(topo_dict)
    gpus = topo.gpus
    labels = [["X" if i == j else topo.link(i, j).label for j in gpus] for i in gpus]
    try:
        peaks = p2p_diagnosis.link_peaks(labels, nvlink_generation=nvlink_generation(gpu_names))
    except ValueError:
        return None
    return [[None if x != x else float(x) for x in row] for row in peaks]


def p2p_data(result, peaks) -> dict:
    """The p2p result and its reading: slowest link, asymmetric pairs, outlier GPUs."""
    import numpy as np
    from ddlab.measure import p2p_diagnosis
    m = result.matrices.get("uni_p2p_on", result.matrices.get("uni_p2p_off"))
    d = {"result": result.to_dict(), "link_peak_gbps": peaks,
         "summary": p2p_diagnosis.summary(result, None if peaks is None else np.array(peaks, dtype=float))}
    if m is not None and result.n >= 2:
        worst = p2p_diagnosis.extreme(m, result.labels, best=False)
        best = p2p_diagnosis.extreme(m, result.labels, best=True)
        d["slowest"] = {"gbps": worst[0], "src": worst[1], "dst": worst[2]} if worst else None
        d["fastest"] = {"gbps": best[0], "src": best[1], "dst": best[2]} if best else None
        d["asymmetric"] = [list(a) for a in p2p_diagnosis.asymmetric_pairs(m, result.labels)]
        d["outliers"] = [list(o) for o in p2p_diagnosis.outlier_gpus(m, result.labels)]
    return d


def _p2p(ctx: Context) -> dict:
    import numpy as np
    from ddlab.measure import p2p_run
    from ddlab.views import p2p_plots
    decision = policy.decide(policy.Needs(gpus=2, nvcc=True), ctx.machine)
    if not decision.live:
        raise Skip(decision.why)
    s = ctx.plan.p2p
    topo = ctx.data("topology")
    names = [g["name"] for g in ((ctx.data("doctor") or {}).get("inventory") or {}).get("gpus", [])]
    peaks = link_peaks(topo["topology"] if topo else None, names)
    result = p2p_run.run(size=s["size"], reps=s["reps"], copy=s["copy"], latency_reps=s["latency_reps"],
                         timeout=max(300.0, 3 * s["seconds"]))
    if peaks is not None and len(peaks) != result.n:     # a --topo-file of another machine
        peaks = None
    d = p2p_data(result, peaks)
    d["sizing"] = s
    fig = p2p_plots.plot_heatmaps(result, link_peak_gbps=None if peaks is None else np.array(peaks, dtype=float),
                                  keys=[k for k in ("uni_p2p_on", "bi_p2p_on", "lat_gpu_p2p_on")
                                        if k in result.matrices])
    d["plots"] = [ctx.save_plot(fig, "p2p.png")]
    return d


def _allreduce(ctx: Context) -> dict:
    from ddlab.measure import collectives, collectives_run, launch
    from ddlab.views import sweep_plots
    pl = ctx.plan
    multi = policy.decide(policy.Needs(gpus=2, framework="torch", launcher="ddp"), ctx.machine)
    ok, why = ctx.machine.software("torch", "ddp")
    if not multi.live and not ok:
        raise Skip(why)
    if not multi.live and ctx.machine.gpus == 1:
        raise Skip(ONE_GPU_WHY.format(what="an all-reduce"))
    note = None if multi.live else (f"NCCL paths not measured: {multi.why}; gloo on 2 CPU processes instead "
                                    "(gloo ignores the NCCL variables, so only 'default' applies)")
    sweeps, errors = [], {}
    for path in pl.paths:
        try:
            sweeps.append(collectives_run.sweep(backend=pl.sweep_backend, path=path, sizes=pl.sweep_sizes,
                                                nproc=None if multi.live else 2, inventory=ctx.inventory()))
        except (launch.LaunchError, collectives.CollectiveValidationError, ValueError) as exc:
            errors[path] = str(exc).splitlines()[0]
    if not sweeps:
        raise RuntimeError("every sweep failed: " + "; ".join(f"{k}: {v}" for k, v in errors.items()))
    topo = ctx.data("topology")
    names = [g["name"] for g in ((ctx.data("doctor") or {}).get("inventory") or {}).get("gpus", [])]
    peaks = link_peaks(topo["topology"] if topo else None, names) if multi.live else None
    d = {"backend": pl.sweep_backend, "sweeps": collectives.results_to_json(sweeps), "errors": errors,
         "note": note, "link_peak_gbps": slowest_peak(peaks)}
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4))
    sweep_plots.plot_sweep({s.label: s for s in sweeps}, ax=ax)
    if d["link_peak_gbps"]:
        ax.axhline(d["link_peak_gbps"], color="grey", linestyle=":", linewidth=1,
                   label="slowest link's peak per direction")
        ax.legend(fontsize="small")
    d["plots"] = [ctx.save_plot(fig, "allreduce.png")]
    return d


def slowest_peak(peaks) -> Optional[float]:
    """The lowest per-pair link peak: what a ring all-reduce's bus bandwidth is bounded by."""
    vals = [x for row in (peaks or []) for x in row if x]
    return min(vals) if vals else None


def _training(ctx: Context) -> dict:
    from ddlab.training import experiments
    pl = ctx.plan
    if pl.train_device is None:
        if pl.quick:
            raise Skip("--quick (a preflight) leaves out the training comparison; run without --quick for it")
        if ctx.machine.gpus == 1:
            raise Skip(ONE_GPU_WHY.format(what="the NCCL-path comparison"))
        decision = policy.decide(policy.Needs(gpus=0, framework="torch", launcher="ddp"), ctx.machine)
        raise Skip(decision.why or "PyTorch cannot run distributed training here")
    res = experiments.nccl_path_comparison(device=pl.train_device, paths=pl.train_paths, workers=2, repeats=1)
    if pl.train_device == "cpu":
        res.notes.insert(0, "no 2 GPUs here: a small real run on 2 CPU processes with gloo")
    elif pl.gpus > 2:      # the course's two-GPU comparison, so that --compare sets like beside like
        res.notes.insert(0, f"run on GPUs 0 and 1 of this machine's {pl.gpus}, as the course's two-GPU comparison "
                            "(tools/recording/record_scaling.py scales over all of them)")
    res.notes.append("each configuration run once (ddlab experiment nccl-paths repeats them for a median)")
    d = {"result": res.to_dict(), "device": pl.train_device, "workers": 2, "gpus": pl.gpus}
    ax = res.plot()
    d["plots"] = [ctx.save_plot(ax.figure, "training.png")]
    return d


ONE_GPU_WHY = ("one GPU: {what} needs 2 GPUs (a machine without a GPU runs a stand-in on 2 CPU processes "
               "with gloo); the one-GPU steps measure this GPU instead")

STEPS = [Step("doctor", "Doctor: what this machine has", _doctor),
         Step("topology", "Topology: nvidia-smi topo -m", _topology),
         *one_gpu_steps.LINK_STEPS,
         Step("p2p", "Our p2p test: bandwidth and latency per GPU pair", _p2p),
         Step("allreduce", "All-reduce sweep under each NCCL path", _allreduce),
         Step("training", "Fashion-MNIST training under each NCCL path", _training),
         *one_gpu_steps.TRAINING_STEPS]
