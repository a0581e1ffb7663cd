"""tools/teardown_loop.py: 2-process DDP runs on the CPU under torchrun, none of which may abort at
teardown. CI runs it 5 times on the hands-on solution (a few seconds a run); the 50-run loop is the
same command with --runs 50."""
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


def test_every_script_it_runs_exists():
    for path, args in tool().SCRIPTS.values():
        assert os.path.isfile(os.path.join(ROOT, path)) and args


@pytest.mark.slow
def test_five_runs_of_the_solution_do_not_abort(tmp_path, capsys):
    out = tmp_path / "loop.json"
    code = tool().main(["--runs", "5", "--scripts", "solution_ddp", "--timeout", "90", "--out", str(out)])
    printed = capsys.readouterr().out
    record = json.loads(out.read_text())
    [row] = record["results"]
    assert (row["script"], row["runs"], row["aborts"], row["failures"]) == ("solution_ddp", 5, 0, 0), \
        row["failed_runs"]
    assert code == 0 and len(row["seconds"]) == 5 and row["median_s"] > 0
    assert "solution_ddp" in printed and "aborts" in printed and record["provenance"]["command"]
