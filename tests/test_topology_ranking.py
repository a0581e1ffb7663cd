"""ddlab.system.topology_ranking: ranked pairs, the best k GPUs for a ring and their best ring,
against a brute force over every subset and every ring."""
import itertools

import pytest

from ddlab.system import topology, topology_ranking as ranking

from test_topology import fixture


def rings(members):
    """Every ring over ``members`` once per direction: fix the first GPU, permute the rest."""
    if len(members) == 2:
        yield tuple(members), [tuple(members)]
        return
    for rest in itertools.permutations(members[1:]):
        order = (members[0],) + rest
        yield order, list(zip(order, order[1:] + order[:1]))


def brute_force(t, k):
    """(key, gpus) of the best k-subset by exhaustive search: every subset, every ring."""
    rank = {(a, b): t.link(a, b).rank for a in t.gpus for b in t.gpus if a != b}
    best = None
    for combo in itertools.combinations(t.gpus, k):
        ranks = [rank[p] for p in itertools.combinations(combo, 2)]
        ring = max((min(rank[h] for h in hops), sum(rank[h] for h in hops)) for _, hops in rings(combo))
        key = ring + (min(ranks), sum(ranks))
        if best is None or key > best[0]:
            best = (key, combo)
    return best


def assert_is_ring(t, s):
    """``s.ring`` visits each of ``s.gpus`` once and ``s.ring_links`` are the links between stops."""
    assert sorted(s.ring) == sorted(s.gpus)
    hops = list(zip(s.ring, s.ring[1:] + s.ring[:1])) if len(s.ring) > 2 else [tuple(s.ring)]
    assert [ln.label for ln in s.ring_links] == [t.link(a, b).label for a, b in hops]


@pytest.mark.parametrize("name", ["p100x8_dgx1_mlx5_soc.txt", "pcie8x_two_switch_levels.txt",
                                  "k80x4_spaces_mlx4_oldest_legend.txt", "v100x4_glued_header.txt",
                                  "pcie3x_no_affinity_crlf.txt", "a100x8_nic_legend_tabs.txt"])
def test_best_subset_matches_brute_force_over_every_ring(name):
    t = fixture(name)
    for k in range(2, len(t.gpus) + 1):
        s = ranking.best_subset(t, k)
        (bottleneck, ring_total, weakest, total), combo = brute_force(t, k)
        assert (s.ring_bottleneck.rank, s.ring_total, s.weakest.rank, s.total_rank) == \
            (bottleneck, ring_total, weakest, total), (name, k)
        assert s.gpus == combo  # ties go to the lowest GPU numbers, like the brute force
        assert_is_ring(t, s)


def test_best_subset_matches_brute_force_on_the_recorded_dgx1():
    t = topology.recorded("dgx1-v100")
    for k in range(2, 9):
        s = ranking.best_subset(t, k)
        (bottleneck, ring_total, weakest, total), combo = brute_force(t, k)
        assert (s.ring_bottleneck.rank, s.ring_total, s.gpus) == (bottleneck, ring_total, combo), k
        assert_is_ring(t, s)


def test_dgx1_rings_use_nvlink_where_the_weakest_pair_is_sys():
    # The DGX-1 V100 hybrid cube-mesh: two fully NVLinked quads {0,1,2,3} and {4,5,6,7} joined
    # by 0-4, 1-5, 2-6, 3-7; every GPU has two NV2 and two NV1 neighbours, the rest are SYS.
    t = topology.recorded("dgx1-v100")
    s = ranking.subset(t, [0, 1, 2, 4, 5])
    assert s.weakest.kind == "SYS"                          # e.g. 0-5 ...
    assert s.ring == (0, 2, 1, 5, 4)                        # ... but this ring is all NVLink
    assert [ln.label for ln in s.ring_links] == ["NV1", "NV2", "NV2", "NV1", "NV2"]
    assert s.ring_bottleneck.label == "NV1"
    assert s.ring_text() == "0 -NV1- 2 -NV2- 1 -NV2- 5 -NV1- 4 -NV2- 0"
    s = ranking.subset(t, [5, 4, 1, 0])
    assert s.weakest.kind == "SYS" and s.ring == (0, 1, 5, 4) and s.ring_bottleneck.label == "NV1"
    assert ranking.subset(t, [0, 1, 2, 3]).ring_bottleneck.label == "NV1"


def test_dgx1_best_subsets_by_reasoning_on_the_cube_mesh():
    t = topology.recorded("dgx1-v100")
    # The NV2 links form one 8-cycle, 0-3-2-1-5-6-7-4-0: all 8 GPUs have an all-NV2 ring, and
    # no smaller set has one (a cycle has no shorter cycle inside it).
    s8 = ranking.best_subset(t, 8)
    assert s8.ring == (0, 3, 2, 1, 5, 6, 7, 4) and {ln.label for ln in s8.ring_links} == {"NV2"}
    assert s8.weakest.kind == "SYS"
    # k = 7: drop one GPU from the NV2 cycle and close the gap with the NVLink between its two
    # neighbours: six NV2 links and one NV1, bottleneck NV1. Dropping 2, 3, 6 or 7 works (their
    # cycle neighbours share an NV1), and every GPU has the same links, so the tie goes to the
    # lowest numbers: GPUs 0-6, gap 6-4 closed by NV1.
    s7 = ranking.best_subset(t, 7)
    assert s7.gpus == (0, 1, 2, 3, 4, 5, 6)
    assert s7.ring_bottleneck.label == "NV1"
    assert sorted(ln.label for ln in s7.ring_links) == ["NV1"] + ["NV2"] * 6
    assert s7.ring == (0, 3, 2, 1, 5, 6, 4)
    # k = 6: six GPUs along the NV2 cycle (five NV2 links) whose ends share an NV1: the ends
    # 3 apart on the cycle the other way, (0,1), (2,6), (4,5) or (3,7). Each set has the same
    # pairs, so the lowest wins: 4-0-3-2-1-5, closed by 5-4 (NV1).
    s6 = ranking.best_subset(t, 6)
    assert s6.gpus == (0, 1, 2, 3, 4, 5)
    assert s6.ring_bottleneck.label == "NV1"
    assert sorted(ln.label for ln in s6.ring_links) == ["NV1"] + ["NV2"] * 5
    assert s6.ring_text() == "0 -NV2- 3 -NV2- 2 -NV2- 1 -NV2- 5 -NV1- 4 -NV2- 0"
    # k = 5 needs both quads, so a SYS pair, yet its ring is all NVLink (three NV2, two NV1:
    # four NV2 would need two GPUs opposite on the NV2 cycle joined by NVLink, and none are).
    s5 = ranking.best_subset(t, 5)
    assert s5.weakest.kind == "SYS" and s5.ring_bottleneck.label == "NV1"
    assert sorted(ln.label for ln in s5.ring_links) == ["NV1", "NV1", "NV2", "NV2", "NV2"]
    # k = 4: a fully NVLinked quad; its ring has three NV2 links and one NV1.
    s4 = ranking.best_subset(t, 4)
    assert s4.gpus == (0, 1, 2, 3) and s4.weakest.kind == "NVLINK" and s4.ring_total == 3 * 102 + 101
    assert ranking.best_subset(t, 2).ring_bottleneck.label == "NV2"
    assert ranking.best_subset(t, 2).ring_text() == "0 -NV2- 3"
    d = s6.to_dict()
    assert d["ring"] == [0, 3, 2, 1, 5, 4] and d["ring_bottleneck"] == "NV1" and d["weakest"] == "SYS"
    assert d["ring_links"] == ["NV2", "NV2", "NV2", "NV2", "NV1", "NV2"]


def test_subset_rejects_gpus_not_on_the_machine():
    t = topology.recorded("dgx1-v100")
    with pytest.raises(ValueError, match="GPU9 is not on this machine"):
        ranking.subset(t, [0, 9])
    with pytest.raises(ValueError, match="give GPU numbers"):
        ranking.subset(t, "zero")
    assert ranking.subset(t, [3]).ring == (3,) and ranking.subset(t, [3]).ring_bottleneck is None


def test_best_subset_search_is_bounded_on_16_gpus_and_checks_k():
    # Work counted, not timed: on 16 equal GPUs the first subset and ring found are perfect
    # and the bounds prune the rest: each level of the search tries each GPU about once, so
    # the nodes grow linearly with k (against C(16, k) x (k-1)! rings without pruning).
    t = fixture("v100x16_nv6_all_pairs.txt")
    gpus = t.gpus
    rank = {(i, j): t.link(i, j).rank for i in gpus for j in gpus if i != j}
    for k in range(2, 17):
        stats = {}
        members, key, order = ranking._search_best_subset(gpus, rank, k, stats)
        assert members == list(range(k)) and key[0] == rank[(0, 1)]
        assert stats["subset_nodes"] <= 16 * (k + 1) and stats.get("ring_nodes", 0) <= 48 * k, (k, stats)
    for k in range(1, 17):
        s = ranking.best_subset(t, k)
        assert len(s.gpus) == k
    assert ranking.best_subset(t, 8).gpus == tuple(range(8))
    assert ranking.best_subset(t, 1).weakest is None and ranking.best_subset(t, 1).ring == (0,)
    for bad in (0, 17, 2.5, "2"):
        with pytest.raises(ValueError, match="k must be"):
            ranking.best_subset(t, bad)


def test_best_subset_search_on_an_8_gpu_machine_stays_within_the_exhaustive_bound():
    # Without pruning an 8-GPU machine costs sum over k of C(8, k) x (k-1)! ring nodes at most;
    # the pruned search must stay well inside that.
    t = topology.recorded("dgx1-v100")
    gpus = t.gpus
    rank = {(i, j): t.link(i, j).rank for i in gpus for j in gpus if i != j}
    for k in range(3, 9):
        stats = {}
        ranking._search_best_subset(gpus, rank, k, stats)
        exhaustive = len(list(itertools.combinations(gpus, k))) * sum(
            len(list(itertools.permutations(range(k - 1), d))) for d in range(k))
        assert stats["ring_nodes"] < exhaustive, (k, stats, exhaustive)


def test_ranked_pairs_groups_ties_best_first():
    t = fixture("pcie8x_two_switch_levels.txt")
    groups = ranking.ranked_pairs(t)
    assert [(g.place, g.label, len(g.pairs)) for g in groups] == [(1, "PIX", 4), (2, "PXB", 8), (3, "SYS", 16)]
    assert groups[0].pairs == [(0, 1), (2, 3), (4, 5), (6, 7)]
    assert groups[0].to_dict()["pairs"][0] == [0, 1]
    assert ranking.ranked_pairs(fixture("gh200x1_gpu_numa_id.txt")) == []
