"""tools/recording/record_scaling.py on CPU: its jobs, worker counts, file names and dry run."""
import argparse
import importlib.util
import os

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("record_scaling", os.path.join(HERE, "..", "tools", "recording",
                                                                            "record_scaling.py"))
rs = importlib.util.module_from_spec(spec)
spec.loader.exec_module(rs)


def test_jobs_and_worker_counts():
    assert rs.parse_job("horovod:mlp-large:strong") == ("horovod", "mlp-large", "strong")
    for bad in ("ddp:cnn", "none:cnn:weak", "ddp:cnn:both", "ddp:resnet:weak"):
        with pytest.raises(argparse.ArgumentTypeError):
            rs.parse_job(bad)
    from ddlab.training import gpu_scaling
    assert gpu_scaling.worker_counts(8) == (1, 2, 4, 8) and gpu_scaling.worker_counts(4) == (1, 2, 4)
    assert gpu_scaling.worker_counts(6) == (1, 2, 4, 6) and gpu_scaling.worker_counts(0) == (1,)


def test_file_names_carry_the_machine_and_go_home_with_adopt_results():
    name = rs.file_name("ddp", "cnn", "weak", "shm", "8xh200-nv18") + ".json"
    assert name == "scaling-torch-ddp-cnn-weak-shm-8xh200-nv18.json"
    spec = importlib.util.spec_from_file_location("adopt_results", os.path.join(HERE, "..", "tools", "recording",
                                                                                "adopt_results.py"))
    adopt = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(adopt)
    assert os.path.basename(os.path.dirname(adopt.home_of(name))) == "experiments"
    assert adopt.tag_mismatch(name, {"gpu_count": 8}) == "" and adopt.tag_mismatch(name, {"gpu_count": 4})


def test_dry_run_prints_every_launch_and_writes_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(rs.frameworks, "gpu_count", lambda framework="torch": 0)
    assert rs.main([str(tmp_path / "out"), "ddp:cnn:strong", "--workers", "1,2,4,8", "--dry-run"]) == 0
    out = capsys.readouterr().out
    launches = [ln for ln in out.splitlines() if ln.startswith("   ")]
    assert len(launches) == 2 + 3 * 3                       # plain, one worker, then 2, 4, 8 on three paths
    assert "--nproc-per-node=8" in launches[-1] and "--batch-size 64" in launches[-1]
    assert "--launcher none" in launches[0] and "--batch-size 512" in launches[0]
    assert not (tmp_path / "out").exists()


def test_more_workers_than_gpus_is_refused_before_measuring(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(rs.frameworks, "gpu_count", lambda framework="torch": 2)
    monkeypatch.setattr(rs.gpu_scaling, "scaling_sweep", lambda *a, **k: pytest.fail("measured"))
    assert rs.main([str(tmp_path), "ddp:cnn:weak", "--workers", "1,2,4", "--tag", "x"]) == 2
    assert "4" in capsys.readouterr().out
