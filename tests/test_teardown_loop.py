"""tools/teardown_loop.py: 2-process DDP runs on the CPU under torchrun, none of which may abort at
teardown. CI runs it twice on the hands-on solution: the loop, its table and its JSON, with real
launches (test_handson checks deterministically that each DDP script leaves no Gloo thread behind);
the 50-run loop, `make teardown-loop`, is the same command with --runs 50."""
import importlib.util
import json
import os
from types import SimpleNamespace

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "launch")


def tool():
    spec = importlib.util.spec_from_file_location("teardown_loop", os.path.join(ROOT, "tools", "teardown_loop.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _captured(name, returncode=1):
    with open(os.path.join(FIXTURES, name), encoding="utf-8") as f:
        return SimpleNamespace(output="".join(l for l in f if not l.startswith("# ")), returncode=returncode)


def test_an_abort_is_told_from_other_failures():
    t = tool()
    assert t.is_abort(_captured("torchrun_exception_then_sigabrt.txt"))     # 'terminate called', exitcode -6
    assert not t.is_abort(_captured("torchrun_sigkill.txt")) and not t.is_abort(_captured("torchrun_exception.txt"))
    assert t.is_abort(SimpleNamespace(output="", returncode=-6))
    assert not t.is_abort(SimpleNamespace(output="epoch 1: training loss 0.5\n", returncode=0))


def test_a_failed_or_aborted_run_is_counted_and_named_by_its_first_line(monkeypatch):
    """Each run that did not end cleanly is printed as '<script> run N: <status>: <the dead rank's first
    line>' and counted as an abort or another failure (launches faked with captured launcher outputs)."""
    t = tool()
    outputs = iter([("torchrun_exception.txt", 1), ("torchrun_exception_then_sigabrt.txt", 1), (None, 0)])

    def fake_run(argv, launcher, nproc, env, timeout, check, python):
        name, code = next(outputs)
        output = "epoch 1 done\n" if name is None else _captured(name, code).output
        return t.launch.LaunchResult([python, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}", *argv],
                                     code, output, 1.0)
    monkeypatch.setattr(t.launch, "run", fake_run)
    said = []
    row = t.loop("solution_ddp", 3, 30, say=said.append)
    assert (row["runs"], row["aborts"], row["failures"]) == (3, 1, 1)
    assert said == ["solution_ddp run 1: failed: rank 1 on host vm died first: raised ValueError: batch 3 has 17 "
                    "labels for 16 images",
                    "solution_ddp run 2: abort: rank 1 on host vm died first: raised ValueError: shard 3 is empty "
                    "(its process then ended with SIGABRT)"]
    assert [r["run"] for r in row["failed_runs"]] == [1, 2]


def test_every_script_it_runs_exists():
    for path, args in tool().SCRIPTS.values():
        assert os.path.isfile(os.path.join(ROOT, path)) and args


@pytest.mark.slow
def test_two_runs_of_the_solution_do_not_abort(tmp_path, capsys):
    out = tmp_path / "loop.json"
    code = tool().main(["--runs", "2", "--scripts", "solution_ddp", "--timeout", "90", "--out", str(out)])
    printed = capsys.readouterr().out
    record = json.loads(out.read_text())
    [row] = record["results"]
    assert (row["script"], row["runs"], row["aborts"], row["failures"]) == ("solution_ddp", 2, 0, 0), \
        row["failed_runs"]
    assert code == 0 and len(row["seconds"]) == 2 and row["median_s"] > 0
    assert "solution_ddp" in printed and "aborts" in printed and record["provenance"]["command"]
