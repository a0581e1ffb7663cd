"""The whole training step as one CUDA graph (``fmnist_torch.py --cuda-graph``).

A small CNN at batch 512 is limited by kernel launches, not by arithmetic: one step launches
hundreds of kernels. Captured once as a CUDA graph (the forward, the backward, the fused
Adam update; with DDP also its all-reduce) and replayed, the step is one launch.

* :func:`decide`: whether to capture, and why (or why not), from ``--cuda-graph``, the
  device, the launcher, ``--compile`` and the options a captured step cannot hold. ``auto``
  (the default) captures only one process on a GPU. With DDP it is opt-in (``--cuda-graph
  on``), so the course's NCCL path comparison runs the eager loop a learner writes first; the
  captured DDP step (PyTorch's recipe, NCCL all-reduce inside the graph) runs on the course's
  2x H200 machine (reference/experiments/*-graph.json). Horovod cannot be captured (its
  all-reduce runs in a background thread and the optimizer waits on the host).
* :class:`CapturedStep`: PyTorch's whole-network capture recipe: a few eager steps on a side
  stream (:func:`eager_steps_before`), one capture of the step on static input tensors, then
  a copy of each batch into them and a replay per step. A failed capture of one process goes
  on eagerly, with the reason recorded; a failed DDP capture stops (DDP's reducer is left
  mid-iteration). :meth:`CapturedStep.release` frees the graph before the process group is
  destroyed: NCCL's destroy waits for every graph that captured its kernels (PyTorch issue
  115388).

Every rank reports (:mod:`ddlab.base.worker_report`, kind :data:`CAPTURE_KIND`) state
``"start"`` right before the capture and ``"done"`` after it: :mod:`ddlab.training.runs` reads
them to tell a run that failed or hung inside the capture from one that failed elsewhere.
"""
from __future__ import annotations

import argparse
from typing import Callable, Optional, Sequence, Type

import torch

from ddlab.base import worker_report
from ddlab.training.train_common import Failure

DDP_EAGER_BEFORE_CAPTURE = 20  # PyTorch's CUDA-graph notes: >= 11 DDP iterations before capture;
# DDP also times iterations 1-10 and every 100th with CUDA events, which must not fall in a capture.
EAGER_BEFORE_CAPTURE = 3       # one process: warm cuDNN, cuBLAS and the optimizer state first
CAPTURE_KIND = "cuda_graph_capture"     # the report around the capture: state "start", then "done"


def eager_steps_before(launcher: str) -> int:
    """The eager steps the capture needs first (they fall in the run's warm-up)."""
    return DDP_EAGER_BEFORE_CAPTURE if launcher == "ddp" else EAGER_BEFORE_CAPTURE


def decide(args: argparse.Namespace, use_cuda: bool, more_problems: Sequence[str] = (),
           error: Type[Failure] = Failure) -> tuple:
    """(use a CUDA graph?, why) from --cuda-graph, the device, the launcher and --compile.
    ``more_problems``: why other options given keep the step from being captured (the
    communication tuning's, :func:`ddlab.course.tuning.graph_problems`). ``--cuda-graph on``
    with any problem is refused with one line (``error``)."""
    if args.cuda_graph == "off":
        return False, "off (--cuda-graph off)"
    problems = []
    if not use_cuda:
        problems.append("CUDA graphs need a GPU")
    if args.launcher == "horovod":
        problems.append("Horovod all-reduces in a background thread and its optimizer waits on the host, "
                        "which a CUDA graph cannot capture")
    if args.compile == "reduce-overhead":
        problems.append("--compile reduce-overhead already uses CUDA graphs")
    if args.compile != "none" and args.launcher == "ddp":
        problems.append("capturing a compiled DDP model is not supported here")
    if args.lr_warmup_epochs > 0:
        problems.append("the learning-rate warm-up changes the rate every step, which a captured step would not see")
    if args.noise_scale:
        problems.append("--noise-scale reads every rank's gradient outside the captured step")
    problems += list(more_problems)
    if args.cuda_graph == "on":
        if problems:
            raise error("--cuda-graph on is impossible: " + "; ".join(problems))
        return True, "on (--cuda-graph on)"
    if problems:
        return False, "off: " + problems[0]
    if args.launcher == "ddp":
        # Opt-in for DDP: the eager loop is what the course compares across NCCL paths;
        # capturing DDP's NCCL all-reduce (PyTorch's recipe, see DDP_EAGER_BEFORE_CAPTURE)
        # is the speed option on top.
        return False, "off (auto: DDP capture is opt-in; --cuda-graph on captures it)"
    if args.compile != "none":
        return False, "off: --compile given (add --cuda-graph on to capture the compiled step too)"
    return True, "on (auto: one process on a GPU)"


class CapturedStep:
    """One training step captured as a CUDA graph, and replayed.

    Make it before the model is wrapped: DDP must be built on :attr:`side`, the stream the
    capture uses. Then :meth:`warm_up` runs the eager steps, :meth:`capture` captures the
    step once, :meth:`replay` runs it on each batch, and :meth:`release` frees the graph
    before the process group is destroyed. ``rank``: this worker's, for its reports."""

    def __init__(self, launcher: str, error: Type[Failure] = Failure, rank: int = 0):
        self.launcher = launcher
        self.rank = rank
        self.error = error
        self.eager_steps = eager_steps_before(launcher)
        self.side = torch.cuda.Stream()
        self.graph: Optional[torch.cuda.CUDAGraph] = None
        self.static_x = self.static_y = None

    def warm_up(self, eager_step: Callable[[int], None]) -> int:
        """Runs steps 0 .. eager_steps - 1 with ``eager_step`` on the side stream (PyTorch's
        whole-network capture recipe); returns the next step."""
        self.side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.side):
            for step in range(self.eager_steps):
                eager_step(step)
        torch.cuda.current_stream().wait_stream(self.side)
        return self.eager_steps

    def capture(self, step_fn: Callable, x_shape: Sequence[int], device: torch.device, memory_format,
                say: Callable = print) -> Optional[str]:
        """Captures ``step_fn(x, y)`` on static inputs of ``x_shape`` (float32 images) and
        ``x_shape[0]`` int64 labels. Returns None when captured, else why not (one process
        then goes on eagerly; a failed DDP capture raises ``error``). Call the optimizer's
        ``zero_grad()`` (to None) first: the gradients are then allocated in the graph's pool."""
        self.static_x = torch.empty(tuple(x_shape), device=device).contiguous(memory_format=memory_format)
        self.static_y = torch.empty((x_shape[0],), dtype=torch.int64, device=device)
        if self.launcher == "ddp":
            say("note: capturing DDP's NCCL all-reduce in the CUDA graph (--cuda-graph on); "
                "a hang would be killed by the launch timeout, with tracebacks.")
        worker_report.emit(CAPTURE_KIND, rank=self.rank, state="start", eager_steps=self.eager_steps)
        try:
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, stream=self.side):
                step_fn(self.static_x, self.static_y)
            self.graph = g
            worker_report.emit(CAPTURE_KIND, rank=self.rank, state="done")
            return None
        except Exception as exc:  # the reason is printed and recorded; the run goes on uncaptured
            if self.launcher == "ddp":
                # DDP's reducer is left mid-iteration by a failed capture: stop with the reason.
                raise self.error(f"CUDA-graph capture of the DDP step failed ({type(exc).__name__}: {exc}); "
                                 "rerun with --cuda-graph off") from None
            torch.cuda.synchronize()
            return f"capture failed ({type(exc).__name__}: {str(exc).splitlines()[0][:200]})"

    @property
    def captured(self) -> bool:
        return self.graph is not None

    def replay(self, x: torch.Tensor, y: torch.Tensor) -> None:
        """One step on the batch (x, y): copied into the static inputs, then the graph replayed."""
        self.static_x.copy_(x)
        self.static_y.copy_(y)
        self.graph.replay()

    def release(self) -> None:
        """Frees the graph. A CUDA graph that captured NCCL work holds a reference on the
        communicator, and NCCL's destroy waits for it to drop: destroying the process group
        first hangs (PyTorch issue 115388; it hung so on the 2x H200 machine)."""
        if self.graph is None:
            return
        torch.cuda.synchronize()
        self.graph.reset()
        self.graph = None
        torch.cuda.synchronize()
