"""ddlab.base.rings: the one best-ring search, against a brute force over every ring (symmetric
and directed weights, whole numbers and floats), its floor, its errors and its pruning."""
import itertools
import random

import pytest

from ddlab.base.rings import Ring, best_ring


def brute_force(nodes, w):
    """Every ring from the lowest node, in ascending order; the first with the best key wins."""
    nodes = sorted(nodes)
    best = None
    for rest in itertools.permutations(nodes[1:]):
        order = (nodes[0],) + rest
        hops = [w(a, b) for a, b in zip(order, order[1:] + order[:1])]
        key = (min(hops), sum(hops))
        if best is None or key > best[0]:
            best = (key, order)
    return Ring(best[1], *best[0])


@pytest.mark.parametrize("directed", [False, True])
@pytest.mark.parametrize("kind", ["int", "float"])
def test_matches_brute_force_on_random_weights(directed, kind):
    rng = random.Random(f"{directed}{kind}")
    for trial in range(60):
        k = rng.randint(2, 7)
        nodes = rng.sample(range(20), k)
        draw = (lambda: rng.choice([10, 20, 30, 101, 102, 112])) if kind == "int" else \
            (lambda: round(rng.uniform(1, 30), rng.choice([0, 1, 3])))
        table = {}
        for a, b in itertools.permutations(nodes, 2):
            table[(a, b)] = draw() if directed or (b, a) not in table else table[(b, a)]
        w = (lambda a, b: table[(a, b)])
        assert best_ring(nodes, w) == brute_force(nodes, w), (trial, table)


def test_direction_matters_when_the_weights_are_directed():
    # 0 -> 1 is slow (14) but 1 -> 0 fast (24): the ring must run 0 -> 2 -> 1 -> 0, not 0 -> 1 -> 2 -> 0.
    w = {(a, b): 24.0 for a, b in itertools.permutations(range(3), 2)}
    w[(0, 1)] = 14.0
    ring = best_ring([0, 1, 2], lambda a, b: w[(a, b)])
    assert ring == Ring((0, 2, 1), 24.0, 72.0)
    # the same weights read the other way round: the ring turns too
    back = best_ring([0, 1, 2], lambda a, b: w[(b, a)])
    assert back.order == (0, 1, 2) and back.bottleneck == 24.0


def test_two_nodes_go_there_and_back():
    w = {(3, 7): 5, (7, 3): 9}
    assert best_ring([7, 3], lambda a, b: w[(a, b)]) == Ring((3, 7), 5, 14)


def test_ties_go_to_the_larger_sum_then_the_lowest_order():
    # Every ring has bottleneck 1; four rings use both 5s (sum 12), and the lowest of them wins.
    w = {(a, b): 1 for a, b in itertools.permutations(range(4), 2)}
    w[(0, 2)] = w[(2, 0)] = w[(1, 3)] = w[(3, 1)] = 5
    assert best_ring(range(4), lambda a, b: w[(a, b)]) == Ring((0, 1, 3, 2), 1, 12)
    # one more on the hop 3 -> 1: only the two rings through it reach 13
    w[(3, 1)] = 6
    assert best_ring(range(4), lambda a, b: w[(a, b)]) == Ring((0, 2, 3, 1), 1, 13)
    same = best_ring(range(5), lambda a, b: 7)
    assert same == Ring((0, 1, 2, 3, 4), 7, 35)


def test_dgx1_hybrid_cube_mesh_has_an_all_nv2_ring():
    # The DGX-1 V100: its NV2 links form one 8-cycle, 0-3-2-1-5-6-7-4-0; NV1 joins the rest of each
    # GPU's NVLink neighbours, everything else is SYS (ranks as ddlab.system.topology_parse gives them).
    nv2 = [(0, 3), (3, 2), (2, 1), (1, 5), (5, 6), (6, 7), (7, 4), (4, 0)]
    nv1 = [(0, 1), (0, 2), (1, 3), (2, 6), (3, 7), (4, 5), (4, 6), (5, 7)]
    rank = {(a, b): 10 for a, b in itertools.permutations(range(8), 2)}
    for pairs, r in ((nv2, 102), (nv1, 101)):
        for a, b in pairs:
            rank[(a, b)] = rank[(b, a)] = r
    ring = best_ring(range(8), lambda a, b: rank[(a, b)])
    assert ring == Ring((0, 3, 2, 1, 5, 6, 7, 4), 102, 8 * 102)
    # GPUs 0, 1, 4, 5 have a SYS pair (0-5) but an all-NVLink ring.
    assert best_ring([5, 4, 1, 0], lambda a, b: rank[(a, b)]) == Ring((0, 1, 5, 4), 101, 101 + 102 + 101 + 102)


def test_floor_keeps_only_rings_at_least_as_good():
    w = {(a, b): 10 for a, b in itertools.permutations(range(4), 2)}
    w[(0, 1)] = w[(1, 0)] = 3
    best = best_ring(range(4), lambda a, b: w[(a, b)])
    assert best.bottleneck == 10
    assert best_ring(range(4), lambda a, b: w[(a, b)], floor=(10, 41)) is None
    assert best_ring(range(4), lambda a, b: w[(a, b)], floor=(best.bottleneck, best.total)) == best
    assert best_ring([0, 1], lambda a, b: w[(a, b)], floor=(4, 0)) is None


def test_pruning_keeps_an_all_equal_fabric_cheap():
    stats = {}
    assert best_ring(range(8), lambda a, b: 112, stats=stats).order == tuple(range(8))
    assert stats["ring_nodes"] <= 8 * 8, stats       # against 1 + 7 + 42 + ... + 5040 partial rings


@pytest.mark.parametrize("nodes", [[], [3], [1, 1]])
def test_a_ring_needs_two_different_nodes(nodes):
    with pytest.raises(ValueError, match="at least two different nodes"):
        best_ring(nodes, lambda a, b: 1)
