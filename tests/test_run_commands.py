"""Every run prints its exact command line: ddlab.training.runs.command_line, for live runs and for each
row of a recorded result. The line must parse as a shell line, start the training script that exists, with
flags that script accepts, under the launcher and with the environment of the run."""
import importlib.util
import os
import shlex

import pytest

from ddlab.base.paths import REPO_ROOT
from ddlab.system import nccl
from ddlab.training import baseline, experiments, runs
from ddlab.training.runspec import RunSpec, nccl_path_env


def _script_parser(path):
    spec = importlib.util.spec_from_file_location("script_under_test_" + os.path.basename(path)[:-3], path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.parse_args


_PARSERS = {}


def split_command(line):
    """(env {K: V}, launcher words, script path, script flags) of a command line."""
    words = shlex.split(line)
    env = {}
    while words and "=" in words[0] and words[0].split("=")[0].isupper():
        k, v = words.pop(0).split("=", 1)
        env[k] = v
    script = next(i for i, w in enumerate(words) if w.endswith(".py"))
    return env, words[:script], words[script], words[script + 1:]


def assert_runnable(line, spec):
    env, launcher, script, flags = split_command(line)
    assert os.path.isfile(os.path.join(REPO_ROOT, script)) and not os.path.isabs(script), script
    if spec.framework == "torch":                      # the script's own argparse accepts every flag
        parse = _PARSERS.setdefault(script, _script_parser(os.path.join(REPO_ROOT, script)))
        args = parse(flags)
        assert (args.launcher, args.model, args.batch_size, args.steps) == (spec.launcher, spec.model, spec.batch,
                                                                            spec.steps)
    else:
        assert flags[:4] == ["--launcher", spec.launcher, "--model", spec.model]
    if spec.launcher == "ddp":
        assert launcher[0] == "torchrun" and f"--nproc-per-node={spec.workers}" in launcher
    elif spec.launcher == "horovod":
        assert launcher[:3] == ["horovodrun", "-np", str(spec.workers)] and launcher[-1] == "python"
    else:
        assert launcher == ["python"]
    return env


@pytest.mark.parametrize("framework, launcher, path", [
    ("torch", "ddp", "default"), ("torch", "ddp", "shm"), ("torch", "horovod", "socket"), ("torch", "ddp", "PIX"),
    ("torch", "none", "default"), ("keras", "horovod", "shm")])
def test_a_command_line_parses_names_the_script_and_carries_the_path(framework, launcher, path):
    workers = 1 if launcher == "none" else 2
    spec = RunSpec.for_device("cuda", "cnn", framework=framework, launcher=launcher, workers=workers, path=path)
    env = runs.command_env(nccl_path_env(path) if workers > 1 else {}, {"NCCL_NVLS_ENABLE": "0",
                                                                          "NCCL_VERSION": "2.0", "HOME": "/x"})
    line = runs.command_line(spec, env)
    assert "\n" not in line
    shown = assert_runnable(line, spec)
    # the shell's NCCL settings and the path's variables, nothing else; a removed variable is not shown
    expect = {"NCCL_NVLS_ENABLE": "0", **{k: v for k, v in nccl.get(path).env.items()}} if workers > 1 else \
        {"NCCL_NVLS_ENABLE": "0"}
    if workers > 1 and nccl.get(path).multicast == "off":
        expect.update(nccl.MULTICAST_OFF)
    assert shown == expect


def test_a_value_with_spaces_stays_one_word():
    line = runs.command_line(RunSpec(), {"NCCL_SOCKET_IFNAME": "eth 0"})
    assert split_command(line)[0] == {"NCCL_SOCKET_IFNAME": "eth 0"}


def _commands_shown(res):
    """{row label: the command a reader takes from the table's lines}: a full line as printed, or for a row
    listed as "the same with each row's NCCL settings added", its settings column put in front of the line above."""
    from ddlab.training.results import row_label
    settings = {row_label(res.name, r, res.provenance).replace("\n", " "): r.get("env") or {} for r in res.rows}
    shown, last = {}, None
    for line in res.command_lines():
        if line.startswith("command ("):
            label, cmd = line[len("command ("):].split("): ", 1)
            shown[label], last = cmd, cmd
        else:
            assert line.startswith("commands of ") and line.endswith(": the same with each row's NCCL settings added")
            listed = line[len("commands of "):line.index(": the same")]
            labels = [label for label in settings if label in listed]      # a label may contain ", "
            labels = [label for label in labels if not any(label != other and label in other for other in labels)]
            assert ", ".join(sorted(labels, key=listed.index)) == listed        # exactly the rows' labels
            for label in labels:
                env, launcher, script, flags = split_command(last)
                shown[label] = shlex.join([f"{k}={v}" for k, v in {**env, **settings[label]}.items()]
                                          + launcher + [script] + flags)
    return shown


@pytest.mark.parametrize("launcher, model", [("ddp", "cnn"), ("horovod", "wide")])
def test_every_row_of_a_recorded_result_shows_a_runnable_command(launcher, model):
    from ddlab.training.results import row_label
    res = experiments.run_or_load("nccl-paths", "torch", launcher, model, source="recorded")
    assert res.rows
    table = res.as_table().text()
    assert all(line in table for line in res.command_lines())
    shown = _commands_shown(res)
    assert len(res.command_lines()) < len(res.rows)          # rows launched alike share a line
    for r in res.rows:
        cmd = shown[row_label(res.name, r, res.provenance).replace("\n", " ")]
        # what the reader puts together is the row's exact command, word for word up to the order of K=V
        assert split_command(cmd)[0] == split_command(res.row_command(r))[0]
        assert split_command(cmd)[1:] == split_command(res.row_command(r))[1:]
        row_spec = (experiments.plain_spec(res.spec) if baseline.is_plain(r) else
                    res.spec.with_(workers=r["workers"], path=r["path"] if r["path"] in nccl.PATHS else "default"))
        env = assert_runnable(cmd, row_spec)
        # the row's own variables (what the path set in that run) are all on its line
        assert all(env.get(k) == v for k, v in (r.get("env") or {}).items()), (r["path"], env)
        assert "NCCL_VERSION" not in env


def test_the_side_by_side_view_prints_each_launchers_command():
    from ddlab.training.results import row_label
    res = experiments.launchers_side_by_side("wide", missing_ok=True)
    shown = _commands_shown(res)
    for r in res.rows:
        launcher = split_command(shown[row_label(res.name, r, res.provenance).replace("\n", " ")])[1][0]
        assert launcher == {"ddp": "torchrun", "horovod": "horovodrun", "none": "python"}[r["launcher"]]
