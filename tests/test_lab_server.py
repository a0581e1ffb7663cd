"""tools/recording/gpu_lab_server.py, the one-call recording of a 4- or 8-GPU machine, on CPU: its plan
for 4 and 8 GPUs (from the recorded topologies), its dry run, and that a failed or timed-out step is
recorded and the next one still runs."""
import importlib.util
import json
import os
import subprocess
import sys
import tarfile

import pytest

from ddlab.training.runspec import DEFAULT_TIMEOUT

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..")
SCRIPT = os.path.join(ROOT, "tools", "recording", "gpu_lab_server.py")
TOPOLOGIES = os.path.join(ROOT, "source_code", "reference", "topologies")

spec = importlib.util.spec_from_file_location("gpu_lab_server", SCRIPT)
lab = importlib.util.module_from_spec(spec)
spec.loader.exec_module(lab)


def planned(*argv, gpus=8, topo="dgx-a100"):
    args = lab.parse(["--dry-run", "--gpus", str(gpus), "--topo-file", os.path.join(TOPOLOGIES, topo + ".json"),
                      *argv])
    facts = lab.facts_of(args)
    return {s["name"]: s for s in lab.plan(args, gpus, facts, "8xtest")}, args


def env_of(step, args):
    env = lab.base_env(args)
    for k, v in step["env"].items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    return env


def test_nvls_is_off_in_every_step_unless_allowed_and_there_is_a_switch():
    steps, args = planned()
    assert all(env_of(s, args)["NCCL_NVLS_ENABLE"] == "0" for s in steps.values())
    steps, args = planned("--allow-nvls")
    on = [n for n, s in steps.items() if env_of(s, args)["NCCL_NVLS_ENABLE"] != "0"]
    assert on == ["allreduce-default-nvls-on"]
    # PyTorch's and NVSHMEM's multicast stay off in every step, the NVLS one too
    assert all(env_of(s, args)["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1" == env_of(s, args)["NVSHMEM_DISABLE_NVLS"]
               for s in steps.values())
    steps, args = planned("--allow-nvls", topo="dgx1-v100")      # no NVSwitch: no NVLS step
    assert all(env_of(s, args)["NCCL_NVLS_ENABLE"] == "0" for s in steps.values())


def test_level_sweep_runs_on_the_farthest_pair_or_says_every_pair_is_nvlink():
    steps, _ = planned(topo="dgx1-v100")
    assert steps["levels"]["env"]["CUDA_VISIBLE_DEVICES"] == "0,5" and "--nproc" in steps["levels"]["argv"]
    steps, _ = planned(topo="dgx-a100")
    assert steps["levels"]["env"]["CUDA_VISIBLE_DEVICES"] == "0,1" and "NVLink" in steps["levels"]["note"]


@pytest.mark.parametrize("gpus,workers", [(4, "1,2,4"), (8, "1,2,4,8")])
def test_scaling_covers_every_launcher_model_and_mode_up_to_all_gpus(gpus, workers):
    steps, _ = planned(gpus=gpus, topo="pcie-4gpu" if gpus == 4 else "dgx-a100")
    scaling = [s for n, s in steps.items() if n.startswith("scaling-")]
    assert len(scaling) == 2 * 4 * 2
    jobs = {s["argv"][3] for s in scaling}
    assert jobs == {f"{la}:{m}:{mode}" for la in ("ddp", "horovod") for m in ("cnn", "wide", "mlp-small", "mlp-large")
                    for mode in ("weak", "strong")}
    for s in scaling:
        argv = s["argv"]
        assert argv[argv.index("--workers") + 1] == workers and argv[argv.index("--repeats") + 1] == "3"
        assert argv[argv.index("--paths") + 1] == "default,shm,socket"
        # the wide model's launches (288 MiB a step over sockets) get longer than the default launch timeout
        wide = ":wide:" in argv[3]
        assert ("--timeout" in argv) == wide
        assert not wide or float(argv[argv.index("--timeout") + 1]) > DEFAULT_TIMEOUT["cuda"]
        assert s["timeout"] >= 2 * s["est"]
    est = {s["argv"][3]: s["est"] for s in scaling}
    assert est["ddp:wide:weak"] > est["ddp:cnn:weak"]


def test_every_step_has_a_timeout_and_nbval_runs_with_all_and_with_two_gpus():
    steps, _ = planned()
    assert all(s["timeout"] > 0 for s in steps.values())
    assert "CUDA_VISIBLE_DEVICES" not in steps["nbval-all"]["env"]
    assert len(steps["nbval-2"]["env"]["CUDA_VISIBLE_DEVICES"].split(",")) == 2
    compare = steps["report-compare"]["argv"]
    assert compare[-2:] == ["--compare", "h200x2"] and "--resume" in compare
    assert list(steps).index("report") < list(steps).index("report-compare")


def test_only_and_skip_pick_steps_and_an_unknown_name_is_refused():
    steps, args = planned()
    got = lab.pick(list(steps.values()), ["scaling-ddp", "levels"], ["scaling-ddp-cnn"])
    assert [s["name"] for s in got][0] == "levels" and len(got) == 1 + 6     # wide and the MLPs, weak and strong
    with pytest.raises(SystemExit):
        lab.pick(list(steps.values()), ["no-such-step"], None)


def test_dry_run_prints_each_step_and_runs_nothing(tmp_path):
    out = subprocess.run([sys.executable, SCRIPT, "--dry-run", "--out", str(tmp_path / "out"), "--work",
                          str(tmp_path / "work"), "--topo-file", os.path.join(TOPOLOGIES, "dgx1-v100.json")],
                         capture_output=True, text=True, timeout=300, cwd=ROOT,
                         env=dict(os.environ, PYTHONPATH=os.path.join(ROOT, "source_code")))
    assert out.returncode == 0, out.stderr
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("[")]
    steps, _ = planned(topo="dgx1-v100")
    assert [ln.split("]")[0][1:] for ln in lines] == list(steps)
    assert not (tmp_path / "out").exists() and not (tmp_path / "work").exists()


def test_a_failed_and_a_timed_out_step_are_recorded_and_the_run_goes_on(monkeypatch, tmp_path):
    fake = [lab.step("fails", [sys.executable, "-c", "raise SystemExit(3)"], 60, 1),
            lab.step("hangs", [sys.executable, "-c", "import time; time.sleep(60)"], 1, 1),
            lab.step("works", f"{sys.executable} -c 'print(1)' > {tmp_path / 'w.txt'}", 60, 1, shell=True)]
    monkeypatch.setattr(lab, "plan", lambda *a: fake)
    monkeypatch.setattr(lab, "facts_of", lambda args: {})
    monkeypatch.setenv("NAME", "2xtest")
    monkeypatch.setenv("DDLAB_MACHINE", "2x Test GPU")
    rc = lab.main(["--gpus", "2", "--out", str(tmp_path / "out"), "--work", str(tmp_path / "work")])
    assert rc == 1
    with open(tmp_path / "out" / "steps.json") as f:
        got = json.load(f)
    assert [(s["name"], s["status"], s["rc"]) for s in got["steps"]] == [
        ("fails", "failed", 3), ("hangs", "timed out", None), ("works", "done", 0)]
    assert (tmp_path / "w.txt").read_text().strip() == "1"
    with tarfile.open(tmp_path / "out" / "lab_server.tgz") as tar:
        names = tar.getnames()
    assert "lab_server/steps.json" in names and "lab_server/logs/fails.txt" in names
    assert sorted(os.listdir(tmp_path / "out")) == ["lab_server.tgz", "lab_server.txt", "steps.json"]


def test_adopt_results_takes_a_lab_servers_files_home_and_checks_their_machine_tag(tmp_path, monkeypatch, capsys):
    spec = importlib.util.spec_from_file_location("adopt_results", os.path.join(ROOT, "tools", "recording",
                                                                                "adopt_results.py"))
    adopt = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(adopt)
    ref, res = tmp_path / "reference", tmp_path / "results"
    res.mkdir()
    monkeypatch.setattr(adopt, "REFERENCE", str(ref))
    monkeypatch.setattr(adopt, "PENDING", str(tmp_path / "pending"))
    eight = {"machine": "8x NVIDIA H200, NV18", "gpu_model": "NVIDIA H200", "gpu_count": 8, "date": "2026-11-29"}
    four = dict(eight, machine="4x NVIDIA H200, NV18", gpu_count=4)
    tag = "8xh200-nv18"

    def put(name, prov):
        (res / name).write_text(json.dumps({"experiment": "scaling", "rows": [{}], "provenance": prov}))
    for name in (f"reference_allreduce_{tag}.json", f"levels_{tag}.json", f"p2p_{tag}.json",
                 f"topology_{tag}.json", f"scaling-torch-ddp-cnn-weak-default-{tag}.json"):
        put(name, eight)
    put("scaling-torch-horovod-cnn-strong-shm-8xh200-nv18.json", four)      # a 4-GPU file under an 8-GPU name
    steps = {os.path.basename(s[0]): s for s in adopt.plan(str(res))}
    home = {n: os.path.relpath(s[1], ref) for n, s in steps.items()}
    assert home[f"levels_{tag}.json"] == os.path.join("allreduce", f"{tag}-levels.json")
    assert home[f"p2p_{tag}.json"] == os.path.join("p2p", f"{tag}.json")
    assert home[f"topology_{tag}.json"] == os.path.join("topologies", f"{tag}.json")
    assert home[f"reference_allreduce_{tag}.json"] == os.path.join("allreduce", f"{tag}.json")
    assert home[f"scaling-torch-ddp-cnn-weak-default-{tag}.json"] == os.path.join(
        "experiments", f"scaling-torch-ddp-cnn-weak-default-{tag}.json")
    mislabelled = "scaling-torch-horovod-cnn-strong-shm-8xh200-nv18.json"
    assert [n for n, s in steps.items() if s[2] == "refuse"] == [mislabelled]
    assert all(s[2] == "new" for n, s in steps.items() if "horovod" not in n)
    assert adopt.main([str(res)]) == 1
    assert (ref / "p2p" / f"{tag}.json").exists() and not (ref / "experiments" / mislabelled).exists()
    # names without a tag (the course's older files), and tags that agree, pass the check
    assert adopt.tag_mismatch("h200x2.json", eight) == "" and adopt.tag_mismatch(f"p2p_{tag}.json", eight) == ""
    assert adopt.tag_mismatch("reference_allreduce_2xh100-80gb-hbm3-nv18.json", four)


def test_the_topology_step_writes_a_recording_that_loads(monkeypatch, tmp_path):
    from ddlab.system import topology
    with open(os.path.join(HERE, "fixtures", "topo", "h200x2.txt")) as f:
        text = f.read()
    monkeypatch.setattr(topology.Topology, "from_system", classmethod(lambda cls: topology.parse_topo_matrix(text)))
    path = tmp_path / "topology_2xh200-nv18.json"
    assert lab.main(["--record-topology", str(path)]) == 0
    with open(path) as f:
        again = topology.Topology.from_dict(json.load(f))
    assert again.name == "2xh200-nv18" and again.link(0, 1).label == "NV18" and again.provenance["kind"] == "measured"


def test_the_combine_step_joins_the_nvls_off_sweeps_for_the_reference(tmp_path):
    from ddlab.measure import collectives
    rows = [{"bytes": 1024, "time_us": 10.0, "algbw_gbps": 0.1, "busbw_gbps": 0.15}]
    for p in ("default", "shm"):
        collectives.write_json([collectives.SweepResult(op="all_reduce", backend="nccl", path=p, env={}, nproc=8,
                                                        rows=rows, provenance={"gpu_count": 8})],
                               str(tmp_path / f"allreduce_{p}_8xtest.json"))
    assert lab.main(["--combine-allreduce", str(tmp_path), "8xtest"]) == 0
    got = collectives.read_json(str(tmp_path / "reference_allreduce_8xtest.json"))
    assert [s.path for s in got] == ["default", "shm"] and all(s.nproc == 8 for s in got)


def test_a_call_with_a_deadline_skips_what_does_not_fit_and_a_later_call_keeps_the_earlier_records(
        monkeypatch, tmp_path):
    fake = [lab.step("quick", [sys.executable, "-c", "print(1)"], 60, 1),
            lab.step("long", [sys.executable, "-c", "print(2)"], 600, 500)]
    monkeypatch.setattr(lab, "plan", lambda *a: fake)
    monkeypatch.setattr(lab, "facts_of", lambda args: {})
    monkeypatch.setenv("NAME", "2xtest")
    monkeypatch.setenv("DDLAB_MACHINE", "2x Test GPU")
    common = ["--gpus", "2", "--out", str(tmp_path / "out"), "--work", str(tmp_path / "work")]
    assert lab.main(common + ["--deadline", "100"]) == 1
    steps = json.loads((tmp_path / "out" / "steps.json").read_text())["steps"]
    assert [(s["name"], s["status"]) for s in steps] == [("quick", "done"), ("long", "skipped")]
    assert lab.main(common + ["--only", "long"]) == 0
    steps = json.loads((tmp_path / "out" / "steps.json").read_text())["steps"]
    assert [(s["name"], s["status"]) for s in steps] == [("quick", "done"), ("long", "done")]


def test_a_large_pack_comes_back_in_parts_that_join(monkeypatch, tmp_path):
    work, out = tmp_path / "work", tmp_path / "out"
    work.mkdir()
    out.mkdir()
    (work / "big.bin").write_bytes(os.urandom(3 << 20))      # does not compress
    monkeypatch.setattr(lab, "PART_BYTES", 1 << 20)
    args = lab.parse(["--out", str(out), "--work", str(work)])
    names = lab.pack(args)
    assert len(names) == 4 and sorted(os.listdir(out)) == names
    joined = tmp_path / "joined.tgz"
    joined.write_bytes(b"".join((out / n).read_bytes() for n in names))
    with tarfile.open(joined) as tar:
        assert tar.extractfile("lab_server/big.bin").read() == (work / "big.bin").read_bytes()
    assert lab.pack(lab.parse(["--out", str(out), "--work", str(tmp_path / "work")])) == names   # parts replaced


def test_a_machine_of_two_gpu_models_counts_both_groups_of_its_tag():
    spec = importlib.util.spec_from_file_location("adopt_results", os.path.join(ROOT, "tools", "recording",
                                                                                "adopt_results.py"))
    adopt = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(adopt)
    name = "scaling-torch-ddp-cnn-weak-default-2xh100-80gb-hbm3-2xa100-pcie-40gb-nv4-sys.json"
    assert adopt.tag_mismatch(name, {"gpu_count": 4}) == "" and adopt.tag_mismatch(name, {"gpu_count": 2})
