"""ddlab.measure.slurm: Slurm's task counts, Horovod's plan and each srun task's HOROVOD_* variables
(the batch scripts themselves run against a real Slurm in tests/slurm/)."""
import pytest

from ddlab.measure import slurm


@pytest.mark.parametrize("value,expect", [("2", [2]), ("4(x2)", [4, 4]), ("4(x2),1", [4, 4, 1]), ("3,2", [3, 2])])
def test_expand_tasks_per_node(value, expect):
    assert slurm.expand_tasks_per_node(value) == expect


@pytest.mark.parametrize("value", ["", "x", "4(2)", "4(x)"])
def test_expand_tasks_per_node_rejects(value):
    with pytest.raises(slurm.SlurmSetupError, match="cannot read the task counts"):
        slurm.expand_tasks_per_node(value)


def test_hosts_spec():
    assert slurm.hosts_spec(["a", "b"], [4, 4]) == "a:4,b:4"
    with pytest.raises(slurm.SlurmSetupError, match="2 hosts but 1 task counts"):
        slurm.hosts_spec(["a", "b"], [4])


def test_job_hosts_spec_outside_a_job():
    with pytest.raises(slurm.SlurmSetupError, match="inside a Slurm job"):
        slurm.job_hosts_spec({})


def _env(rank, node):
    return {"SLURM_PROCID": str(rank), "SLURMD_NODENAME": node, "HOROVOD_GLOO_IFACE": "eth9"}


def test_worker_env_matches_horovods_plan():
    pytest.importorskip("horovod.runner.common.util.hosts")
    hosts = "a:2,b:2"
    e = slurm.worker_env(hosts, "127.0.0.1:4242", _env(3, "b"))
    assert e["HOROVOD_RANK"] == "3" and e["HOROVOD_SIZE"] == "4"
    assert (e["HOROVOD_LOCAL_RANK"], e["HOROVOD_LOCAL_SIZE"]) == ("1", "2")
    assert (e["HOROVOD_CROSS_RANK"], e["HOROVOD_CROSS_SIZE"]) == ("1", "2")
    assert e["HOROVOD_HOSTNAME"] == "b" and e["HOROVOD_CONTROLLER"] == "gloo"
    assert (e["HOROVOD_GLOO_RENDEZVOUS_ADDR"], e["HOROVOD_GLOO_RENDEZVOUS_PORT"]) == ("127.0.0.1", "4242")
    assert e["HOROVOD_GLOO_IFACE"] == "eth9"


@pytest.mark.parametrize("env,rdzv,match", [
    ({"SLURMD_NODENAME": "a"}, "h:1", "start the workers with srun"),
    (_env(4, "b"), "h:1", "outside the plan of 4 ranks"),
    (_env(1, "b"), "h:1", "keep srun's default block distribution"),
    (_env(0, "a"), "nohostport", "is not ADDR:PORT"),
])
def test_worker_env_refuses(env, rdzv, match):
    pytest.importorskip("horovod.runner.common.util.hosts")
    with pytest.raises(slurm.SlurmSetupError, match=match):
        slurm.worker_env("a:2,b:2", rdzv, env)


def test_cli_says_what_is_wrong(capsys, monkeypatch):
    for k in ("SLURM_JOB_NODELIST", "SLURM_TASKS_PER_NODE"):
        monkeypatch.delenv(k, raising=False)
    assert slurm.main(["hosts"]) == 2
    assert "inside a Slurm job" in capsys.readouterr().err
