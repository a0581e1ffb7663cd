"""What the report shows of its one-GPU steps (:mod:`ddlab.report.one_gpu_steps`): their tables,
the summary's findings, the figures ``--compare`` sets beside another machine's, and a recorded
host-link measurement as a step of a recorded machine. :mod:`ddlab.report.html_page` calls these
for the steps named in :data:`STEPS`; like it, they read only the steps' records.
"""
from __future__ import annotations

from ddlab.base import units
from ddlab.report.context import done_data

STEPS = ("host-link", "pcie-load", "one-gpu-training", "wrapper-cost")


def _host_results(data: dict) -> list:
    from ddlab.measure.host_link import HostLinkResult
    return [HostLinkResult.from_json(r) for r in data.get("results", [])]


def _result(data: dict):
    from ddlab.training.results import ExperimentResult
    return ExperimentResult.from_dict(data["result"])


def tables(name: str, data: dict) -> list:
    """The tables one of the one-GPU steps shows (the same in the page and in the terminal)."""
    if name == "host-link":
        from ddlab.measure import host_link
        results = _host_results(data)
        out = [host_link.gpus_table(results)] if len(results) > 1 else []
        for r in results:
            out += [host_link.table(r), host_link.latency_table(r)]
        return out
    if name == "pcie-load":
        from ddlab.system.pcie import LoadCheck
        return [LoadCheck.from_dict(data).table()]
    if name == "one-gpu-training":
        from ddlab.training import one_gpu
        res = _result(data)
        return [res.as_table(), one_gpu.beside_recorded(res)]
    if name == "wrapper-cost":
        return [_result(data).as_table()]
    return []


def texts(name: str, data: dict) -> list:
    """The lines above a step's tables."""
    if name == "host-link":
        out = []
        for gpu, lines in (data.get("summary") or {}).items():
            out.append(f"GPU {gpu}: " + "; ".join(lines))
        out += [f"GPU {g} failed: {e}" for g, e in (data.get("errors") or {}).items()]
        s = data.get("sizing") or {}
        if s:
            out.append(f"{len(s.get('sizes', []))} sizes from {units.format_bytes(min(s['sizes']))} to "
                       f"{units.format_bytes(max(s['sizes']))}, about {s.get('seconds_per_row')} s of copies per row")
        return out
    if name == "pcie-load":
        return (data.get("flagged") or ["every link reached its maximum generation and width under load"]) + \
            ([f"the load failed: {data['error']}"] if data.get("error") else []) + list(data.get("notes") or [])
    return []


def summary_items(steps: dict) -> list:
    """[(topic, finding, css class)] for the summary at the top of the page."""
    items = []
    hl = done_data(steps.get("host-link"))
    if hl:
        from ddlab.measure import host_link
        results = _host_results(hl)
        for r in results:
            lines = host_link.summary(r)
            items.append((f"Host link, GPU {r.device.get('index')}", lines[0] if lines else "measured", ""))
        if len(results) > 1:
            for row in host_link.gpus_table(results).rows:
                if row["flag"] != "-":
                    items.append((f"Host link, GPU {row['gpu']}", row["flag"], "warning"))
        for r in results:
            if not r.numa.get("supported", True):
                items.append(("NUMA", "no NUMA information in this kernel: one node measured", "warning"))
                break
    load = done_data(steps.get("pcie-load"))
    if load:
        flagged = load.get("flagged") or []
        items += [("PCIe under load", f, "warning") for f in flagged] or \
                 [("PCIe under load", "every link at its maximum generation and width while a copy ran", "")]
    tr = done_data(steps.get("one-gpu-training"))
    if tr:
        rows = [r for r in tr["result"]["rows"] if not r.get("error")]
        items.append(("One GPU, images/s", "; ".join(f"{r['model']} {r['precision']} "
                                                     f"{units.format_count(r['images_per_s'])}" for r in rows), ""))
    wc = done_data(steps.get("wrapper-cost"))
    if wc:
        parts = [f"{_wrapper_name(r['wrapper'])} at batch {r['batch']}: {r['cost_ms']:+.3f} ms a step "
                 f"({units.format_percent(r['cost_share'])} of the plain step"
                 + (f", {r['cost_per_bucket_ms']:.3f} ms per bucket" if r.get("cost_per_bucket_ms") is not None
                    else "") + ")"
                 for r in wc["result"]["rows"] if not r.get("error") and r.get("wrapper") != "plain"
                 and r.get("cost_ms") is not None]
        if parts:
            model = wc["result"]["rows"][0].get("model")
            items.append((f"Wrapper's cost on one worker ({model})", "; ".join(parts), ""))
    return items


def _wrapper_name(wrapper: str) -> str:
    """Horovod with one worker registers no gradient hooks: its row is a control, not a cost; the
    horovod-hooks row is Horovod with its hooks on at size 1, its own cost."""
    return {"horovod": "horovod (a control: no hooks with one worker)",
            "horovod-hooks": "horovod with its hooks on (one worker)"}.get(wrapper, wrapper)


def key_figures(steps: dict) -> dict:
    """{key: (figure, unit, value)}: the one-GPU figures two machines are compared on."""
    out = {}
    hl = done_data(steps.get("host-link"))
    if hl:
        for r in _host_results(hl)[:1]:          # GPU 0 (a recorded machine records one GPU)
            for mem, d, what in (("pinned", "h2d", "host->GPU pinned"), ("pinned", "d2h", "GPU->host pinned"),
                                 ("pinned", "bidir", "both ways pinned"), ("pageable", "h2d", "host->GPU pageable")):
                best = r.best(mem, d)
                if best:
                    out[f"hl:{mem}:{d}"] = (f"host link {what}, best from 256 MiB", "GB/s", best["gbps"])
            lat = r.latency_us("pinned", "h2d")
            if lat is not None:
                out["hl:lat"] = ("host link, one 4 KiB pinned host->GPU copy", "us", lat)
    tr = done_data(steps.get("one-gpu-training"))
    if tr:
        for r in tr["result"]["rows"]:
            if not r.get("error"):
                out[f"one:{r['model']}:{r['precision']}"] = (f"one GPU images/s, {r['model']} {r['precision']}",
                                                            "images/s", r["images_per_s"])
    wc = done_data(steps.get("wrapper-cost"))
    if wc:
        for r in wc["result"]["rows"]:
            if not r.get("error") and r.get("wrapper") != "plain" and r.get("cost_ms") is not None:
                out[f"wc:{r['model']}:{r['batch']}:{r['wrapper']}"] = (
                    f"{r['wrapper']} cost per step on one worker, {r['model']} batch {r['batch']}", "ms", r["cost_ms"])
    return out


def recorded_steps(spec: str) -> dict:
    """The one-GPU steps a recorded machine has (its host-link recording under
    ``source_code/reference/hostlink/``), as step records."""
    from ddlab.measure import host_link
    if spec not in host_link.recorded_names():
        return {}
    r = host_link.load_recorded(spec)
    return {"host-link": {"status": "done", "provenance": r.provenance,
                          "data": {"results": [r.to_dict()], "errors": {},
                                   "summary": {str(r.device.get("index", 0)): host_link.summary(r)}}}}
