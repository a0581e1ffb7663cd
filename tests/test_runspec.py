"""ddlab.training.runspec: one run description, validated, turned into the script's argv and back."""
import pytest

from ddlab.training import runspec
from ddlab.training.runspec import RunSpec, RunSpecError


def test_defaults_per_device_are_the_shared_sizes():
    gpu = RunSpec.for_device("cuda", "cnn", launcher="ddp", workers=2)
    assert (gpu.batch, gpu.steps, gpu.warmup_steps, gpu.precision) == (512, 300, 50, "bf16")
    wide = RunSpec.for_device("cuda", "wide")
    assert (wide.steps, wide.warmup_steps) == (150, 30)
    cpu = RunSpec.for_device("cpu", "wide")
    assert (cpu.batch, cpu.steps, cpu.test_samples, cpu.precision) == (32, 8, 1000, "fp32")
    assert RunSpec.for_device("cuda", "cnn", steps=None).steps == 300     # None leaves the default
    assert RunSpec(path="p2p off").path == "shm" and RunSpec(path=0).path == "LOC"   # ddlab.system.nccl's names
    assert gpu.limit_s == runspec.DEFAULT_TIMEOUT["cuda"] and gpu.with_(timeout=9).limit_s == 9


@pytest.mark.parametrize("fields,message", [
    ({"model": "resnet"}, "unknown model 'resnet'; choose one of cnn, wide"),
    ({"framework": "keras", "launcher": "ddp"}, "unknown launcher 'ddp'; choose one of none, horovod"),
    ({"launcher": "none", "workers": 2}, "launcher 'none' runs one process"),
    ({"workers": 0}, "workers must be a whole number >= 1, got 0"),
    ({"workers": True}, "workers must be a whole number"),
    ({"steps": 5, "warmup_steps": 5}, r"warmup_steps \(5\) must be fewer than steps \(5\)"),
    ({"path": "nvlnk"}, "unknown NCCL path 'nvlnk'"),
    ({"device": "tpu"}, "unknown device 'tpu'"),
    ({"precision": "fp8"}, "unknown precision"),
    ({"repeats": 0}, "repeats must be"),
    ({"cuda_graph": "yes"}, "unknown cuda_graph"),
    ({"framework": "keras", "launcher": "horovod", "compile": "default"}, "PyTorch options"),
    ({"timeout": 0}, "timeout must be a positive number"),
])
def test_bad_fields_get_one_clear_message(fields, message):
    with pytest.raises(RunSpecError, match=message):
        RunSpec(**fields)
    assert issubclass(RunSpecError, ValueError)
    with pytest.raises(RunSpecError, match="unknown RunSpec field"):
        RunSpec.for_device("cpu", "cnn", batch_size=3)


def test_script_args():
    spec = RunSpec.for_device("cuda", "cnn", launcher="ddp", workers=2, path="shm")
    argv = spec.script_args()
    assert argv[0] == runspec.SCRIPTS["torch"]
    assert argv[1:] == ["--launcher", "ddp", "--model", "cnn", "--batch-size", "512", "--steps", "300",
                        "--warmup-steps", "50", "--precision", "bf16", "--device", "cuda", "--test-samples", "10000"]
    opts = spec.with_(seed=7, cuda_graph="on", compile="default", channels_last=True, extra_args=("--lr", 0.002))
    assert opts.script_args()[len(argv):] == ["--seed", "7", "--cuda-graph", "on", "--compile", "default",
                                              "--channels-last", "--lr", "0.002"]
    assert spec.process_launcher == "torchrun" and RunSpec().process_launcher == "python"
    assert RunSpec(device="cuda").graph_by_default and not RunSpec(device="cuda", cuda_graph="on").graph_by_default


def test_dict_round_trip_and_from_config():
    spec = RunSpec.for_device("cuda", "wide", launcher="horovod", workers=2, repeats=3, extra_args=("--lr", "1"))
    assert RunSpec.from_dict(spec.to_dict()) == spec
    with pytest.raises(RunSpecError, match="unknown field"):
        RunSpec.from_dict(dict(spec.to_dict(), gpus=2))
    cfg = {"framework": "torch", "launcher": "ddp", "model": "wide", "batch_size": 512, "steps": 80,
           "warmup_steps": 20, "precision": "bf16", "device": "cuda", "workers": [1, 2]}
    rec = RunSpec.from_config(cfg)
    assert (rec.steps, rec.warmup_steps, rec.workers, rec.launcher) == (80, 20, 2, "ddp")
    assert rec.differences(RunSpec.for_device("cuda", "wide")) == {"steps": (80, 150), "warmup_steps": (20, 30)}
