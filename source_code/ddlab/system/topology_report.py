"""A :class:`~ddlab.system.topology.Topology` in words and tables, and the ``ddlab topo``
command: :func:`summary` (a few plain sentences), :func:`report` (what ``ddlab topo`` prints:
the matrix, the ranked pairs, the best subsets and the summary) and :func:`cli`.

    from ddlab.system import topology, topology_report
    print(topology_report.report(topology.recorded("dgx1-v100")))
"""
from __future__ import annotations

import itertools
import json
import sys

from ddlab.base.tables import Table
from ddlab.system.links import LINK_KINDS
from ddlab.system.topology import NoGPUError, Topology, TopologyParseError, recorded, recorded_names, save_recorded
from ddlab.system.topology_ranking import best_subset, ranked_pairs, subset


def summary(topo: Topology) -> str:
    """A few plain sentences describing the machine: its pairs' links, its CPU/NUMA groups, its NICs."""
    gpus = topo.gpus
    n = len(gpus)
    out = [f"{n} GPU{'s' if n != 1 else ''}" + (f" ({topo.name})" if topo.name else "") + "."]
    if n >= 2:
        groups = ranked_pairs(topo)
        npairs = n * (n - 1) // 2
        if len(groups) == 1:
            g = groups[0]
            if g.kind == "NVLINK":
                what = (f"all {npairs} pairs {g.label} ({topo.link(*g.pairs[0]).description} each): every GPU "
                        f"reaches every other at the same NVLink bandwidth, as through an NVSwitch "
                        f"(NVSwitch-class)") if n > 2 else (
                    f"the pair GPU{gpus[0]}-GPU{gpus[1]} is {g.label} ({topo.link(*g.pairs[0]).description})")
            else:
                what = (f"all {npairs} pairs {g.label}: no NVLink, every pair goes "
                        f"{LINK_KINDS[g.kind]['path']}") if n > 2 else (
                    f"the pair GPU{gpus[0]}-GPU{gpus[1]} is {g.label}: no NVLink; it goes {LINK_KINDS[g.kind]['path']}")
            out.append(what[0].upper() + what[1:] + ".")
        else:
            parts = [f"{len(g.pairs)} pair{'s' if len(g.pairs) != 1 else ''} {g.label}" for g in groups]
            out.append(f"Links between GPU pairs, best first: {', '.join(parts)}.")
            best, worst = groups[0], groups[-1]
            out.append(f"Best: {_pair_list(best.pairs)} ({best.label}, "
                       f"{topo.link(*best.pairs[0]).description}). Worst: {_pair_list(worst.pairs)} "
                       f"({worst.label}, {topo.link(*worst.pairs[0]).description}).")
            nv = [p for g in groups if g.kind == "NVLINK" for p in g.pairs]
            if nv and len(nv) < npairs:
                out.append(f"{npairs - len(nv)} of {npairs} pairs have no NVLink: traffic between them "
                           f"takes PCIe (or is relayed by NCCL through another GPU).")
    numa = [grp for grp in topo.numa_groups() if grp[0] is not None]
    if len(numa) > 1:
        out.append("CPU/NUMA locality: " + "; ".join(f"{_ranges(gs)} on {key}" for key, gs in numa) + ".")
    elif len(numa) == 1:
        out.append(f"All GPUs are local to {numa[0][0]}.")
    for col, name in zip(topo.nic_columns, topo.nics):
        ranked = sorted(((topo.links[(f"GPU{g}", col)], g) for g in gpus), key=lambda t: -t[0].rank)
        best_rank = ranked[0][0].rank
        near = [g for ln, g in ranked if ln.rank == best_rank]
        ln = ranked[0][0]
        if ln.kind == "PIX":
            rel = "share a PCIe switch with" if len(near) > 1 else "shares a PCIe switch with"
        elif ln.kind == "PXB":
            rel = "sit below the same PCIe switches as" if len(near) > 1 else "sits below the same PCIe switches as"
        else:
            rel = "are closest to" if len(near) > 1 else "is closest to"
        out.append(f"{_ranges(near).replace(', ', ' and ')} {rel} {name} ({ln.label}).")
    return " ".join(out)


def _pair_list(pairs: list, limit: int = 6) -> str:
    shown = ", ".join(f"GPU{i}-GPU{j}" for i, j in pairs[:limit])
    return shown + (f" and {len(pairs) - limit} more" if len(pairs) > limit else "")


def _ranges(nums: list) -> str:
    """[0, 1, 2, 5] -> 'GPU0-2, GPU5' for summaries."""
    out, nums = [], sorted(nums)
    start = prev = None
    for x in nums + [None]:
        if start is None:
            start = prev = x
        elif x is not None and x == prev + 1:
            prev = x
        else:
            out.append(f"GPU{start}" if start == prev else f"GPU{start}-{prev}")
            start = prev = x
    return ", ".join(out)


def subset_lesson(topo: Topology, gpus) -> str:
    """What a chosen set of GPUs gives a ring all-reduce, in words, computed from ``topo``: its best
    ring against the best subset of the same size (slowest link, then the sum of link ranks),
    its weakest pair (which the ring may never use), the NUMA nodes it spans and each GPU's
    nearest NIC (the one a job across machines should send through)."""
    mine = subset(topo, list(gpus))
    best = best_subset(topo, len(mine.gpus))
    names = ",".join(map(str, mine.gpus))
    bn, best_bn = mine.ring_bottleneck, best.ring_bottleneck
    lines = [f"GPUs {names}: best ring {mine.ring_text()}, slowest link {bn.label}."]
    if set(mine.gpus) == set(best.gpus):
        pace = f"This is the best set of {len(mine.gpus)}."
    elif bn.rank == best_bn.rank:
        pace = (f"The best {len(mine.gpus)} (GPUs {','.join(map(str, best.gpus))}) have the same slowest link, "
                f"{best_bn.label}, so an all-reduce's ring runs at the same pace on both")
        pace += ("." if mine.ring_total >= best.ring_total else
                 f"; the best set wins only the tie-break, more fast links on its ring ({best.ring_text()}).")
    else:
        pace = (f"The best {len(mine.gpus)} (GPUs {','.join(map(str, best.gpus))}) ring at {best_bn.label}: "
                f"this choice's {bn.label} link sets a slower pace for every byte.")
    lines.append(pace)
    if mine.weakest is not None and mine.weakest.rank < bn.rank:
        unused = [f"GPU{a}-GPU{b}" for a, b in itertools.combinations(mine.gpus, 2)
                  if topo.link(a, b).rank == mine.weakest.rank]
        lines.append(f"Its weakest pairs ({', '.join(unused)}: {mine.weakest.label}) are not on the ring, so they "
                     "cost the all-reduce nothing: judge GPUs by the ring's slowest link, not by their worst pair.")
    by_numa = all(topo.numa_affinity.get(g) is not None for g in mine.gpus)
    nodes = sorted({topo.numa_affinity.get(g) if by_numa else topo.cpu_affinity.get(g) for g in mine.gpus} - {None},
                   key=str)
    if len(nodes) > 1:
        which = f"nodes {' and '.join(map(str, nodes))}" if by_numa else f"CPU affinity {' and '.join(map(str, nodes))}"
        lines.append(f"They span {len(nodes)} NUMA nodes ({which}): the host side of the job, its data loading and "
                     "any host-staged copy, is split across the CPUs.")
    if topo.nics:
        near, used = [], set()
        for g in mine.gpus:
            links = {nic: topo.nic_link(g, nic) for nic in topo.nics}
            top = max(ln.rank for ln in links.values())
            used |= {n for n, ln in links.items() if ln.rank == top}
            near.append(f"GPU{g} {'/'.join(n for n, ln in links.items() if ln.rank == top)} "
                        f"({next(ln.label for ln in links.values() if ln.rank == top)})")
        lines.append("Nearest NIC: " + ", ".join(near) + f", {len(used)} of the machine's {len(topo.nics)} NICs. "
                     "Across machines each GPU should send through its nearest NIC (GPUs that share one share its "
                     "bandwidth); one whose NIC is SYS away sends every byte across the CPUs' interconnect first.")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- report and CLI
def report(topo: Topology) -> str:
    """What ``ddlab topo`` prints: matrix, ranked pairs, best subsets, summary."""
    lines = []
    title = topo.name or "topology"
    lines.append(f"== {title}" + (f": {topo.description}" if topo.description else ""))
    prov = topo.provenance or {}
    if prov.get("cited"):
        lines.append(f"   (written from published facts, not measured: {prov.get('source')})")
    elif prov.get("illustrative"):
        lines.append(f"   (illustrative example, not a measurement: {prov.get('note', '')})")
    elif prov.get("date"):
        from ddlab.system.machine_name import machine_label  # named from the recorded hardware, not the free-text label
        lines.append(f"   (captured on {machine_label(prov, topo)}, {str(prov.get('date'))[:10]})")
    lines += ["", topo.matrix_table(), ""]
    gpus = topo.gpus
    if len(gpus) >= 2:
        lines += ["GPU pairs, best link first (ties on one line):", ranked_pairs_table(topo), ""]
    if len(gpus) >= 3:
        lines += ["Best k GPUs for a ring all-reduce (the ring's slowest link first, then its sum of link ranks; "
                  "k = all GPUs is the best ring over the whole machine):", best_subsets_table(topo), ""]
    lines.append(summary(topo))
    return "\n".join(map(str, lines))


def ranked_pairs_table(topo: Topology) -> Table:
    """The GPU pairs grouped by link, best link first (``ranked_pairs(topo)``)."""
    return Table([("place", "int", "#"), ("label", "text", "link"), ("pairs", "text")],
                 [[g.place, g.label, _pair_list(g.pairs, limit=12)] for g in ranked_pairs(topo)], wrap=["pairs"])


def best_subsets_table(topo: Topology) -> Table:
    """For k = 2 .. the number of GPUs: the best k GPUs for a ring all-reduce, their best ring,
    its slowest link and the weakest pair among them (``best_subset(topo, k)``)."""
    rows = []
    for k in range(2, len(topo.gpus) + 1):
        s = best_subset(topo, k)
        rows.append([k, ",".join(map(str, s.gpus)), s.ring_text(), s.ring_bottleneck.label, s.weakest.label])
    return Table([("k", "int"), ("gpus", "text", "GPUs"), ("ring", "text", "best ring"),
                  ("slowest", "text", "ring's slowest link"), ("weakest", "text", "weakest pair")], rows)


def _report_dict(topo: Topology) -> dict:
    d = topo.to_dict()
    d["ranked_pairs"] = [g.to_dict() for g in ranked_pairs(topo)] if len(topo.gpus) >= 2 else []
    d["best_subsets"] = {str(k): best_subset(topo, k).to_dict() for k in range(2, len(topo.gpus) + 1)}
    d["summary"] = summary(topo)
    return d


def cli(argv: list) -> int:
    import argparse
    p = argparse.ArgumentParser(prog="ddlab topo", description="Read `nvidia-smi topo -m` (this machine, a file "
                                "or a recorded machine): matrix, ranked GPU pairs, best subsets, summary.")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--file", metavar="F", help="a saved `nvidia-smi topo -m` output")
    src.add_argument("--recorded", metavar="NAME", help="a recorded machine (see --list)")
    p.add_argument("--list", action="store_true", help="list the recorded machines and exit")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.add_argument("--save", metavar="NAME", help="record this machine's topology (with provenance) as "
                   "reference/topologies/NAME.json")
    a = p.parse_args(argv)
    if a.list:
        rows = []
        for name in recorded_names():
            try:
                t = recorded(name)
                rows.append([name, len(t.gpus), t.description or ""])
            except (ValueError, OSError) as exc:
                rows.append([name, None, f"unreadable: {exc}"])
        print(Table([("name", "text", "recorded machine"), ("gpus", "int", "GPUs"), ("description", "text")],
                    rows, missing=""))
        return 0
    if a.save and (a.file or a.recorded):
        print("ddlab topo: --save records this machine's live topology; it cannot be combined with --file or "
              "--recorded")
        return 2
    try:
        if a.file:
            topo = Topology.from_file(a.file)
        elif a.recorded:
            topo = recorded(a.recorded)
        else:
            topo = Topology.from_system()
    except NoGPUError as exc:
        print(f"ddlab topo: {exc}")
        print(f"Recorded machines: {', '.join(recorded_names()) or 'none'} "
              f"(e.g. ddlab topo --recorded {(recorded_names() or ['NAME'])[0]})")
        return 1
    except TopologyParseError as exc:
        print(f"ddlab topo: {a.file or a.recorded or 'nvidia-smi output'}: {exc}")
        return 1
    except (OSError, ValueError) as exc:  # missing file, unknown recorded name, bad record
        print(f"ddlab topo: {exc}")
        return 1
    if a.save:
        from ddlab.system import provenance
        prov = provenance.collect(command="nvidia-smi topo -m")
        prov["kind"] = "measured"
        path = save_recorded(a.save, topo, prov, description=f"{prov.get('gpu_count')}x {prov.get('gpu_model')}")
        print(f"saved {path}", file=sys.stderr)
    print(json.dumps(_report_dict(topo), indent=1) if a.json else report(topo))
    return 0
