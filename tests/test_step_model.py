"""The step model (ddlab.cost.step_model): DDP's buckets, overlap with the backward pass, the
wrapper's costs, the host and device paths, and a measured step profile."""
import pytest

from ddlab.cost import step_model as sm
from ddlab.cost.alpha_beta import AlphaBeta, ring_allreduce_time
from ddlab.training.models import Layer


def test_step_time():
    assert sm.step_time(10, 4) == 14
    assert sm.step_time(10, 4, overlap=1) == 10
    assert sm.step_time(10, 4, overlap=0.5) == 12
    assert sm.step_time(2, 8, overlap=1) == 8
    for bad in (lambda: sm.step_time(1, 1, overlap=1.5), lambda: sm.step_time(-1, 1)):
        with pytest.raises(ValueError):
            bad()


def test_buckets_follow_ddp_first_1MiB_then_25MiB_in_reverse_layer_order():
    mb = 1024 * 1024
    layers = [Layer("a", 10 * mb // 4, 1.0), Layer("b", 10 * mb // 4, 1.0),
              Layer("c", 20 * mb // 4, 1.0), Layer("d", mb // 8, 1.0)]
    b = sm.gradient_buckets(layers)
    # d (0.5 MiB) is below 1 MiB, so c joins the first bucket; then b + a = 20 MiB < 25 MiB
    assert [x.layers for x in b] == [("d", "c"), ("b", "a")]
    assert [x.nbytes for x in b] == [mb // 2 + 20 * mb, 20 * mb]
    assert [x.ready for x in b] == pytest.approx([0.5, 1.0])
    # a smaller cap splits the second bucket; a tensor larger than the cap stays whole
    assert [x.layers for x in sm.gradient_buckets(layers, bucket_cap_mb=5)] == [("d", "c"), ("b",), ("a",)]
    # readiness by parameters: the big layer c holds most of them
    assert sm.gradient_buckets(layers, readiness="params")[0].ready == pytest.approx((20 + 0.5) / 40.5)
    with pytest.raises(ValueError, match="readiness"):
        sm.gradient_buckets(layers, readiness="time")


def test_bucket_count_of_a_course_model():
    # the small MLP's ~1 MB of gradients fit one default bucket; the large one's ~27 MB need more
    assert sm.bucket_count("mlp-small") == len(sm.gradient_buckets("mlp-small")) == 1
    assert sm.bucket_count("mlp-large") == len(sm.gradient_buckets("mlp-large")) > 1


def test_overlap_hides_communication_behind_the_rest_of_the_backward_pass():
    layers = [Layer("early", 1000, 3.0), Layer("late", 10_000_000, 1.0)]  # late's grads come first
    link = AlphaBeta(0.0, 40e6 / 1e-3)            # 40 MB in 1 ms
    p = sm.predict_step(layers, 3e-3, link, 2)       # backward 2 ms; "late" ready after 1/4 of it
    first = p.buckets[0]
    assert first.layers == ("late",) and first.ready == pytest.approx(0.25)
    assert p.comm_s == pytest.approx(1e-3 + 4000 / 40e9)
    assert p.exposed_comm_s == pytest.approx(4000 / 40e9)      # only the last (small) bucket shows
    assert p.total_s == pytest.approx(3e-3 + p.exposed_comm_s)
    # one single tensor: nothing to overlap with, everything is exposed
    q = sm.predict_step(10_000_000, 3e-3, link, 2)
    assert q.exposed_comm_s == pytest.approx(q.comm_s) and len(q.buckets) == 1
    assert q.speedup == pytest.approx(2 * 3e-3 / (3e-3 + 1e-3))
    assert q.efficiency == pytest.approx(q.speedup / 2)


def test_serialised_buckets_queue_behind_each_other():
    layers = [Layer("a", 10_000_000, 1.0), Layer("b", 10_000_000, 1.0)]
    link = AlphaBeta(0.0, 40e6 / 1e-3)
    p = sm.predict_step(layers, 3e-3, link, 2, bucket_cap_mb=1, first_bucket_bytes=None)
    # b ready at 1 ms, its all-reduce ends at 2 ms (= end of backward); a's starts then: 1 ms exposed
    assert p.exposed_comm_s == pytest.approx(1e-3)


def test_overheads_and_the_host_device_paths():
    link = AlphaBeta(10e-6, 100e9)
    over = sm.Overheads(per_step_s=1e-3, per_bucket_s=0.5e-3)
    serial = sm.predict_step("cnn", 2e-3, link, 2, overheads=over)
    assert serial.bound == "serial"
    assert serial.overhead_s == pytest.approx(1e-3 + 2 * 0.5e-3)
    assert serial.total_s == pytest.approx(2e-3 + serial.exposed_comm_s + serial.overhead_s)
    # host-bound (the GPU is busy 0.5 ms of a 2 ms step): the wrapper's host work shows in full
    host = sm.predict_step("cnn", 2e-3, link, 2, overheads=over, device_s=0.5e-3)
    assert host.bound == "host" and host.total_s == pytest.approx(2e-3 + 2e-3)
    assert host.exposed_comm_s == 0
    # device-bound with a slow link: the host's work hides behind the GPU's
    slow = AlphaBeta(10e-6, 1e9)
    dev = sm.predict_step("wide", 2.8e-3, slow, 2, overheads=sm.Overheads(1e-4), device_s=2.7e-3)
    assert dev.bound == "device" and dev.overhead_s == pytest.approx(0.0)
    assert dev.total_s == pytest.approx(2.8e-3 + dev.exposed_comm_s)
    assert sm.predict_step("cnn", 2e-3, link, 1).speedup == 1.0


def test_a_link_from_the_catalogue_uses_the_ring_formula():
    from ddlab.system import links
    nv = links.get("nvlink4_x18")
    t = sm.bucket_allreduce_time(1e8, 4, nv)
    assert t == pytest.approx(ring_allreduce_time(1e8, 4, nv.latency_s, nv.bandwidth_Bps))
    # a sweep's fit is carried to more ranks by 2(n-1)/n at the same bus bandwidth
    fit = AlphaBeta(20e-6, 100e9)
    assert sm.bucket_allreduce_time(1e8, 2, fit) == pytest.approx(20e-6 + 1e-3)
    assert sm.bucket_allreduce_time(1e8, 4, fit) == pytest.approx(20e-6 + 1.5e-3)


@pytest.mark.parametrize("bad", [
    lambda: sm.predict_step("cnn", 0, AlphaBeta(1e-6, 1e9)),
    lambda: sm.predict_step("cnn", 1e-3, AlphaBeta(1e-6, 1e9), 0),
    lambda: sm.predict_step("cnn", 1e-3, AlphaBeta(1e-6, 1e9), backward_fraction=1.5),
    lambda: sm.predict_step("cnn", 1e-3, AlphaBeta(1e-6, 1e9), device_s=-1),
    lambda: sm.predict_step("cnn", 1e-3, AlphaBeta(1e-6, 1e9), batch=0),
    lambda: sm.predict_step([], 1e-3, AlphaBeta(1e-6, 1e9)),
    lambda: sm.Overheads(per_step_s=-1.0),
])
def test_step_model_rejects_bad_input(bad):
    with pytest.raises(ValueError):
        bad()


def test_measured_readiness_and_bucket_copies():
    layers = (Layer("a", 10, 1.0), Layer("b", 1000, 100.0), Layer("c", 10, 1.0))
    # measured: b's gradient is ready a fifth into the backward pass, though it has most of the FLOPs
    b_ready = sm.gradient_buckets(layers, bucket_cap_mb=1e-6, first_bucket_bytes=None, readiness={"c": 0.1, "b": 0.2,
                                                                                                   "a": 1.0})
    assert [(b.layers, b.ready) for b in b_ready] == [(("c",), 0.1), (("b",), 0.2), (("a",), 1.0)]
    assert sm.gradient_buckets(layers, bucket_cap_mb=1e-6, first_bucket_bytes=None)[1].ready > 0.9   # by FLOPs
    with pytest.raises(ValueError, match="no share for layer"):
        sm.gradient_buckets(layers, readiness={"a": 1.0})
    link = AlphaBeta(0.0, 1e7)                      # 4 kB in 400 us
    early = sm.predict_step(layers, 1e-3, link, readiness={"c": 0.1, "b": 0.2, "a": 1.0}, bucket_cap_mb=1e-6,
                            first_bucket_bytes=None)
    late = sm.predict_step(layers, 1e-3, link, readiness={"c": 0.1, "b": 0.99, "a": 1.0}, bucket_cap_mb=1e-6,
                           first_bucket_bytes=None)
    assert early.exposed_comm_s < late.exposed_comm_s
    # an all-reduce holding a share of the SMs slows the backward work beside it: 400 us of the
    # early bucket's all-reduce overlap the backward pass, which then runs at half speed
    kw = dict(readiness={"c": 0.1, "b": 0.2, "a": 1.0}, bucket_cap_mb=1e-6, first_bucket_bytes=None)
    half = sm.predict_step(layers, 1e-3, link, comm_sm_share=0.5, **kw)
    assert early.exposed_comm_s == pytest.approx(4e-6)                # only the last, tiny bucket shows
    # the 4 us and 400 us all-reduces of c and b each overlap the backward pass whole, and half of
    # that time is lost; then a's 4 us all-reduce after the end
    assert half.exposed_comm_s == pytest.approx(0.5 * (4e-6 + 400e-6) + 4e-6)
    for bad in (-0.1, 1.0, float("nan")):
        with pytest.raises(ValueError, match="comm_sm_share"):
            sm.predict_step(1000, 1e-3, link, comm_sm_share=bad)


def test_a_step_profile_replaces_the_assumptions():
    from ddlab.training.step_profile import StepProfile
    prof = StepProfile("wide", 512, "GPU", "bf16", 1e-3, 3e-3, 1e-3, {"dense2": 0.0, "dense1": 0.3, "conv2": 0.9,
                                                                     "conv1": 1.0}, 3, sm_count=132)
    assert prof.backward_fraction == pytest.approx(0.75) and prof.optimizer_share == pytest.approx(0.2)
    link = AlphaBeta(1e-5, 300e9)
    with_prof = sm.predict_step("wide", 5e-3, link, profile=prof)
    assert with_prof.buckets[0].ready == pytest.approx(0.3)          # dense1's gradient, from the profile
    assert with_prof.exposed_comm_s < sm.predict_step("wide", 5e-3, link).exposed_comm_s


def test_horovod_fuses_waits_half_a_cycle_and_overlaps_nothing_by_hand():
    mb = 1024 * 1024
    layers = [Layer("a", 10 * mb // 4, 1.0), Layer("b", 20 * mb // 4, 1.0)]     # 10 MiB and 20 MiB of gradients
    link = AlphaBeta(50e-6, 30 * mb / 3e-3)                                    # 30 MiB in 3 ms
    # one 30 MiB buffer (128 MiB threshold) after half of a 1 ms cycle: 2 ms + 0.5 ms + 50 us + 3 ms
    p = sm.predict_step(layers, 2e-3, link, 2, framework="horovod")
    assert [(b.layers, b.nbytes) for b in p.buckets] == [(("b", "a"), 30 * mb)]
    assert p.cycle_wait_s == pytest.approx(0.5e-3) and p.comm_s == pytest.approx(3.05e-3)
    assert p.total_s == pytest.approx(2e-3 + 0.5e-3 + 3.05e-3) and p.hidden_comm_s == 0
    assert p.exposed_comm_s == pytest.approx(0.5e-3 + 3.05e-3) and p.overhead_s == 0
    # a 16 MiB threshold: two buffers, one alpha more; a 4 ms cycle waits 2 ms
    q = sm.predict_step(layers, 2e-3, link, 2, framework="horovod", fusion_threshold_bytes=16 * mb, cycle_s=4e-3)
    assert [b.layers for b in q.buckets] == [("b",), ("a",)]
    assert q.total_s == pytest.approx(2e-3 + 2e-3 + 0.1e-3 + 3e-3)
    # device-bound (the GPU busy 3 ms of a 2 ms host step): the wait hides behind it, the all-reduce does not
    d = sm.predict_step(layers, 2e-3, link, 2, framework="horovod", device_s=3e-3)
    assert d.bound == "device" and d.total_s == pytest.approx(3e-3 + 3.05e-3)
    # host-bound (GPU busy 1 ms): host 2 ms + wait 0.5 ms + the all-reduce
    h = sm.predict_step(layers, 2e-3, link, 2, framework="horovod", device_s=1e-3)
    assert h.bound == "host" and h.total_s == pytest.approx(5.55e-3)
    assert h.term("cycle wait").basis == "modelled" and "HOROVOD_CYCLE_TIME 1 ms" in h.term("cycle wait").source
    with pytest.raises(ValueError, match="framework"):
        sm.predict_step(layers, 2e-3, link, 2, framework="deepspeed")


def test_horovod_measured_with_its_hooks_holds_its_cycle_wait_by_hand():
    """A one-worker Horovod cost measured with its hooks on includes half of its own cycle: the model adds
    no second wait at that cycle, and half the difference at another."""
    mb = 1024 * 1024
    layers = [Layer("a", 10 * mb // 4, 1.0), Layer("b", 20 * mb // 4, 1.0)]
    link = AlphaBeta(50e-6, 30 * mb / 3e-3)                                    # one 30 MiB buffer: 3.05 ms
    over = sm.Overheads(per_step_s=0.9e-3, launcher="horovod", source="measured with hooks", basis="measured",
                        cycle_s=1e-3)
    p = sm.predict_step(layers, 2e-3, link, 2, framework="horovod", overheads=over)
    assert p.cycle_wait_s == 0 and p.total_s == pytest.approx(2e-3 + 0.9e-3 + 3.05e-3)
    assert p.overhead_s == pytest.approx(0.9e-3) and p.exposed_comm_s == pytest.approx(3.05e-3)
    assert "in the measured wrapper cost" in p.term("cycle wait").source
    shorter = sm.predict_step(layers, 2e-3, link, 2, framework="horovod", overheads=over, cycle_s=0.5e-3)
    assert shorter.cycle_wait_s == pytest.approx(-0.25e-3) and shorter.total_s == pytest.approx(p.total_s - 0.25e-3)
    assert shorter.exposed_comm_s == pytest.approx(3.05e-3) and shorter.overhead_s == pytest.approx(0.65e-3)
    longer = sm.predict_step(layers, 2e-3, link, 2, framework="horovod", overheads=over, cycle_s=5e-3)
    assert longer.total_s == pytest.approx(p.total_s + 2e-3)
    # device-bound: the GPU's 4 ms hide the host's 2.9 ms, not the all-reduce
    d = sm.predict_step(layers, 2e-3, link, 2, framework="horovod", overheads=over, device_s=4e-3)
    assert d.bound == "device" and d.total_s == pytest.approx(4e-3 + 3.05e-3)
    # no cycle in the cost (the size-1 rows without hooks): the half cycle is added as before
    plain = sm.predict_step(layers, 2e-3, link, 2, framework="horovod",
                            overheads=sm.Overheads(per_step_s=0.9e-3, basis="measured"))
    assert plain.total_s == pytest.approx(p.total_s + 0.5e-3)


def test_a_wrapper_already_in_the_one_gpu_step_is_not_added_again():
    link = AlphaBeta(10e-6, 100e9)
    over = sm.Overheads(per_step_s=1e-3, per_bucket_s=0.5e-3, source="measured on one worker", basis="measured")
    added = sm.predict_step("cnn", 2e-3, link, 2, overheads=over)
    inside = sm.predict_step("cnn", 2e-3, link, 2, overheads=over, wrapper_in_step=True)
    assert added.total_s - inside.total_s == pytest.approx(2e-3)
    assert added.term("wrapper").basis == "measured" and added.term("wrapper").source == "measured on one worker"
    assert inside.term("wrapper").seconds == 0 and "in the one-GPU step already" in inside.term("wrapper").source
    # every term says where its number came from; the batch term is assumed 0 unless given
    assert all(t.source for t in added.terms)
    assert added.term("grows with the batch").basis == "assumed"
    grown = sm.predict_step("cnn", 2e-3, link, 2, batch_term_s=0.2e-3)
    assert grown.total_s == pytest.approx(sm.predict_step("cnn", 2e-3, link, 2).total_s + 0.2e-3)
    src = sm.predict_step("cnn", 2e-3, link, 2, sources={"one-GPU step": ("measured", "recorded")})
    assert src.term("one-GPU step").basis == "measured" and src.terms_table().rows[0]["source"] == "recorded"


def test_the_wait_for_the_slower_rank_by_hand():
    # two draws from {1, 2}: the longer is 1 only when both are 1 (1/4), else 2; mean 1.5
    assert sm.slower_rank_wait([2.0, 1.0]) == pytest.approx(1.75 - 1.5)
    # {1, 2, 3}, two draws: the longest is 1, 2, 3 with 1/9, 3/9, 5/9 -> 22/9, mean 2
    assert sm.slower_rank_wait([3, 1, 2]) == pytest.approx(22 / 9 - 2)
    # three ranks on {1, 2}: all three draw 1 with 1/8
    assert sm.slower_rank_wait([1, 2], n_ranks=3) == pytest.approx(1 / 8 + 2 * 7 / 8 - 1.5)
    assert sm.slower_rank_wait([4.0] * 10) == 0.0                 # a step that never varies: no wait
    # more ranks wait longer for the same spread
    xs = [1.0, 1.1, 1.3, 2.0, 1.05]
    assert 0 < sm.slower_rank_wait(xs, 2) < sm.slower_rank_wait(xs, 4) < max(xs) - sum(xs) / len(xs)
    for bad in ([], [1.0, float("nan")], [-1.0, 1.0]):
        with pytest.raises(ValueError):
            sm.slower_rank_wait(bad)
    with pytest.raises(ValueError):
        sm.slower_rank_wait([1.0, 2.0], n_ranks=0)


def test_the_slower_rank_lengthens_the_hosts_path_with_its_source():
    link = AlphaBeta(20e-6, 50e9)
    base = sm.predict_step("mlp-small", 2e-3, link, framework="ddp", wrapper_in_step=True)
    t = base.term("slower rank")
    assert (t.seconds, t.basis) == (0.0, "assumed") and t.source == sm.SLOWER_RANK_SOURCE
    waited = sm.predict_step("mlp-small", 2e-3, link, framework="ddp", wrapper_in_step=True, slower_rank_s=150e-6,
                             sources={"slower rank": ("measured", "from the step times")})
    assert waited.total_s == pytest.approx(base.total_s + 150e-6)          # a serial (host) step: it adds
    assert waited.overhead_s == pytest.approx(base.overhead_s + 150e-6)
    t = waited.term("slower rank")
    assert (t.seconds, t.basis, t.source) == (150e-6, "measured", "from the step times")
    # Horovod: the host's path, then the cycle's wait and the all-reduces
    h0 = sm.predict_step("mlp-small", 2e-3, link, framework="horovod")
    h1 = sm.predict_step("mlp-small", 2e-3, link, framework="horovod", slower_rank_s=150e-6)
    assert h1.total_s == pytest.approx(h0.total_s + 150e-6)
    # a device-bound step hides it behind the GPU's own time
    d0 = sm.predict_step("mlp-small", 1e-3, link, device_s=5e-3, framework="ddp", wrapper_in_step=True)
    d1 = sm.predict_step("mlp-small", 1e-3, link, device_s=5e-3, framework="ddp", wrapper_in_step=True,
                         slower_rank_s=150e-6)
    assert d1.total_s == pytest.approx(d0.total_s)
    for bad in (-1e-6, float("inf"), "1"):
        with pytest.raises(ValueError):
            sm.predict_step("mlp-small", 2e-3, link, slower_rank_s=bad)
