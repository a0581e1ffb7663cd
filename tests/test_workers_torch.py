"""ddlab.training.workers_torch: the device a worker takes and the group its launcher forms (one
process, DDP, Horovod), with one clear line where the setting cannot work."""
import socket
import sys
import types

import pytest
import torch

from ddlab.training import workers_torch
from ddlab.training.train_common import Failure


class ScriptFailure(Failure):
    script = "some_script.py"


LAUNCH_VARIABLES = ("LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "RANK", "HOROVOD_SIZE", "OMPI_COMM_WORLD_SIZE",
                    "MASTER_ADDR", "MASTER_PORT")


@pytest.fixture
def clean_env(monkeypatch):
    for var in LAUNCH_VARIABLES:
        monkeypatch.delenv(var, raising=False)
    return monkeypatch


@pytest.mark.parametrize("cuda", [False, True], ids=["no-gpu", "gpu"])
def test_resolve_device(monkeypatch, cuda):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)       # both paths, on any machine
    assert workers_torch.resolve_device("cpu") == torch.device("cpu")
    if cuda:
        assert workers_torch.resolve_device("auto") == workers_torch.resolve_device("cuda") == torch.device("cuda")
    else:
        assert workers_torch.resolve_device("auto") == torch.device("cpu")
        with pytest.raises(SystemExit, match="^some_script.py: error: --device cuda, but torch sees no CUDA GPU"):
            workers_torch.resolve_device("cuda", ScriptFailure)


def test_one_process_is_rank_0_of_1(clean_env):
    w = workers_torch.Workers("none", use_cuda=False, plan_graph=False)
    assert (w.rank, w.size, w.local_rank, w.local_size, w.backend) == (0, 1, 0, 1, "none")
    assert w.allgather({"a": 1}) == [{"a": 1}]
    w.barrier()
    w.sync()
    w.shutdown()


@pytest.mark.parametrize("var", ["WORLD_SIZE", "HOROVOD_SIZE", "OMPI_COMM_WORLD_SIZE"])
def test_one_process_refuses_to_be_one_of_several(clean_env, var):
    clean_env.setenv(var, "2")
    with pytest.raises(SystemExit, match="^some_script.py: error: --launcher none runs one process"):
        workers_torch.Workers("none", False, False, ScriptFailure)


def test_ddp_needs_torchrun_and_unknown_launchers_are_refused(clean_env):
    with pytest.raises(SystemExit, match="must be started by torchrun"):
        workers_torch.Workers("ddp", False, False, ScriptFailure)
    with pytest.raises(SystemExit, match="unknown launcher 'mpi'"):
        workers_torch.Workers("mpi", False, False, ScriptFailure)


def test_ddp_on_cpu_is_a_gloo_group(clean_env):
    """A group of one, as torchrun would start it: Gloo on CPU, a barrier, an all-gather, closed at the end."""
    import torch.distributed as dist
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for var, value in {"LOCAL_RANK": "0", "RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
                       "MASTER_PORT": str(port)}.items():
        clean_env.setenv(var, value)
    w = workers_torch.Workers("ddp", use_cuda=False, plan_graph=False)
    try:
        assert (w.rank, w.size, w.local_rank, w.local_size, w.backend) == (0, 1, 0, 1, "gloo")
        assert "torch.distributed.nn" in sys.modules   # imported before init_process_group (teardown)
        assert w.allgather({"rank": 0}) == [{"rank": 0}]
        w.sync()
    finally:
        w.shutdown()
    assert not dist.is_initialized()


def fake_horovod(calls):
    hvd = types.ModuleType("horovod.torch")
    hvd.init = lambda: calls.append("init")
    hvd.rank, hvd.size, hvd.local_rank, hvd.local_size = (lambda: 1), (lambda: 4), (lambda: 1), (lambda: 2)
    hvd.nccl_built = lambda: True
    hvd.barrier = lambda: calls.append("barrier")
    hvd.allgather_object = lambda obj: (obj, obj)
    hvd.shutdown = lambda: calls.append("shutdown")
    package = types.ModuleType("horovod")
    package.torch = hvd
    return package, hvd


def test_horovod_takes_its_settings_before_init(clean_env):
    calls = []
    package, hvd = fake_horovod(calls)
    clean_env.setitem(sys.modules, "horovod", package)
    clean_env.setitem(sys.modules, "horovod.torch", hvd)
    w = workers_torch.Workers("horovod", use_cuda=False, plan_graph=False,
                              before_horovod_init=lambda: calls.append("settings"))
    assert calls == ["settings", "init"]
    assert (w.rank, w.size, w.local_rank, w.local_size, w.backend) == (1, 4, 1, 2, "horovod-gloo")
    assert w.allgather("x") == ["x", "x"]
    w.barrier()
    w.shutdown()
    assert calls[-2:] == ["barrier", "shutdown"]


def test_horovod_missing_says_how_to_build_it(clean_env):
    clean_env.setitem(sys.modules, "horovod.torch", None)   # import fails
    with pytest.raises(SystemExit, match="needs Horovod for PyTorch .*`make horovod`"):
        workers_torch.Workers("horovod", False, False, ScriptFailure)
