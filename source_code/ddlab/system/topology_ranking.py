"""Rank the GPUs of a :class:`~ddlab.system.topology.Topology` for a ring all-reduce: the pairs
from best link to worst (:func:`ranked_pairs`), the best k GPUs with their best ring
(:func:`best_subset`), and any GPUs of your choice scored the same way (:func:`subset`).

A link's quality is its rank (:class:`ddlab.system.topology_parse.Link`); the best ring through
given GPUs is :func:`ddlab.base.rings.best_ring` over those ranks.

    from ddlab.system import topology, topology_ranking as ranking
    dgx1 = topology.recorded("dgx1-v100")
    ranking.ranked_pairs(dgx1)[0].pairs, ranking.best_subset(dgx1, 4).ring_text()
    ranking.subset(dgx1, [0, 1, 4, 5]).ring_text()
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Optional

from ddlab.base import rings
from ddlab.system.topology_parse import Link


@dataclass
class PairGroup:
    """Pairs whose links are equally good. ``place`` 1 is the best group."""
    place: int
    label: str
    kind: str
    rank: int
    pairs: list

    def to_dict(self) -> dict:
        return {"place": self.place, "label": self.label, "kind": self.kind, "rank": self.rank,
                "pairs": [list(p) for p in self.pairs]}


@dataclass
class Subset:
    """k GPUs scored for a ring all-reduce.

    ``ring`` is the order of the best ring over them (it closes from the last GPU back to the
    first) and ``ring_links`` its links in that order: ``ring[i]`` to ``ring[i + 1]``, the last
    one back to ``ring[0]`` (one link for 2 GPUs, none for 1). The best ring is the one whose
    slowest link is fastest, then the one with the largest sum of link ranks. ``weakest`` is
    the weakest link between *any* two of the GPUs and ``total_rank`` the sum of all their
    pairwise link ranks: a ring never uses most of those pairs, so they only break ties."""
    gpus: tuple
    weakest: Optional[Link]
    total_rank: int
    ring: tuple = ()
    ring_links: tuple = ()

    @property
    def ring_bottleneck(self) -> Optional[Link]:
        """The ring's slowest link: it sets the bandwidth of a ring all-reduce."""
        return min(self.ring_links, key=lambda ln: ln.rank) if self.ring_links else None

    @property
    def ring_total(self) -> int:
        """The sum of the ring's link ranks (the tie-break between rings with one bottleneck)."""
        return sum(ln.rank for ln in self.ring_links)

    def ring_text(self) -> str:
        """'0 -NV2- 3 -NV2- 2 -NV1- 0': the ring, each link labelled, back to its start
        (two GPUs: '0 -NV2- 1', the one link used both ways)."""
        stops = list(self.ring) + ([self.ring[0]] if len(self.ring) > 2 else [])
        return " ".join([str(stops[0])] + [f"-{ln.label}- {g}" for ln, g in zip(self.ring_links, stops[1:])])

    def to_dict(self) -> dict:
        bn = self.ring_bottleneck
        return {"gpus": list(self.gpus), "weakest": self.weakest.label if self.weakest else None,
                "total_rank": self.total_rank, "ring": list(self.ring),
                "ring_links": [ln.label for ln in self.ring_links],
                "ring_bottleneck": bn.label if bn else None, "ring_total": self.ring_total}


_NO_LINK = 10 ** 9   # "no link yet" in the searches below: above every rank


def _widest_connection(members: list, pool: list, rank: dict) -> int:
    """The best rank t such that links of rank >= t join all of ``members`` through GPUs of
    ``pool``. A ring over them contains such a path between any two, so its bottleneck is at
    most t: a subset that spans two CPU sockets, say, cannot have a ring faster than SYS."""
    if len(members) < 2:
        return _NO_LINK
    for t in sorted({rank[(a, b)] for a in pool for b in pool if a != b}, reverse=True):
        seen, todo = {members[0]}, [members[0]]
        while todo:
            a = todo.pop()
            for b in pool:
                if b not in seen and rank[(a, b)] >= t:
                    seen.add(b)
                    todo.append(b)
        if all(v in seen for v in members):
            return t
    return min(rank[(a, b)] for a in pool for b in pool if a != b)


def _subset_bound(members: list, candidates: list, pair_min: int, pair_total: int, rank: dict, k: int,
                  deg: int) -> tuple:
    """An upper bound, item by item, of the key (ring bottleneck, 2 x ring sum, weakest pair,
    2 x pair sum) of any k-subset made of ``members`` and k - len(members) of ``candidates``.
    Each GPU of the subset has ``deg`` ring partners and k - 1 partners in all: the members and,
    of the candidates, only as many as are still to pick; so the best links it can have among
    those bound what it contributes (for the GPUs still to pick, the best of those bounds). And
    the ring's bottleneck cannot beat the weakest link needed to join the members at all. A
    GPU sends one hop and receives one: from two partners, or both over the one link of a
    ring of two (:func:`ddlab.base.rings.best_ring` counts that link twice in the ring's sum)."""
    need = k - len(members)
    hops = 2 // deg                   # ring hops per ring partner

    def best_links(v):
        known = [rank[(v, u)] for u in members if u != v]
        extra = sorted((rank[(v, c)] for c in candidates if c != v), reverse=True)
        return sorted(known + extra[:need - (0 if v in members else 1)], reverse=True)

    mine = {v: best_links(v) for v in members + candidates}
    bn = [_widest_connection(members, members + candidates, rank)] + [mine[v][deg - 1] for v in members]
    weak = [pair_min] + [mine[v][k - 2] for v in members]
    ring2 = hops * sum(sum(mine[v][:deg]) for v in members)
    total2 = 2 * pair_total
    if need:
        bn.append(sorted((mine[c][deg - 1] for c in candidates), reverse=True)[need - 1])
        ring2 += hops * sum(sorted((sum(mine[c][:deg]) for c in candidates), reverse=True)[:need])
        # A GPU still to pick links to every member (known) and to need - 1 other picks.
        gains = []
        for c in candidates:
            to_picks = sorted((rank[(c, u)] for u in candidates if u != c), reverse=True)[:need - 1]
            gains.append(2 * sum(rank[(c, u)] for u in members) + sum(to_picks))
        total2 += sum(sorted(gains, reverse=True)[:need])
    return (min(bn), ring2, min(weak), total2)


def _search_best_subset(gpus: list, rank: dict, k: int, stats: Optional[dict] = None) -> tuple:
    """The k of ``gpus`` with the best key (ring bottleneck, ring sum, weakest pair, sum of all
    pair ranks); ties go to the lowest GPU numbers. Branch and bound over subsets in ascending
    order: a partial subset stops when even its optimistic key (:func:`_subset_bound`) cannot
    beat the best found. Returns (members, key, ring order). ``stats`` counts the nodes.

    On at most 8 GPUs no search costs more than the exhaustive C(8, k) subsets x (k-1)! rings
    (a few thousand nodes, well under a second for every k). On larger machines an all-equal
    fabric (NVSwitch) stays at a few nodes per GPU, but a 12-16 GPU PCIe tree with rings that
    must cross sockets can take seconds for large k: the bounds leave many rings to try."""
    deg = 2 if k >= 3 else 1          # ring partners per GPU
    best = [None, None, None]         # members, key, ring

    def grow(members: list, pair_min: int, pair_total: int, candidates: list):
        if stats is not None:
            stats["subset_nodes"] = stats.get("subset_nodes", 0) + 1
        m = len(members)
        if m == k:
            # Only a ring at least as good as the best subset's can make this subset win.
            ring = rings.best_ring(members, lambda a, b: rank[(a, b)], floor=best[1][:2] if best[1] else None,
                                   stats=stats)
            if ring is None:
                return
            key = (ring.bottleneck, ring.total, pair_min, pair_total)
            if best[1] is None or key > best[1]:
                best[0], best[1], best[2] = list(members), key, ring.order
            return
        if m + len(candidates) < k:
            return
        if best[1] is not None and _subset_bound(members, candidates, pair_min, pair_total, rank, k, deg) <= \
                (best[1][0], 2 * best[1][1], best[1][2], 2 * best[1][3]):
            return
        for idx, v in enumerate(candidates):
            links = [rank[(v, u)] for u in members]
            grow(members + [v], min([pair_min] + links), pair_total + sum(links), candidates[idx + 1:])

    grow([], _NO_LINK, 0, list(gpus))
    return best[0], best[1], best[2]



def _rank(topo, gpus) -> dict:
    return {(i, j): topo.link(i, j).rank for i in gpus for j in gpus if i != j}


def ranked_pairs(topo) -> list:
    """GPU pairs from best link to worst, ties kept together: a list of :class:`PairGroup`
    (``place``, ``label``, ``kind``, ``rank``, ``pairs``), best first."""
    by_rank: dict = {}
    for i, j in topo.pairs():
        by_rank.setdefault(topo.link(i, j).rank, []).append((i, j))
    groups = []
    for place, r in enumerate(sorted(by_rank, reverse=True), 1):
        ps = sorted(by_rank[r])
        labels = sorted({topo.link(i, j).label for i, j in ps})
        first = topo.link(*ps[0])
        groups.append(PairGroup(place, "/".join(labels), first.kind, r, ps))
    return groups


def best_subset(topo, k: int) -> Subset:
    """The k GPUs of ``topo`` that make the best ring for an all-reduce, with that ring.

    All-reduce runs on rings (reduce-scatter then all-gather, each GPU sending to the next),
    so its bandwidth is set by the slowest link *on the ring*, not by the weakest pair
    among the k GPUs. Subsets are ranked by, in order: the bottleneck link of their best
    ring, that ring's sum of link ranks, the weakest pair among them, the sum of all their
    pair ranks, and the lowest GPU numbers. On a DGX-1 V100 (hybrid cube-mesh), GPUs 0, 1,
    4 and 5 have a SYS pair (0-5) but the all-NVLink ring 0-1-5-4.

    Exact (branch and bound, see :func:`_search_best_subset`); an 8-GPU machine scores at
    most C(8, k) subsets of at most (k-1)!/2 rings each, and pruning cuts most of them."""
    gpus = topo.gpus
    if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= len(gpus):
        raise ValueError(f"k must be a whole number from 1 to {len(gpus)} (the GPUs in this topology), got {k!r}")
    if k == 1:
        return Subset((gpus[0],), None, 0, ring=(gpus[0],))
    members, _, order = _search_best_subset(gpus, _rank(topo, gpus), k)
    return _scored(topo, members, order)


def subset(topo, gpus) -> Subset:
    """Score GPUs of your choice the way :func:`best_subset` does: their best ring and its
    bottleneck, their weakest pair. ``subset(topo, [0, 1, 4, 5]).ring_text()``."""
    try:
        chosen = sorted({int(g) for g in gpus})
    except (TypeError, ValueError):
        raise ValueError(f"give GPU numbers, like [0, 1, 4, 5]; got {gpus!r}") from None
    unknown = [g for g in chosen if g not in topo.gpus]
    if unknown or not chosen:
        raise ValueError(f"GPU{unknown[0] if unknown else '?'} is not on this machine; its GPUs are "
                         f"{', '.join(map(str, topo.gpus))}")
    if len(chosen) == 1:
        return Subset((chosen[0],), None, 0, ring=(chosen[0],))
    rank = _rank(topo, chosen)
    return _scored(topo, chosen, rings.best_ring(chosen, lambda a, b: rank[(a, b)]).order)


def _scored(topo, members: list, order: tuple) -> Subset:
    pair_links = [topo.link(a, b) for a, b in itertools.combinations(members, 2)]
    hops = list(zip(order, order[1:])) + ([(order[-1], order[0])] if len(order) > 2 else [])
    return Subset(tuple(members), min(pair_links, key=lambda ln: ln.rank), sum(ln.rank for ln in pair_links),
                  ring=tuple(order), ring_links=tuple(topo.link(a, b) for a, b in hops))
