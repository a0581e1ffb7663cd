"""The best ring through a set of nodes (GPUs): the one search that both the topology's link
ranks and a measured p2p bandwidth matrix use.

A ring all-reduce sends around a cycle that visits every GPU once, each GPU to the next, so it
runs at the speed of its slowest hop. :func:`best_ring` finds the Hamiltonian cycle whose slowest
hop is fastest; ties go to the larger sum of hops, then to the lowest order (the ring starts at
the lowest node and, among equal rings, the first in ascending order wins). The weight of a hop
may depend on its direction (``weight(a, b) != weight(b, a)``, as measured bandwidths do): the
ring ``0 -> 2 -> 1 -> 0`` is then a different ring from ``0 -> 1 -> 2 -> 0``. A ring of two nodes
goes there and back: its hops are ``a -> b`` and ``b -> a``.
"""
from __future__ import annotations

import numbers
from typing import Callable, Iterable, NamedTuple, Optional


class Ring(NamedTuple):
    """A ring ``order[0] -> order[1] -> ... -> order[-1] -> order[0]``, its slowest hop and
    the sum of its hops."""
    order: tuple
    bottleneck: float
    total: float


def _best_two(cands: list) -> list:
    """The two best (weight, node) of ``cands``, best first."""
    return sorted(cands, key=lambda c: c[0], reverse=True)[:2]


def _distinct_pair(ins: list, outs: list) -> tuple:
    """(best min, best sum) of an in-hop from ``ins`` and an out-hop to ``outs`` (lists of
    (weight, node)) from and to two different nodes: in a ring of three or more a node's
    predecessor is not its successor."""
    (i1, n1), (o1, m1) = ins[0], outs[0]
    if n1 != m1:
        return min(i1, o1), i1 + o1
    pairs = ([(i1, outs[1][0])] if len(outs) > 1 else []) + ([(ins[1][0], o1)] if len(ins) > 1 else [])
    return max(min(a, b) for a, b in pairs), max(a + b for a, b in pairs)


def best_ring(nodes: Iterable, weight: Callable, floor: Optional[tuple] = None,
              stats: Optional[dict] = None) -> Optional[Ring]:
    """The best :class:`Ring` through all of ``nodes`` (at least two, sortable) for the hop
    weights ``weight(a, b)`` (higher is better; directed): the slowest hop fastest, then the
    largest sum of hops, then the lowest order.

    Branch and bound from the lowest node: at most (k-1)! rings for k nodes (5040 for 8), far
    fewer in practice. A partial ring stops when its optimistic key (its slowest hop so far, the
    best hops left out of its two ends, and for every node still to visit the best in-hop and
    out-hop it can still get, from and to two different nodes) cannot beat the best ring found,
    or falls below ``floor`` (bottleneck, sum): a key the caller already has elsewhere. None when
    no ring reaches ``floor``. ``stats["ring_nodes"]`` counts the partial rings tried."""
    members = sorted(nodes)
    k = len(members)
    if k < 2 or len(set(members)) != k:
        raise ValueError(f"a ring needs at least two different nodes, got {members!r}")
    w = {(a, b): weight(a, b) for a in members for b in members if a != b}
    # Sums of floats depend on their order: bounds leave room for that, so no ring that is
    # better by a rounding error is cut. Whole-number weights are exact.
    slack = 0 if all(isinstance(x, numbers.Integral) for x in w.values()) else \
        1e-9 * k * max(1.0, max(abs(x) for x in w.values()))
    start = members[0]
    best: list = [(float("-inf"), float("-inf")) if floor is None else tuple(floor), None]

    def consider(key: tuple, order: tuple):
        if key > best[0] or (best[1] is None and key == best[0]):
            best[0], best[1] = key, order

    def count():
        if stats is not None:
            stats["ring_nodes"] = stats.get("ring_nodes", 0) + 1

    if k == 2:
        count()
        a, b = members
        consider((min(w[a, b], w[b, a]), w[a, b] + w[b, a]), (a, b))
        return Ring(best[1], *best[0]) if best[1] is not None else None

    path, visited = [start], {start}

    def extend(cur_min, cur_sum):
        count()
        end = path[-1]
        if len(path) == k:
            r = w[end, start]
            consider((min(cur_min, r), cur_sum + r), tuple(path))
            return
        left = [u for u in members if u not in visited]
        end_best = max(w[end, u] for u in left)
        start_best = max(w[u, start] for u in left)
        bn_ub, sum2_ub = min(cur_min, end_best, start_best), 2 * cur_sum + end_best + start_best
        # Each node still to visit gets one hop in (from another such node or the path's end)
        # and one out (to another such node or the path's start).
        for u in left:
            ins = _best_two([(w[s, u], s) for s in left if s != u] + [(w[end, u], end)])
            outs = _best_two([(w[u, d], d) for d in left if d != u] + [(w[u, start], start)])
            low, both = _distinct_pair(ins, outs)
            bn_ub = min(bn_ub, low)
            sum2_ub += both
        # Each hop still to add counts at both its ends, hence twice the sum.
        target = (best[0][0], 2 * best[0][1])
        bound = (bn_ub, sum2_ub + slack)
        if bound < target or (best[1] is not None and bound == target):
            return
        for u in left:
            r = w[end, u]
            path.append(u)
            visited.add(u)
            extend(min(cur_min, r), cur_sum + r)
            path.pop()
            visited.discard(u)

    extend(float("inf"), 0)
    return Ring(best[1], *best[0]) if best[1] is not None else None
