"""The report's steps that one GPU is enough for (a one-GPU machine is a topology too):

* ``host-link`` - host <-> GPU bandwidth and latency, pinned and pageable, from each NUMA node,
  for every GPU (:mod:`ddlab.measure.host_link`: the compiled test where ``nvcc`` is, else
  PyTorch, labelled); on several GPUs a table sets them side by side so a GPU behind a slower
  link, or on the other NUMA node, stands out;
* ``pcie-load`` - each GPU's PCIe generation and width read while a copy runs
  (:func:`ddlab.measure.host_link_torch.pcie_under_load`), a link below its maximum flagged;
* ``one-gpu-training`` - single-GPU images/s of the CNN and the seed-sized MLPs, fp32 and bf16
  (:func:`ddlab.training.one_gpu.single_gpu_throughput`), beside the recorded 2-GPU runs;
* ``wrapper-cost`` - the step under DDP (and Horovod) with one worker against the plain step
  (:func:`ddlab.training.one_gpu.wrapper_cost`), per step and per DDP gradient bucket
  (:func:`ddlab.cost.step_model.gradient_buckets`).

Each raises :class:`~ddlab.report.context.Skip` with one line where this machine cannot run it
(no GPU, no PyTorch, ``--quick``); what they measure is sized by :mod:`ddlab.report.plan`.
"""
from __future__ import annotations

from ddlab.cost import step_model
from ddlab.report.context import Context, Skip, Step
from ddlab.report.plan import PCIE_LOAD_COPY_S
from ddlab.system import policy


def _need_gpu(ctx: Context, framework=None, launcher=None) -> None:
    decision = policy.decide(policy.Needs(gpus=1, framework=framework, launcher=launcher), ctx.machine)
    if not decision.live:
        raise Skip(decision.why)


def _host_link(ctx: Context) -> dict:
    from ddlab.measure import host_link
    from ddlab.views import host_link_plots
    _need_gpu(ctx)
    hl = ctx.plan.host_link
    if not hl:
        raise Skip("it needs nvcc (to build the compiled test) or PyTorch with CUDA (for the torch measurement)")
    results, errors = [], {}
    for i in hl["devices"]:
        try:
            results.append(host_link.measure(i, sizes=hl["sizes"], seconds_per_row=hl["seconds_per_row"]))
        except host_link.HostLinkNoGPU as exc:
            raise Skip(str(exc).removeprefix("skipped: ")) from None
        except (host_link.HostLinkError, ValueError) as exc:
            errors[str(i)] = str(exc).splitlines()[0]
    if not results:
        raise RuntimeError("the host-link test failed on every GPU: " + "; ".join(errors.values()))
    d = {"results": [r.to_dict() for r in results], "errors": errors, "sizing": hl,
         "summary": {str(r.device.get("index")): host_link.summary(r) for r in results}}
    plots = []
    for r in results:
        ax = host_link_plots.plot(r)
        plots.append(ctx.save_plot(ax.figure, f"host_link_gpu{r.device.get('index', 0)}.png"))
    d["plots"] = plots
    return d


def _pcie_load(ctx: Context) -> dict:
    from ddlab.measure import host_link_torch
    _need_gpu(ctx, "torch", "none")
    try:
        check = host_link_torch.pcie_under_load(seconds=PCIE_LOAD_COPY_S)
    except host_link_torch.NoGPU as exc:
        raise Skip(str(exc).removeprefix("skipped: ")) from None
    except RuntimeError as exc:           # no NVML: the links cannot be read
        raise Skip(str(exc).splitlines()[0]) from None
    return check.to_dict()


def _one_gpu_training(ctx: Context) -> dict:
    from ddlab.training import one_gpu
    pl = ctx.plan
    if pl.quick:
        raise Skip("--quick (a preflight) leaves out the training; run without --quick for it")
    _need_gpu(ctx, "torch", "none")
    if not pl.one_gpu:
        raise Skip("PyTorch cannot run the training here")
    res = one_gpu.single_gpu_throughput(models=pl.one_gpu["models"], precisions=pl.one_gpu["precisions"],
                                        device="cuda", repeats=1)     # once: the report keeps to its time plan
    res.notes.append("each configuration run once, on GPU 0")
    d = {"result": res.to_dict()}
    ax = res.plot()
    d["plots"] = [ctx.save_plot(ax.figure, "one_gpu_training.png")]
    return d


def _wrapper_cost(ctx: Context) -> dict:
    from ddlab.training import one_gpu
    pl = ctx.plan
    if pl.quick:
        raise Skip("--quick (a preflight) leaves out the wrapper's cost; run without --quick for it")
    _need_gpu(ctx, "torch", "ddp")
    if not pl.wrapper:
        raise Skip("PyTorch's DDP cannot run here")
    res = one_gpu.wrapper_cost(models=pl.wrapper["models"], batches=pl.wrapper["batches"],
                               wrappers=pl.wrapper["wrappers"], device="cuda", buckets=step_model.bucket_count)
    res.notes.append("buckets: DDP's default bucketing of the model's gradients (ddlab.cost.step_model)")
    if pl.trims:
        res.notes.append("left out to keep the report within its time: " + "; ".join(pl.trims))
    return {"result": res.to_dict()}


LINK_STEPS = [Step("host-link", "Host link: host <-> GPU bandwidth and latency per NUMA node", _host_link),
              Step("pcie-load", "PCIe links under load", _pcie_load)]
TRAINING_STEPS = [Step("one-gpu-training", "One GPU: training throughput per model and precision", _one_gpu_training),
                  Step("wrapper-cost", "One GPU: the data-parallel wrapper's own cost per step", _wrapper_cost)]
