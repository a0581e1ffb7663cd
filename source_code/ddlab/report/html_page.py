"""What ``ddlab report`` shows: the summary, the tables per step, the comparison with another
machine, as a self-contained HTML page (plots embedded as data URIs, CSS inline: it opens from
disk with no server and no network) and as terminal text. It reads only the steps' records
(``<out>/<step>.json``), so a report folder can be rendered again, or compared, at any time.
Every table goes through :class:`ddlab.base.tables.Table` (HTML in the page, aligned text in a terminal).
"""
from __future__ import annotations

import base64
import json
import os
from typing import Optional

from ddlab.base import files, units
from ddlab.base.tables import Table, shorten
from ddlab.training import baseline
from ddlab.report import one_gpu_page
from ddlab.report.context import done_data
from ddlab.report.plan import COMPARED_BYTES

STEP_ORDER = ("doctor", "topology", "host-link", "pcie-load", "p2p", "allreduce", "training", "one-gpu-training",
              "wrapper-cost")
CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2em auto; max-width: 70em;
       padding: 0 1em; color: #222; line-height: 1.45; }
h1 { font-size: 1.6em; margin-bottom: 0.2em; } h2 { border-bottom: 1px solid #ccc; padding-bottom: 0.2em; }
.meta { color: #555; font-size: 0.9em; }
#summary { background: #f4f7fb; border: 1px solid #c9d6e8; padding: 0.5em 1.2em; border-radius: 6px; }
#summary li { margin: 0.25em 0; } .skipped, .warning { color: #8a5a00; } .failed { color: #b00020; font-weight: bold; }
div.ddlab-table { overflow-x: auto; }
table.ddlab-table { border-collapse: collapse; margin: 0.6em 0; font-size: 0.92em; }
table.ddlab-table th, table.ddlab-table td { border: 1px solid #ddd; padding: 0.2em 0.6em; }
table.ddlab-table th { background: #f0f0f0; }
img { max-width: 100%; height: auto; border: 1px solid #eee; margin: 0.5em 0; }
pre { background: #f8f8f8; padding: 0.6em; overflow-x: auto; font-size: 0.85em; }
"""


# ----------------------------------------------------------------------------- reading records
def read_folder(path: str) -> dict:
    """{step: record} of a report folder (the steps that wrote their JSON)."""
    out = {}
    for name in STEP_ORDER:
        p = os.path.join(path, f"{name}.json")
        if os.path.exists(p):
            out[name] = files.read_json(p, "report step", schema="report-step")
    return out


_done = done_data


def machine_of(steps: dict) -> str:
    """The machine named by its hardware, from the doctor's inventory (or a provenance) and the topology."""
    from ddlab.system.machine_name import machine_label
    topo = (_done(steps.get("topology")) or {}).get("topology")
    doctor = _done(steps.get("doctor"))
    if doctor:
        return machine_label(doctor["inventory"], topo)
    for rec in steps.values():
        if rec.get("provenance"):
            return machine_label(rec["provenance"], topo)
    return "unknown machine"


def load_other(spec: str) -> dict:
    """``--compare``: a report folder, or the name of a machine recorded under
    ``source_code/reference/`` (e.g. "h200x2"). Returns {"label", "source", "steps"}."""
    from ddlab.measure import collectives, p2p_diagnosis
    from ddlab.course import mode
    from ddlab.training import recording
    from ddlab.base import reference
    from ddlab.system import topology
    from ddlab.report.steps import link_peaks, p2p_data, topology_data
    if os.path.isdir(spec):
        steps = read_folder(spec)
        if not steps:
            raise ValueError(f"{spec} holds no report steps (doctor.json, p2p.json, ...)")
        return {"label": machine_of(steps), "source": spec, "steps": steps}
    from ddlab.measure import host_link
    known = sorted(set(reference.names("p2p")) | set(collectives.recorded_machines())
                   | set(topology.recorded_names())
                   | set(host_link.recorded_names()))
    if spec not in known:
        raise ValueError(f"not a report folder nor a recorded machine; recorded machines: {', '.join(known)}")
    steps, prov = {}, None
    if spec in topology.recorded_names():
        t = topology.recorded(spec)
        steps["topology"] = {"status": "done", "data": topology_data(t), "provenance": t.provenance}
    topo = (_done(steps.get("topology")) or {}).get("topology")
    if spec in reference.names("p2p"):
        r = p2p_diagnosis.load_recorded(spec)
        prov = r.provenance
        names = [d.get("name", "") for d in r.devices] or [prov.get("gpu_model") or ""]
        steps["p2p"] = {"status": "done", "data": p2p_data(r, link_peaks(topo, names)), "provenance": prov}
    if spec in collectives.recorded_machines():
        sweeps = list(collectives.load_recorded(spec).values())
        prov = prov or sweeps[0].provenance
        from ddlab.report.steps import slowest_peak
        peaks = link_peaks(topo, [prov.get("gpu_model") or ""])
        steps["allreduce"] = {"status": "done", "provenance": sweeps[0].provenance,
                              "data": {"backend": sweeps[0].backend, "sweeps": collectives.results_to_json(sweeps),
                                       "errors": {}, "link_peak_gbps": slowest_peak(peaks)}}
    if spec == mode.RECORDED:      # the training experiments were recorded on the course's machine
        res = recording.load_recorded("nccl-paths", "torch", "ddp", "wide")
        steps["training"] = {"status": "done", "data": {"result": res.to_dict(), "device": "cuda"},
                             "provenance": res.provenance}
    steps.update(one_gpu_page.recorded_steps(spec))
    prov = prov or (steps.get("host-link") or {}).get("provenance")
    from ddlab.system.machine_name import machine_label
    from ddlab.report.steps import STEPS
    for step in STEPS:
        if step.name in steps:
            steps[step.name]["title"] = step.title
    label = machine_label(prov, topo) if prov else spec
    return {"label": f"{label} (recorded {spec})", "source": f"recorded {spec}", "steps": steps}


# ----------------------------------------------------------------------------- readings
def _gbps(x) -> str:
    return units.format_rate(x * 1e9) if x is not None else units.NA


def _sweeps(data: dict) -> list:
    from ddlab.measure import collectives
    return collectives.results_from_json(data["sweeps"], source="live")


def _path_label(s) -> str:
    return s.path if s.backend == "nccl" else "gloo (CPU)"


def summary_items(steps: dict) -> list:
    """[(topic, finding, css class)]: what the report found, for the top of the page."""
    items = []
    topo_d, p2p_d = _done(steps.get("topology")), _done(steps.get("p2p"))
    if p2p_d and p2p_d.get("slowest"):
        s = p2p_d["slowest"]
        items.append(("Slowest link", f"GPU {s['src']} -> {s['dst']}: {_gbps(s['gbps'])} (p2p test, one direction, "
                      "peer access on)", ""))
    if topo_d and topo_d.get("ranked_pairs"):
        worst = topo_d["ranked_pairs"][-1]
        pairs = ", ".join(f"{a}-{b}" for a, b in worst["pairs"][:6]) + (" ..." if len(worst["pairs"]) > 6 else "")
        items.append(("Weakest topology link", f"{worst['label']} (GPU pairs {pairs})", ""))
    if p2p_d and "outliers" in p2p_d:
        n = p2p_d["result"].get("n") or len(p2p_d["result"].get("labels", []))
        out = p2p_d["outliers"]
        items.append(("Outlier GPUs", "; ".join(f"GPU {g}: its pairs average {_gbps(x)} against {_gbps(y)}"
                                                for g, x, y in out) if out
                      else ("none" if n >= 3 else "needs 3 GPUs or more to call one GPU slow"), ""))
        asym = p2p_d["asymmetric"]
        items.append(("Asymmetric pairs", "; ".join(f"{a} <-> {b}: {_gbps(x)} vs {_gbps(y)}" for a, b, x, y in asym)
                      if asym else "none (both directions within 10%)", ""))
    if topo_d and topo_d.get("best_subsets"):
        text = "; ".join(f"k={k}: GPUs {','.join(map(str, s.get('gpus', [])))}"
                         + (f" (weakest link {s['weakest']})" if s.get("weakest") else "")
                         for k, s in topo_d["best_subsets"].items())
        items.append(("Best subset per k", text, ""))
    ar = _done(steps.get("allreduce"))
    if ar:
        peak = ar.get("link_peak_gbps")
        parts = []
        for s in _sweeps(ar):
            txt = f"{_path_label(s)} {_gbps(s.peak_busbw())}"
            if peak and s.backend == "nccl":
                txt += f" ({units.format_percent(s.peak_busbw() / peak)} of {_gbps(peak)})"
            parts.append(txt)
        what = ("peak bus bandwidth against the slowest link's peak per direction (ddlab.system.links): " if peak
                else "peak bus bandwidth (no link peak: " + ("CPU processes" if ar.get("backend") == "gloo"
                                                             else "link rate unknown") + "): ")
        items.append(("All-reduce", what + "; ".join(parts), ""))
        for path, err in (ar.get("errors") or {}).items():
            items.append((f"All-reduce {path}", f"failed: {err}", "failed"))
    tr = _done(steps.get("training"))
    if tr:
        rows = _training_rows(tr)
        shown = [r for r in rows if r.get("path") not in (baseline.PLAIN_PATH, baseline.WRAPPER_PATH)]
        one = next((r for r in rows if baseline.is_wrapper_one(r) and r.get("speedup") is not None), None)
        items.append(("Training speedup over the plain one-GPU run", "; ".join(
            f"{r['path']}: " + (f"failed ({shorten(r['error'], 60)})" if r.get("error") else
                                units.format_ratio(r["speedup"]) if r.get("speedup") is not None else units.NA)
            for r in shown) + (" (2 CPU processes, gloo)" if tr.get("device") == "cpu" else " (2 GPUs)")
            + (f"; the wrapper with 1 worker: {units.format_ratio(one['speedup'])} of the plain run" if one else ""),
            ""))
    items += one_gpu_page.summary_items(steps)
    doc = _done(steps.get("doctor"))
    if doc:
        items += [("Doctor warning", w, "warning") for w in doc["warnings"]] or [("Doctor warnings", "none", "")]
    for name in STEP_ORDER:
        rec = steps.get(name)
        if rec and rec.get("status") in ("skipped", "failed"):
            items.append((f"{rec['status'].capitalize()}: {rec.get('title', name)}", rec.get("why", ""),
                          rec["status"]))
    return items


def key_figures(steps: dict) -> dict:
    """{key: (figure, unit, value)}: the numbers two machines are compared on."""
    import numpy as np
    out = {}
    p2p_d = _done(steps.get("p2p"))
    if p2p_d:
        from ddlab.measure.p2p import P2PResult
        from ddlab.measure.p2p_diagnosis import offdiag
        r = P2PResult.from_dict(p2p_d["result"])
        for key, what in (("uni_p2p_on", "p2p unidirectional"), ("bi_p2p_on", "p2p bidirectional")):
            m = r.matrices.get(key)
            if m is not None and offdiag(m).size:
                out[f"{key}:best"] = (f"{what}, best pair", "GB/s", float(offdiag(m).max()))
                out[f"{key}:worst"] = (f"{what}, worst pair", "GB/s", float(offdiag(m).min()))
        lat = r.matrices.get("lat_gpu_p2p_on")
        if lat is not None and offdiag(lat).size:
            out["lat"] = ("p2p latency, GPU-timed, median pair", "us", float(np.median(offdiag(lat))))
    ar = _done(steps.get("allreduce"))
    if ar:
        for s in _sweeps(ar):
            out[f"ar:{_path_label(s)}:peak"] = (f"all-reduce peak busbw, {_path_label(s)}", "GB/s", s.peak_busbw())
            row = s.row_at(COMPARED_BYTES)
            if row["bytes"] == COMPARED_BYTES:
                out[f"ar:{_path_label(s)}:1M"] = (f"all-reduce busbw at {units.format_bytes(COMPARED_BYTES)}, "
                                                  f"{_path_label(s)}", "GB/s", row["busbw_gbps"])
    out.update(one_gpu_page.key_figures(steps))
    tr = _done(steps.get("training"))
    if tr:
        dev = "GPU" if tr.get("device") == "cuda" else "CPU"
        for r in _training_rows(tr):
            if r.get("error"):
                continue
            out[f"tr:{dev}:{r['path']}:ips"] = (f"training images/s, {r['path']} ({dev})", "images/s",
                                                r.get("images_per_s"))
            if not baseline.is_plain(r):
                out[f"tr:{dev}:{r['path']}:speedup"] = (f"training speedup over the plain one-GPU run, {r['path']} "
                                                        f"({dev})", "x", r.get("speedup"))
    return out


def _training_rows(tr: dict) -> list:
    """The training step's rows with every speedup over the plain one-GPU run (ddlab.training.baseline), as
    read again now: a report written when the speedups divided by the wrapper's one-worker run reads the
    same as one written since."""
    from ddlab.training.results import ExperimentResult
    try:
        return ExperimentResult.from_dict(tr["result"]).rows
    except (KeyError, ValueError, TypeError):
        return list((tr.get("result") or {}).get("rows") or [])


def compare_table(steps: dict, other: dict, this_label: str = "this machine") -> Table:
    """Side by side: every figure either machine has, with the ratio this / other."""
    mine, theirs = key_figures(steps), key_figures(other["steps"])
    rows = []
    for key in list(mine) + [k for k in theirs if k not in mine]:
        fig, unit, a = mine.get(key, theirs.get(key))
        b = theirs.get(key, (None, None, None))[2]
        a = mine[key][2] if key in mine else None
        rows.append({"figure": fig, "unit": unit, "this": a, "other": b,
                     "ratio": a / b if a is not None and b else None})
    return Table([("figure", "text"), ("unit", "text"), ("this", "number", this_label),
                  ("other", "number", other["label"]), ("ratio", "ratio", "ratio (this / other)")], rows,
                 title=f"This machine beside {other['label']}"
                 + ("" if other["source"].startswith("recorded") else f" (the report in {other['source']})"),
                 notes="n/a: the figure was not measured on that machine (a skipped step, or another backend).")


def step_tables(name: str, data: dict) -> list:
    """The tables one step shows (the same in the page and in the terminal)."""
    if name in one_gpu_page.STEPS:
        return one_gpu_page.tables(name, data)
    from ddlab.measure import collectives
    from ddlab.report import doctor
    from ddlab.system import hardware, topology, topology_report
    if name == "doctor":
        inv = dict(data["inventory"])
        gpus = [hardware.GPU(**g) for g in inv.pop("gpus")]
        inv.pop("gpu_count", None)
        inv.pop("mode", None)
        dataset = inv.pop("dataset", None)
        i = hardware.Inventory(gpus=gpus, **inv)
        return ([doctor.gpu_table(i)] if gpus else []) + [doctor.software_table(i, dataset)]
    if name == "topology":
        t = topology.Topology.from_dict(data["topology"])
        out = [t.matrix_table()]
        if len(t.gpus) >= 2:
            out.append(topology_report.ranked_pairs_table(t))
        rows = [[int(k), ",".join(map(str, s.get("gpus", []))), s.get("weakest")]
                for k, s in data["best_subsets"].items()]
        if rows:
            out.append(Table([("k", "int"), ("gpus", "text", "GPUs"), ("weakest", "text", "weakest link")], rows,
                             title="Best subset of k GPUs (topology_ranking.best_subset)"))
        return out
    if name == "p2p":
        from ddlab.measure.p2p import P2PResult
        r = P2PResult.from_dict(data["result"])
        return [r.matrix_table(k) for k in ("uni_p2p_on", "bi_p2p_on", "lat_gpu_p2p_on") if k in r.matrices]
    if name == "allreduce":
        sweeps = _sweeps(data)
        t = collectives.summary(sweeps)
        peak = data.get("link_peak_gbps")
        if peak:
            t = Table([("path", "text"), ("peak", "rate:GB/s", "peak busbw"), ("link", "rate:GB/s", "link peak"),
                       ("share", "percent", "share of link")],
                      [{"path": s.path, "peak": s.peak_busbw(), "link": peak, "share": s.peak_busbw() / peak}
                       for s in sweeps if s.backend == "nccl"],
                      title="Bus bandwidth against the slowest link's peak per direction (ddlab.system.links)"), t
            return [t[1], t[0]]
        return [t]
    if name == "training":
        from ddlab.training.results import ExperimentResult
        return [ExperimentResult.from_dict(data["result"]).as_table()]
    return []


def _texts(name: str, data: dict) -> list:
    if name in one_gpu_page.STEPS:
        return one_gpu_page.texts(name, data)
    if name == "topology":
        return [data.get("source", ""), data["summary"]]
    if name == "p2p":
        s = data.get("sizing") or {}
        size = f"{units.format_bytes(s['size'])} x {s['reps']} per pair, copy {s['copy']}. " if s else ""
        return [size + data["summary"]]
    if name == "allreduce":
        return [x for x in [data.get("note")] + [f"{k} failed: {v}" for k, v in (data.get("errors") or {}).items()]
                if x]
    return []


# ----------------------------------------------------------------------------- output
def terminal_text(steps: dict, other: Optional[dict] = None) -> str:
    lines = ["", "== Summary"]
    lines += [f"- {topic}: {text}" for topic, text, _ in summary_items(steps)]
    for name in STEP_ORDER:
        rec = steps.get(name)
        if not rec or rec.get("status") != "done":
            continue
        lines += ["", f"== {rec.get('title', name)}"] + _texts(name, rec["data"])
        for t in step_tables(name, rec["data"]):
            lines += ["", str(t)]
    if other:
        lines += ["", "== Compared", str(compare_table(steps, other))]
    return "\n".join(lines)


# The page: autoescaped, so every text from a record is escaped; the CSS (ours), the tables
# (ddlab.base.tables.Table's own HTML) and the plots (base64) go in as they are.
PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>ddlab report: {{ machine }}</title><style>{{ css | safe }}</style></head><body>
<h1>ddlab report: {{ machine }}</h1>
<p class="meta">{{ command }} &middot; {{ date }} &middot; steps took {{ "%.0f" | format(took) }} s
{%- if estimate_s %} (estimated {{ "%.0f" | format(estimate_s) }} s){% endif %}</p>
<section id="summary"><h2>Summary</h2><ul>
{% for topic, text, cls in summary %}
<li class="{{ cls }}"><b>{{ topic }}:</b> {{ text }}</li>
{% endfor %}
</ul></section>
{% if compare %}
<section id="compare"><h2>Compared</h2>
{{ compare | safe }}
</section>
{% endif %}
{% for s in sections %}
<section id="step-{{ s.name }}"><h2>{{ s.title }}</h2>
{% if s.status != "done" %}
<p class="{{ s.status }}">{{ s.status }}: {{ s.why }}</p>
{% else %}
{% for text in s.texts %}
<p>{{ text }}</p>
{% endfor %}
{% for table in s.tables %}
{{ table | safe }}
{% endfor %}
{% for png in s.plots %}
<img alt="{{ s.name }} plot" src="data:image/png;base64,{{ png }}">
{% endfor %}
{% endif %}
<details><summary>provenance ({{ "%.0f" | format(s.seconds) }} s)</summary><pre>{{ s.provenance }}</pre></details></section>
{% endfor %}
</body></html>"""


def _png_base64(path: str) -> str:
    with open(path, "rb") as f:
        return base64.b64encode(f.read()).decode("ascii")


def _section(out: str, name: str, rec: dict) -> dict:
    """What the page shows of one step: its title, status, texts, tables, plots and provenance."""
    done = rec.get("status") == "done"
    data = rec.get("data") if done else None
    return {"name": name, "title": rec.get("title", name), "status": rec.get("status", ""), "why": rec.get("why", ""),
            "texts": _texts(name, data) if done else [],
            "tables": [t._repr_html_() for t in step_tables(name, data)] if done else [],
            "plots": [_png_base64(os.path.join(out, p)) for p in data.get("plots", [])] if done else [],
            "seconds": rec.get("seconds", 0), "provenance": json.dumps(rec.get("provenance"), indent=1)}


def render(out: str, steps: dict, machine_label: str, command: str = "ddlab report",
           other: Optional[dict] = None, estimate_s: Optional[float] = None) -> str:
    """The page as one string: everything inline (a Jinja2 template, :data:`PAGE`)."""
    import jinja2
    dates = [str(r.get("provenance", {}).get("date", "")) for r in steps.values() if r.get("provenance")]
    env = jinja2.Environment(autoescape=True, trim_blocks=True, lstrip_blocks=True, undefined=jinja2.StrictUndefined)
    return env.from_string(PAGE).render(
        machine=machine_label, css=CSS, command=command, date=max(dates) if dates else "",
        took=sum(r.get("seconds") or 0 for r in steps.values()), estimate_s=estimate_s,
        summary=summary_items(steps), compare=compare_table(steps, other)._repr_html_() if other else None,
        sections=[_section(out, name, steps[name]) for name in STEP_ORDER if steps.get(name)])


def write(out: str, steps: dict, machine_label: str, plan=None, command: str = "ddlab report",
          other: Optional[dict] = None) -> str:
    """Write ``<out>/report.html``; returns its path."""
    path = os.path.join(out, "report.html")
    page = render(out, steps, machine_label, command, other, plan.total_s() if plan is not None else None)
    return files.write_text(path, page)
