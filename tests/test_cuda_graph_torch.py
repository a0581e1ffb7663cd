"""ddlab.training.cuda_graph_torch: whether the step is captured as a CUDA graph (and why), and the
capture itself (on a GPU: run with `pytest -m gpu`)."""
import argparse

import pytest
import torch

from ddlab.training import cuda_graph_torch
from ddlab.training.train_common import Failure


class ScriptFailure(Failure):
    script = "some_script.py"


def args(launcher="none", cuda_graph="auto", compile="none", lr_warmup_epochs=0.0, noise_scale=False):
    return argparse.Namespace(launcher=launcher, cuda_graph=cuda_graph, compile=compile,
                              lr_warmup_epochs=lr_warmup_epochs, noise_scale=noise_scale)


def decide(*more, cuda=True, **kw):
    return cuda_graph_torch.decide(args(**kw), cuda, list(more), ScriptFailure)


def test_auto_captures_one_process_on_a_gpu_only():
    assert decide() == (True, "on (auto: one process on a GPU)")
    assert decide(cuda=False) == (False, "off: CUDA graphs need a GPU")
    assert decide(compile="default") == (False, "off: --compile given (add --cuda-graph on to capture the "
                                                "compiled step too)")
    assert decide(cuda_graph="off") == (False, "off (--cuda-graph off)")


def test_ddp_capture_is_opt_in_and_horovod_cannot_be_captured():
    use, why = decide(launcher="ddp")
    assert use is False and "opt-in" in why and "--cuda-graph on" in why
    assert decide(launcher="ddp", cuda_graph="on") == (True, "on (--cuda-graph on)")
    assert decide(launcher="horovod")[0] is False
    with pytest.raises(SystemExit, match="^some_script.py: error: --cuda-graph on is impossible: .*background thread"):
        decide(launcher="horovod", cuda_graph="on")


def test_what_a_captured_step_cannot_hold_is_named():
    assert decide(lr_warmup_epochs=1.0)[1].startswith("off: the learning-rate warm-up")
    assert decide(noise_scale=True)[1].startswith("off: --noise-scale")
    assert decide(compile="reduce-overhead")[1] == "off: --compile reduce-overhead already uses CUDA graphs"
    assert decide("a tuning problem") == (False, "off: a tuning problem")   # the script's other options
    with pytest.raises(SystemExit, match="impossible: CUDA graphs need a GPU; a tuning problem$"):
        decide("a tuning problem", cuda=False, cuda_graph="on")   # every problem, in one line


def test_eager_steps_before_the_capture():
    assert cuda_graph_torch.eager_steps_before("ddp") == cuda_graph_torch.DDP_EAGER_BEFORE_CAPTURE == 20
    assert cuda_graph_torch.eager_steps_before("none") == cuda_graph_torch.EAGER_BEFORE_CAPTURE == 3


def test_the_capture_reports_are_the_ones_runs_reads():
    from ddlab.base import worker_report
    from ddlab.training import runs
    assert cuda_graph_torch.CAPTURE_KIND == runs.CAPTURE_KIND
    start = worker_report.encode(cuda_graph_torch.CAPTURE_KIND, rank=1, state="start", eager_steps=20)
    done = worker_report.encode(cuda_graph_torch.CAPTURE_KIND, rank=1, state="done")
    assert runs.capture_started("phase imports: 1.0 s\n[rank1]:" + start + "\nKilled\n")
    assert not runs.capture_started("phase imports: 1.0 s\n" + done + "\n")
    assert not runs.capture_started("timeout\n" + start[:30] + "\n")     # cut short: no start reported


class _FakeCuda:
    """torch.cuda's streams and graphs for the CPU twins below: what CapturedStep asks of them is
    recorded; a captured "graph" replays the step function it captured."""

    def __init__(self, capture_fails=None):
        self.calls, self.capture_fails = [], capture_fails
        fake = self

        class Stream:
            def wait_stream(self, other):
                fake.calls.append("wait_stream")

        class CUDAGraph:
            def replay(self):
                fake.calls.append("replay")
                self.fn(*self.args)

            def reset(self):
                fake.calls.append("reset")

        class graph:
            def __init__(self, g, stream=None):
                self.g = g

            def __enter__(self):
                if fake.capture_fails:
                    raise fake.capture_fails
                fake.calls.append("capture")

            def __exit__(self, *exc):
                return False

        self.Stream, self.CUDAGraph, self.graph = Stream, CUDAGraph, graph

    def current_stream(self):
        return self.Stream()

    def stream(self, s):
        import contextlib
        return contextlib.nullcontext()

    def synchronize(self):
        self.calls.append("synchronize")


@pytest.fixture
def fake_cuda(monkeypatch):
    def use(capture_fails=None):
        fake = _FakeCuda(capture_fails)
        for name in ("Stream", "CUDAGraph", "graph", "current_stream", "stream", "synchronize"):
            monkeypatch.setattr(torch.cuda, name, getattr(fake, name))
        return fake
    return use


def _capture_reports(capsys):
    from ddlab.base import worker_report
    return [(r["rank"], r["state"], r.get("eager_steps"))
            for r in worker_report.parse(capsys.readouterr().out, kind=cuda_graph_torch.CAPTURE_KIND)]


def test_captured_step_warm_up_capture_replay_release_on_cpu(fake_cuda, capsys):
    """CPU twin of the GPU capture test below: the eager steps before the capture, its reports, the
    static inputs a replay copies the batch into, and a release that is harmless twice."""
    fake = fake_cuda()
    step = cuda_graph_torch.CapturedStep("none")
    eager = []
    assert step.warm_up(eager.append) == 3 and eager == [0, 1, 2] and not step.captured
    lines, seen = [], []
    capsys.readouterr()
    assert step.capture(lambda x, y: seen.append((x.shape, y.dtype)), (8, 4), torch.device("cpu"),
                        torch.contiguous_format, say=lambda s, **k: lines.append(s)) is None
    assert step.captured and lines == [] and _capture_reports(capsys) == [(0, "start", 3), (0, "done", None)]
    step.graph.fn, step.graph.args = (lambda x, y: seen.append(float(x.sum()))), (step.static_x, step.static_y)
    step.replay(torch.ones(8, 4), torch.zeros(8, dtype=torch.int64))
    assert seen[-1] == 32.0 and "replay" in fake.calls                # the batch was copied in, then replayed
    step.release()
    step.release()
    assert fake.calls.count("reset") == 1 and not step.captured
    assert cuda_graph_torch.CapturedStep("ddp").warm_up(lambda i: None) == 20


def test_a_failed_capture_on_cpu_says_why_and_ddp_stops(fake_cuda):
    """CPU twin of the GPU test below: one process goes on eagerly with the reason; DDP stops."""
    fake_cuda(capture_fails=RuntimeError("operation not permitted when stream is capturing\nmore"))
    quiet = dict(say=lambda *a, **k: None)
    why = cuda_graph_torch.CapturedStep("none").capture(lambda x, y: None, (2, 4), torch.device("cpu"),
                                                        torch.contiguous_format, **quiet)
    assert why == "capture failed (RuntimeError: operation not permitted when stream is capturing)"
    with pytest.raises(SystemExit, match="(?s)CUDA-graph capture of the DDP step failed .*rerun with --cuda-graph off"):
        cuda_graph_torch.CapturedStep("ddp", ScriptFailure).capture(lambda x, y: None, (2, 4), torch.device("cpu"),
                                                                     torch.contiguous_format, **quiet)


needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.mark.gpu
@needs_gpu
def test_a_captured_step_replays_what_the_eager_step_does(capsys):
    dev = torch.device("cuda")
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=0.1, fused=True, capturable=True)
    step = cuda_graph_torch.CapturedStep("none", rank=2)
    x = torch.randn(8, 4, device=dev)
    y = torch.randint(0, 3, (8,), device=dev)

    def forward_backward(xb, yb):
        torch.nn.functional.cross_entropy(model(xb), yb).backward()
        opt.step()

    def eager(i):
        opt.zero_grad()
        forward_backward(x, y)

    assert step.warm_up(eager) == 3 and not step.captured
    opt.zero_grad()
    lines = []
    capsys.readouterr()
    assert step.capture(forward_backward, (8, 4), dev, torch.contiguous_format,
                        say=lambda s, **k: lines.append(s)) is None
    assert step.captured and lines == [] and _capture_reports(capsys) == [(2, "start", 3), (2, "done", None)]
    before = model.weight.detach().clone()
    step.replay(x, y)
    torch.cuda.synchronize()
    assert not torch.equal(before, model.weight)   # the replay took an optimizer step
    step.release()
    assert not step.captured
    step.release()   # twice is harmless


@pytest.mark.gpu
@needs_gpu
def test_a_failed_capture_of_one_process_says_why_and_of_ddp_stops():
    dev = torch.device("cuda")

    def not_capturable(xb, yb):
        xb.sum().item()   # a host synchronisation cannot be captured

    quiet = dict(say=lambda *a, **k: None)
    why = cuda_graph_torch.CapturedStep("none").capture(not_capturable, (2, 4), dev, torch.contiguous_format, **quiet)
    assert why.startswith("capture failed (")
    with pytest.raises(SystemExit, match="(?s)CUDA-graph capture of the DDP step failed .*rerun with --cuda-graph off"):
        cuda_graph_torch.CapturedStep("ddp", ScriptFailure).capture(not_capturable, (2, 4), dev,
                                                                     torch.contiguous_format, **quiet)
