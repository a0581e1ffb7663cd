"""ddlab.training.kept_runs: a notebook's training runs kept by make test and shown again by the browser test."""
import os
import shutil
import subprocess
import sys

import pytest
from jupyter_client.manager import start_new_kernel

from _experiment_fakes import FakeLaunches
from ddlab.training import kept_runs, runs
from ddlab.training.runspec import RunSpec

SRC = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(kept_runs.__file__))))
SPEC = RunSpec.for_device("cpu", "mlp-small", launcher="ddp", workers=2, steps=4, warmup_steps=1)


@pytest.fixture
def kernel(tmp_path, monkeypatch):
    """As inside a Jupyter kernel, runs kept in tmp_path, each process's answered runs forgotten."""
    monkeypatch.setattr(kept_runs, "in_notebook", lambda: True)
    monkeypatch.setattr(kept_runs, "_taken", set())
    monkeypatch.setattr(kept_runs, "_one_ran", False)
    monkeypatch.setenv(kept_runs.KEEP_ENV, str(tmp_path))
    monkeypatch.delenv(kept_runs.REUSE_ENV, raising=False)
    return tmp_path


def _launches(monkeypatch, n):
    fake = FakeLaunches(*[{"images_per_s": 100.0 + i, "date": f"run {i}"} for i in range(n)])
    monkeypatch.setattr(runs.launch, "run", fake)
    return fake


def test_the_same_launch_is_answered_by_each_kept_run_once_in_order_after_one_real_launch(kernel, monkeypatch):
    fake = _launches(monkeypatch, 4)
    first = [runs.train(SPEC)["images_per_s"] for _ in range(2)]       # make test: both run, both kept
    assert first == [100.0, 101.0] and len(fake.argvs) == 2
    monkeypatch.setattr(kept_runs, "_one_ran", False)                    # the browser test: another kernel
    monkeypatch.setattr(kept_runs, "_taken", set())
    monkeypatch.setenv(kept_runs.REUSE_ENV, "1")
    lines = []
    again = [runs.train(SPEC, progress=lines.append) for _ in range(5)]
    # the kernel's first launch runs (and is kept too); then every kept run in the order kept, each once;
    # then a launch again
    assert [r["images_per_s"] for r in again] == [102.0, 100.0, 101.0, 102.0, 103.0]
    assert len(fake.argvs) == 4
    assert [bool(r.get("notes")) and "kept from the same launch" in r["notes"][-1] for r in again] == \
        [False, True, True, True, False]
    assert sum("not run again" in ln for ln in lines) == 3
    assert sum(runs.DONE_MARK in ln for ln in lines) == 5              # a progress bar still counts every launch


@pytest.mark.parametrize("change", ["path", "steps", "env", "code"])
def test_a_launch_that_differs_in_anything_runs_again(kernel, monkeypatch, change):
    fake = _launches(monkeypatch, 2)
    runs.train(SPEC)                                   # kept, and this kernel has run a launch
    monkeypatch.setenv(kept_runs.REUSE_ENV, "1")
    if change == "code":
        monkeypatch.setattr(kept_runs, "_code_hash", "another version of the code")
    spec = {"path": SPEC.with_(path="socket"), "steps": SPEC.with_(steps=5)}.get(change, SPEC)
    r = runs.train(spec, env={"NCCL_DEBUG": "INFO"} if change == "env" else None)
    assert len(fake.argvs) == 2 and r["images_per_s"] == 101.0


def test_nothing_is_kept_or_reused_without_the_folder_or_outside_a_kernel(tmp_path, monkeypatch):
    fake = _launches(monkeypatch, 2)
    monkeypatch.setenv(kept_runs.KEEP_ENV, str(tmp_path))
    monkeypatch.setenv(kept_runs.REUSE_ENV, "1")

    def no_hashing(root):
        raise AssertionError("the code is hashed though no run is kept")
    monkeypatch.setattr(kept_runs, "_code_hash", None)
    monkeypatch.setattr(kept_runs, "source_hash", no_hashing)      # a launch with nothing kept reads no code
    runs.train(SPEC)                                   # a unit test's process: no kernel
    assert list(tmp_path.iterdir()) == []
    monkeypatch.setattr(kept_runs, "in_notebook", lambda: True)
    monkeypatch.delenv(kept_runs.KEEP_ENV)
    runs.train(SPEC)
    assert len(fake.argvs) == 2 and list(tmp_path.iterdir()) == []


def test_the_code_hash_follows_the_content_of_the_package_and_the_scripts(tmp_path):
    for top in ("ddlab", "train", "handson"):
        shutil.copytree(os.path.join(SRC, top), tmp_path / top, ignore=shutil.ignore_patterns("__pycache__"))
    assert kept_runs.source_hash(str(tmp_path)) == kept_runs.code_hash()
    (tmp_path / "notes.txt").write_text("not code")
    assert kept_runs.source_hash(str(tmp_path)) == kept_runs.code_hash()
    for script in (tmp_path / "train" / "fmnist_torch.py", tmp_path / "handson" / "ddp_3_shard.py"):
        before = kept_runs.source_hash(str(tmp_path))
        script.write_text(script.read_text() + "\n# changed\n")
        assert kept_runs.source_hash(str(tmp_path)) != before


def test_a_plain_python_process_is_not_a_kernel():
    code = "from ddlab.training import kept_runs; import IPython; print(kept_runs.in_notebook())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env=dict(os.environ, PYTHONPATH=SRC))
    assert out.stdout.split() == ["False"]


def _run_in_kernel(env: dict, launches: int) -> list:
    """Each launch's line: its date, its seconds, its last note."""
    out = []
    km, kc = start_new_kernel(kernel_name="ddlab", startup_timeout=120, env=env)
    try:
        reply = kc.execute_interactive(
            "from ddlab.training import runs\nfrom ddlab.training.runspec import RunSpec\n"
            f"for _ in range({launches}):\n"
            "    r = runs.train(RunSpec.for_device('cpu', 'mlp-small', steps=3, warmup_steps=1, test_samples=100))\n"
            "    print(r['provenance']['date'].replace(' ', 'T'), r['elapsed_s'], r.get('notes', [])[-1:])",
            timeout=300, output_hook=out.append)
        assert reply["content"]["status"] == "ok", [m["content"] for m in out if m["msg_type"] == "error"]
        return "".join(m["content"].get("text", "") for m in out if m["msg_type"] == "stream").splitlines()
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


@pytest.mark.slow
def test_in_a_real_kernel_a_launch_after_the_first_shows_the_kept_run(tmp_path):
    env = dict(os.environ, **{kept_runs.KEEP_ENV: str(tmp_path)})
    env.pop(kept_runs.REUSE_ENV, None)
    [first] = _run_in_kernel(env, 1)                      # make test's kernel: runs, kept
    assert len(list(tmp_path.glob("*/*.json"))) == 1 and "kept" not in first
    live, again = _run_in_kernel(dict(env, **{kept_runs.REUSE_ENV: "1"}), 2)   # the browser test's kernel
    assert live.split()[:2] != first.split()[:2] and "kept" not in live
    assert again.split()[:2] == first.split()[:2] and "kept from the same launch" in again


def test_a_hands_on_script_launched_again_is_answered_by_its_kept_run(kernel, monkeypatch, capsys):
    from ddlab.base import worker_report
    from ddlab.course import handson
    from ddlab.measure import launch
    launched = []

    def fake_run(argv, launcher, nproc, **kw):
        launched.append(list(argv))
        out = "\n".join(worker_report.encode(handson.RESULT_KIND, rank=r, samples=100 + len(launched),
                                             checksum=1.0) for r in range(nproc))
        return launch.LaunchResult([launcher, *argv], 0, out, 1.5 + len(launched))
    monkeypatch.setattr(handson.launch, "run", fake_run)
    cpu = handson.plan(gpu_count=0)
    first = handson.run("ddp_7_rank0", cpu, show_command=False)        # make test's kernel: runs, kept
    monkeypatch.setattr(kept_runs, "_one_ran", False)                    # the browser test: another kernel
    monkeypatch.setattr(kept_runs, "_taken", set())
    monkeypatch.setenv(kept_runs.REUSE_ENV, "1")
    single = handson.run("single_device", cpu, show_command=False)     # its first launch runs
    again = handson.run("ddp_7_rank0", cpu, show_command=False)        # the kept one answers
    assert len(launched) == 2 and launched[0][0].endswith("ddp_7_rank0.py")
    assert (again.ranks, again.output, again.seconds) == (first.ranks, first.output, first.seconds)
    assert single.ranks[0]["samples"] == 102
    assert "kept from the same launch" in capsys.readouterr().out
    fourth = handson.run("ddp_7_rank0", cpu, show_command=False)       # each kept run answers once
    assert len(launched) == 3 and fourth.ranks[0]["samples"] == 103
    mine = kernel / "my_script.py"                                      # a script outside the hashed sources
    mine.write_text("print('first version')\n")
    handson.run(str(mine), cpu, show_command=False)
    monkeypatch.setattr(kept_runs, "_taken", set())
    mine.write_text("print('edited')\n")
    handson.run(str(mine), cpu, show_command=False)                    # edited: not the same launch
    assert len(launched) == 5
