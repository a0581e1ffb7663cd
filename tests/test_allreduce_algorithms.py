"""The simulated all-reduce algorithms: right sums, exact traffic, and why gradients are averaged."""
from fractions import Fraction

import numpy as np
import pytest

from ddlab.cost import allreduce_algorithms as ar
from ddlab.cost import alpha_beta


def _int_buffers(n, elements, seed=1):
    rng = np.random.default_rng(seed)
    return [rng.integers(-1000, 1000, size=elements).astype(np.int64) for _ in range(n)]


@pytest.mark.parametrize("algorithm", ar.ALGORITHMS)
@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 8])
@pytest.mark.parametrize("elements", [1, 3, 7, 10, 64, 1001])
def test_every_rank_ends_with_the_exact_sum(algorithm, n, elements):
    bufs = _int_buffers(n, elements)
    expected = np.sum(bufs, axis=0)
    run = ar.allreduce(bufs, algorithm)
    assert len(run.results) == n
    for r in run.results:
        np.testing.assert_array_equal(r, expected)
    assert run.max_error(bufs) == 0
    # the caller's buffers are left alone
    np.testing.assert_array_equal(bufs[0], _int_buffers(n, elements)[0])


def test_float_buffers_sum_to_rounding():
    bufs = ar.random_buffers(6, 999, seed=3)
    run = ar.ring_allreduce(bufs)
    assert run.max_error(bufs) < 1e-5
    assert run.results[0].dtype == np.float32


@pytest.mark.parametrize("n", [2, 3, 4, 8, 16])
def test_ring_traffic_is_exactly_2_n_minus_1_over_n_when_chunks_are_equal(n):
    elements = 12 * n                           # divides evenly: chunks of 12 elements
    run = ar.ring_allreduce(_int_buffers(n, elements))
    S = elements * 8
    assert run.buffer_bytes == S
    assert len(run.steps) == 2 * (n - 1)
    assert [s.phase for s in run.steps] == ["reduce-scatter"] * (n - 1) + ["all-gather"] * (n - 1)
    # every step: each rank sends exactly one chunk of S/n to its right neighbour
    per_step = run.sent_per_step()
    assert per_step.shape == (2 * (n - 1), n)
    assert (per_step == S // n).all()
    for s in run.steps:
        assert sorted((t.src, t.dst) for t in s.transfers) == [(r, (r + 1) % n) for r in range(n)]
    factor = ar.ring_traffic_factor(n)
    assert factor == Fraction(2 * (n - 1), n)
    assert (run.bytes_sent() == factor * S).all() and (run.bytes_received() == factor * S).all()
    assert run.traffic_factor() == pytest.approx(float(factor))


@pytest.mark.parametrize("n,elements", [(3, 10), (4, 10), (4, 3), (5, 17), (8, 5)])
def test_ring_traffic_with_uneven_chunks(n, elements):
    run = ar.ring_allreduce(_int_buffers(n, elements))
    sizes = [(b - a) * 8 for a, b in ar.chunk_bounds(elements, n)]
    assert run.chunk_bytes == sizes and sum(sizes) == elements * 8
    assert max(sizes) - min(sizes) <= 8
    # rank r never sends chunk r+1 in the reduce-scatter nor chunk r+2 in the all-gather
    for r in range(n):
        assert run.bytes_sent()[r] == 2 * elements * 8 - sizes[(r + 1) % n] - sizes[(r + 2) % n]
    assert run.bytes_sent().sum() == run.bytes_received().sum()


def test_chunk_bounds():
    assert ar.chunk_bounds(10, 4) == [(0, 3), (3, 6), (6, 8), (8, 10)]
    assert ar.chunk_bounds(3, 4) == [(0, 1), (1, 2), (2, 3), (3, 3)]
    assert ar.chunk_bounds(0, 2) == [(0, 0), (0, 0)]
    with pytest.raises(ValueError, match="positive integer"):
        ar.chunk_bounds(10, 0)


@pytest.mark.parametrize("n", [2, 3, 4, 8])
def test_naive_root_sends_and_receives_n_minus_1_buffers(n):
    S = 40 * 4
    run = ar.naive_allreduce(ar.random_buffers(n, 40), root=1)
    assert [s.phase for s in run.steps] == ["reduce", "broadcast"]
    sent, received = run.bytes_sent(), run.bytes_received()
    assert sent[1] == received[1] == (n - 1) * S
    others = [r for r in range(n) if r != 1]
    assert (sent[others] == S).all() and (received[others] == S).all()
    assert run.busiest_rank() == (1 if n > 2 else 0)    # n = 2: a tie, the lowest rank
    assert run.traffic_factor() == n - 1
    # the root's link receives every message of the reduce step
    assert run.steps[0].messages(n)[1] == n - 1


@pytest.mark.parametrize("n", [2, 4, 8])
def test_all_to_all_each_rank_sends_n_minus_1_buffers(n):
    S = 25 * 4
    run = ar.all_to_all_allreduce(ar.random_buffers(n, 25))
    assert len(run.steps) == 1
    assert (run.bytes_sent() == (n - 1) * S).all() and (run.bytes_received() == (n - 1) * S).all()


def test_one_rank_sends_nothing():
    for algorithm in ar.ALGORITHMS:
        run = ar.allreduce([np.arange(5)], algorithm)
        assert run.steps == [] and run.bytes_sent().tolist() == [0]
        assert run.time(1e-6, 1e9) == 0


@pytest.mark.parametrize("n", [2, 3, 4, 8])
def test_ring_time_matches_the_cost_model(n):
    elements = 1000 * n
    run = ar.ring_allreduce(ar.random_buffers(n, elements))
    alpha, beta = 5e-6, 20e9
    assert run.time(alpha, beta) == pytest.approx(alpha_beta.ring_allreduce_time(elements * 4, n, alpha, beta))


def test_naive_time_grows_with_n_and_ring_does_not():
    S_elems, alpha, beta = 250_000, 5e-6, 20e9
    naive = [ar.naive_allreduce(ar.random_buffers(n, S_elems)).time(alpha, beta) for n in (2, 4, 8)]
    ring = [ar.ring_allreduce(ar.random_buffers(n, S_elems)).time(alpha, beta) for n in (2, 4, 8)]
    S = S_elems * 4
    assert naive[2] == pytest.approx(2 * 7 * (alpha + S / beta))
    assert naive[0] < naive[1] < naive[2]
    assert max(ring) < 2 * S / beta + 14 * alpha + 1e-12


def test_keep_states_records_each_step_start():
    n = 3
    start = [np.full(n, 2 ** r, dtype=np.int64) for r in range(n)]
    run = ar.ring_allreduce(start, keep_states=True)
    assert all(s.before is not None for s in run.steps)
    np.testing.assert_array_equal(run.steps[0].before[2], start[2])
    # after the reduce-scatter rank r holds the complete chunk (r+1) mod n (bits of every rank)
    after_rs = run.steps[n - 1].before
    for r in range(n):
        assert after_rs[r][(r + 1) % n] == 2 ** n - 1
    assert ar.ring_allreduce(start).steps[0].before is None


def test_bad_input_gets_one_clear_message():
    with pytest.raises(ValueError, match="same length"):
        ar.ring_allreduce([np.zeros(3), np.zeros(4)])
    with pytest.raises(ValueError, match="one buffer per rank"):
        ar.ring_allreduce([])
    with pytest.raises(ValueError, match="same dtype"):
        ar.ring_allreduce([np.zeros(3, np.float32), np.zeros(3, np.float64)])
    with pytest.raises(ValueError, match="numbers"):
        ar.ring_allreduce([np.array(["a", "b"])])
    with pytest.raises(ValueError, match="root must be a rank between 0 and 1"):
        ar.naive_allreduce([np.zeros(2), np.zeros(2)], root=2)
    with pytest.raises(ValueError, match="unknown all-reduce algorithm 'tree'; choose one of naive"):
        ar.allreduce([np.zeros(2)], "tree")
    with pytest.raises(ValueError, match="beta > 0"):
        ar.ring_allreduce([np.zeros(2), np.zeros(2)]).time(1e-6, 0)


def test_table_and_compare_show_the_traffic():
    run = ar.ring_allreduce(_int_buffers(4, 8))
    table = run.table()
    assert [r["phase"] for r in table.rows][:4] == ["reduce-scatter 1", "reduce-scatter 2", "reduce-scatter 3",
                                                    "all-gather 1"]
    assert table.rows[-2]["rank 0"] == 96 and table.rows[-1]["phase"] == "received"    # 1.5 x 64 bytes
    text = str(run)
    assert "reduce-scatter 3" in text and "busiest rank" in text and "1.5 buffers" in text
    assert "<table" in table._repr_html_()
    traffic = ar.compare(ranks=(2, 4), elements=1000)
    assert [r["ranks"] for r in traffic.rows] == [2, 4]
    four = traffic.rows[1]
    assert (four["naive"], four["all-to-all"], four["ring"]) == (3, 3, 1.5)
    assert four["factor"] == "3/2 = 1.5" and four["ok"] == "yes" and four["buffer"] == 4000
    timed = ar.compare(ranks=(2, 8), elements=1000, link=(5e-6, 20e9))
    eight = timed.rows[1]
    assert eight["ring"] == pytest.approx(alpha_beta.ring_allreduce_time(4000, 8, 5e-6, 20e9))
    assert eight["naive"] > eight["ring"] and "alpha = 5 us" in timed.title


def test_gradient_averaging_mean_is_the_full_batch_gradient():
    g = ar.gradient_averaging(workers=4, batch=64, features=3, seed=2)
    assert g.full.shape == (4,) and len(g.shards) == 4
    assert g.mean_error < 1e-12
    assert g.sum_ratio == pytest.approx(4)
    # the shards really differ from each other and from the whole batch
    assert min(np.max(np.abs(s - g.full)) for s in g.shards) > 1e-3
    text = str(g)
    assert "mean of the 4 shards" in text and "full-batch gradient" in text


def test_gradient_averaging_unequal_shards_need_weights():
    g = ar.gradient_averaging(workers=3, batch=64, seed=1)
    assert g.shard_sizes == [22, 21, 21] and not g.equal_shards
    assert g.mean_error > 1e-6                 # the plain mean is off
    assert g.weighted_error < 1e-12            # weighting by shard size repairs it
    text = str(g)
    assert "NOT the full-batch gradient" in text and "mean weighted by size" in text
    equal = ar.gradient_averaging(workers=4, batch=64)
    assert equal.equal_shards and np.allclose(equal.weighted_mean, equal.mean)
    assert "weighted" not in str(equal)


def test_gradient_averaging_bad_input():
    with pytest.raises(ValueError, match="workers must be a positive integer"):
        ar.gradient_averaging(workers=0)
    with pytest.raises(ValueError, match="batch >= workers"):
        ar.gradient_averaging(workers=8, batch=4)
