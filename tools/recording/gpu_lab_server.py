"""Measure a machine of 4 or 8 GPUs (a lab server) in one call, and keep everything in a few files.

    bash tools/recording/gpu_lab_server.sh [--allow-nvls] [--only STEP,...] [--skip STEP,...] [--dry-run]
    python3 tools/recording/gpu_lab_server.py [same options]      (without gpu_setup.sh: no Horovod build)

It only measures: it builds nothing but the p2p test (make, where its binary is missing) and, through
gpu_setup.sh, Horovod where no wheel imports; it edits nothing in the checkout. The steps, in order
(each with its own timeout; a step that fails or times out is recorded as such and the next one runs):

  doctor, pairs       ddlab doctor --json; the GPU pairs (ddlab.system.gpu_pairs: the level sweep's pair,
                      whether the GPUs meet in an NVSwitch)
  report              ddlab report end to end (its own time plan: about 10 minutes on 8 GPUs)
  report-compare      the same report folder again with --resume --compare h200x2 (only the comparison)
  topology            nvidia-smi topo -m, and the topology as a recording (for reference/topologies/)
  p2p                 our p2p test over every GPU pair, with provenance (for reference/p2p/)
  allreduce-PATH      the all-reduce sweep on all GPUs under each NCCL path (default, shm, socket), NVLS off;
                      with --allow-nvls on a machine whose GPUs meet in an NVSwitch, the default path again
                      with NVLS on (shm and socket turn multicast off themselves, so NVLS changes only
                      the default path); then one file of the NVLS-off sweeps (for reference/allreduce/)
  levels              the NCCL_P2P_LEVEL sweep (one 256 MiB all-reduce under each level) on one pair: the
                      farthest pair, or GPUs 0 and 1 with one line saying that every pair is NVLink
  scaling-L-M-MODE    1 -> 2 -> 4 (-> 8) GPUs over the plain one-GPU run, for DDP and Horovod (L), the CNN,
                      the wide model and the two MLPs (M), weak and strong (MODE), under each NCCL path, 3 interleaved
                      repeats (record_scaling.py; Horovod's steps are recorded as skipped without Horovod)
  nbval-all, nbval-2  every notebook under nbval with all GPUs visible, then with CUDA_VISIBLE_DEVICES
                      naming two (gpu_nbval.sh)

NVLink multicast stays off (NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1, NVSHMEM_DISABLE_NVLS=1
in every step); --allow-nvls turns NCCL's NVLS on for one extra sweep of the default path, and only where
the GPUs meet in an NVSwitch. Never give it on a shared machine: multicast there can put the host's GPUs
out of service for others. Results: the work folder (--work, default /tmp/ddlab-lab-server, outside OUT)
is packed after every step into $OUT/lab_server.tgz; $OUT/steps.json says each step's status, exit code,
seconds and command, and $OUT/lab_server.txt holds what the script printed: three files (a pack over
15 MiB is split into lab_server.tgz.00, .01, ...; cat them back into one). A run split over several
calls (--only, --skip, --deadline SECONDS for a call of limited time) into the same --work folder keeps
every step's record in steps.json and every result in the pack.
Unpack the tar and run adopt_results.py on its results/ folder.

Time (design estimates, not timed yet): on 8 GPUs about 10 minutes for the report, 5-10 for the p2p
test, 5-8 for the sweeps, 2 for the level sweep, 16 scaling steps of 33 launches (15-30 s each, the wide
model's about twice that) at 8-33 minutes each (about 3-5.5 hours), and 25-60 minutes for each nbval pass:
about 4.5-7.5 hours in all; on 4 GPUs the scaling steps are 24 launches each, about 3.5-5.5 hours in all.
--dry-run prints every step's command and estimate and runs nothing (``--only``/``--skip`` split a run).
"""
import argparse
import io
import json
import os
import shlex
import signal
import subprocess
import sys
import tarfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "source_code"))
from ddlab.system import nccl  # noqa: E402

PATHS = ("default", "shm", "socket")
LAUNCHERS = ("ddp", "horovod")
MODELS = ("cnn", "wide", "mlp-small", "mlp-large")
MODES = ("weak", "strong")
COMPARE_WITH = "h200x2"
LAUNCH_S = 22.0          # one training launch on 4-8 GPUs, a design estimate (15-30 s)
# the wide model all-reduces 288 MiB a step: over sockets on 4-8 GPUs a launch takes longer (design
# estimates), so its launches get more time than runspec's default before they are killed
WIDE_LAUNCH_S, WIDE_TIMEOUT_S = 45.0, 600


def say(line: str, log=None) -> None:
    print(line, flush=True)
    if log is not None:
        log.write(line + "\n")
        log.flush()


def step(name, argv, timeout, est, env=None, shell=False, note=None):
    """One step: ``argv`` (a list, or one shell line with ``shell``), its extra environment, timeout
    and estimate (seconds), and a note printed before it runs."""
    return {"name": name, "argv": argv, "timeout": int(timeout), "est": float(est), "env": dict(env or {}),
            "shell": shell, "note": note}


def facts_of(args) -> dict:
    """The GPU pairs (ddlab.system.gpu_pairs), from --topo-file or this machine; {} when unknown."""
    cmd = [args.python, "-m", "ddlab.system.gpu_pairs"] + (["--topo-file", args.topo_file] if args.topo_file else [])
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=ROOT, env=base_env(args))
        return json.loads(out.stdout or "{}")
    except (subprocess.TimeoutExpired, ValueError, OSError):
        return {}


def gpu_count(args) -> int:
    if args.gpus is not None:
        return args.gpus
    try:
        out = subprocess.run([args.python, "-c", "import torch; print(torch.cuda.device_count())"],
                             capture_output=True, text=True, timeout=300)
        return int(out.stdout.strip() or 0)
    except (subprocess.TimeoutExpired, ValueError, OSError):
        return 0


def base_env(args) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.join(ROOT, "source_code") + (os.pathsep + env["PYTHONPATH"]
                                                             if env.get("PYTHONPATH") else "")
    env.update(NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1", NVSHMEM_DISABLE_NVLS="1",
               PYTHONUNBUFFERED="1")
    return env


def plan(args, gpus: int, facts: dict, name: str) -> list:
    """Every step of the run, in order (the module docstring says what each does)."""
    py, W = args.python, args.work
    res = os.path.join(W, "results")
    q = shlex.quote
    steps = [step("doctor", f"{q(py)} -m ddlab doctor --json > {q(os.path.join(res, 'doctor.json'))}", 300, 10,
                  shell=True),
             step("pairs", f"{q(py)} -m ddlab.system.gpu_pairs > {q(os.path.join(res, 'pairs.json'))}", 120, 3,
                  shell=True)]
    report = os.path.join(W, "report")
    # --resume: a call that finds the report folder of an earlier call of a split run keeps its finished steps
    steps.append(step("report", [py, "-m", "ddlab", "report", "--out", report, "--resume"], 1800,
                      600 if gpus > 4 else 560))
    steps.append(step("report-compare", [py, "-m", "ddlab", "report", "--out", report, "--resume", "--compare",
                                         COMPARE_WITH], 600, 30))
    steps.append(step("topology", f"nvidia-smi topo -m > {shlex.quote(os.path.join(res, 'topo.txt'))} 2>&1; "
                      f"{shlex.quote(py)} {shlex.quote(os.path.abspath(__file__))} --record-topology "
                      f"{shlex.quote(os.path.join(res, f'topology_{name}.json'))}", 120, 5, shell=True))
    pairs = gpus * (gpus - 1)
    steps.append(step("p2p", [py, "-m", "ddlab", "p2p", "--json", "--record", os.path.join(res, f"p2p_{name}.json")],
                      max(900, 25 * pairs), min(600, 11 * pairs)))
    nccl_dir = os.path.join(W, "nccl")
    for p in PATHS:
        steps.append(step(f"allreduce-{p}", [py, "-m", "ddlab", "allreduce", "--paths", p, "--max-bytes", "1G",
                                             "--timeout", "400", "--log-dir", os.path.join(nccl_dir, "nvls-off"),
                                             "--out", os.path.join(res, f"allreduce_{p}_{name}.json")], 480, 100))
    nvls = bool(facts.get("nvswitch"))
    if args.allow_nvls and nvls:
        steps.append(step("allreduce-default-nvls-on", [py, "-m", "ddlab", "allreduce", "--paths", "default",
                                                        "--max-bytes", "1G", "--timeout", "400", "--log-dir",
                                                        os.path.join(nccl_dir, "nvls-on"), "--out",
                                                        os.path.join(res, f"allreduce_default_nvls-on_{name}.json")],
                          480, 100, env={"NCCL_NVLS_ENABLE": "1"},
                          note="NVLS on (--allow-nvls, the GPUs meet in an NVSwitch): the default path only"))
    steps.append(step("allreduce-combine", [py, os.path.abspath(__file__), "--combine-allreduce", res, name], 60, 2,
                      note=("NVLS stays off: " + ("--allow-nvls not given" if not args.allow_nvls else
                                                  "no NVSwitch (every pair the same NVLink, more than two GPUs)"))
                      if not (args.allow_nvls and nvls) else None))
    pair = facts.get("level_pair") or [0, 1]
    steps.append(step("levels", [py, "-m", "ddlab", "allreduce", "--nproc", "2", "--paths", ",".join(nccl.P2P_LEVELS),
                                 "--min-bytes", "256M", "--max-bytes", "256M", "--nccl-debug", "--timeout", "60",
                                 "--out", os.path.join(res, f"levels_{name}.json")], 400, 70,
                      env={"CUDA_VISIBLE_DEVICES": f"{pair[0]},{pair[1]}"},
                      note=facts.get("level_pair_why") or "GPU pairs unknown: the level sweep runs on GPUs 0 and 1"))
    from ddlab.training import gpu_scaling
    workers = list(gpu_scaling.worker_counts(gpus))
    launches = (2 + (len(workers) - 1) * len(PATHS)) * args.repeats
    for la in LAUNCHERS:
        for m in MODELS:
            each, limit = (WIDE_LAUNCH_S, ["--timeout", str(WIDE_TIMEOUT_S)]) if m == "wide" else (LAUNCH_S, [])
            for mode in MODES:
                steps.append(step(f"scaling-{la}-{m}-{mode}",
                                  [py, os.path.join(ROOT, "tools", "recording", "record_scaling.py"),
                                   os.path.join(res, "experiments"), f"{la}:{m}:{mode}",
                                   "--workers", ",".join(map(str, workers)), "--paths", ",".join(PATHS),
                                   "--repeats", str(args.repeats), "--tag", name] + limit, 3 * launches * each,
                                  launches * each))
    nb = os.path.join(ROOT, "tools", "recording", "gpu_nbval.sh")
    steps.append(step("nbval-all", ["bash", nb], 5400, 2400, env={"OUT": os.path.join(res, "nbval-all")}))
    steps.append(step("nbval-2", ["bash", nb], 5400, 1800, env={"OUT": os.path.join(res, "nbval-2"),
                                                                "CUDA_VISIBLE_DEVICES": "0,1"}))
    return steps


def pick(steps: list, only, skip) -> list:
    def match(s, names):
        return any(s["name"] == n or s["name"].startswith(n + "-") for n in names)
    out = [s for s in steps if (not only or match(s, only)) and not match(s, skip or [])]
    unknown = [n for n in (only or []) + (skip or []) if not any(match(s, [n]) for s in steps)]
    if unknown:
        raise SystemExit(f"gpu_lab_server: no step named {', '.join(unknown)}; the steps are: "
                         + ", ".join(s["name"] for s in steps))
    return out


def shown(s: dict) -> str:
    """A step's command as one copyable line (its environment first)."""
    env = " ".join(f"{k}={shlex.quote(v)}" if v is not None else f"-u {k}" for k, v in sorted(s["env"].items()))
    env = ("env " + env + " ") if env else ""
    cmd = s["argv"] if s["shell"] else shlex.join(s["argv"])
    return f"timeout {s['timeout']} {env}" + (f"bash -c {shlex.quote(cmd)}" if s["shell"] and env else cmd)


def run_step(s: dict, args, log) -> dict:
    env = base_env(args)
    for k, v in s["env"].items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    os.makedirs(os.path.join(args.work, "logs"), exist_ok=True)
    t0 = time.monotonic()
    rec = {"name": s["name"], "command": shown(s), "timeout_s": s["timeout"], "estimate_s": s["est"]}
    with open(os.path.join(args.work, "logs", s["name"] + ".txt"), "w") as out:
        try:
            proc = subprocess.Popen(s["argv"], shell=s["shell"], cwd=ROOT, env=env, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        except OSError as exc:
            rec.update(status="failed", rc=None, seconds=0.0, why=str(exc))
            return rec
        try:
            rc = proc.wait(timeout=s["timeout"])
            rec.update(status="done" if rc == 0 else "failed", rc=rc)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            rec.update(status="timed out", rc=None)
    rec["seconds"] = round(time.monotonic() - t0, 1)
    return rec


PART_BYTES = 15 << 20      # parts small enough to copy off the GPU machine one by one (at most 16 MiB each)


def pack(args) -> list:
    """The work folder into $OUT/lab_server.tgz, each file written atomically (a cut run keeps the last
    pack); a pack over :data:`PART_BYTES` is split into lab_server.tgz.00, .01, ... (``cat lab_server.tgz.*
    > lab_server.tgz`` joins them). Returns the files written."""
    from ddlab.base import files
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        tar.add(args.work, arcname="lab_server")
    data = buf.getvalue()
    if len(data) <= PART_BYTES:
        names = ["lab_server.tgz"]
        files.write_bytes(os.path.join(args.out, names[0]), data)
    else:
        names = [f"lab_server.tgz.{i:02d}" for i in range((len(data) + PART_BYTES - 1) // PART_BYTES)]
        for i, name in enumerate(names):
            files.write_bytes(os.path.join(args.out, name), data[i * PART_BYTES:(i + 1) * PART_BYTES])
    for old in os.listdir(args.out):                     # the previous pack's other files
        if old.startswith("lab_server.tgz") and old not in names and not old.startswith("."):
            os.remove(os.path.join(args.out, old))
    return names


def earlier_records(args) -> list:
    """The steps of earlier calls into the same work folder (a run split with --only), for steps.json."""
    try:
        with open(os.path.join(args.work, "steps.json")) as f:
            return list(json.load(f).get("steps") or [])
    except (OSError, ValueError):
        return []


def write_steps(args, records: list, meta: dict) -> None:
    from ddlab.base import files
    for path in (os.path.join(args.out, "steps.json"), os.path.join(args.work, "steps.json")):
        files.write_json(path, dict(meta, steps=records), what="the lab server's steps")


def machine_name(args) -> tuple:
    if os.environ.get("NAME") and os.environ.get("DDLAB_MACHINE"):
        return os.environ["DDLAB_MACHINE"], os.environ["NAME"]
    try:
        out = subprocess.run([args.python, "-m", "ddlab", "doctor", "--label", "--slug"], capture_output=True,
                             text=True, timeout=300, cwd=ROOT, env=base_env(args))
        label, slug = (out.stdout.splitlines() + ["", ""])[:2]
    except (subprocess.TimeoutExpired, OSError):
        label, slug = "", ""
    return os.environ.get("DDLAB_MACHINE") or label or "unknown", os.environ.get("NAME") or slug or "unknown"


def record_topology(path: str) -> int:
    """This machine's topology as a recording (what ``ddlab topo --save`` writes), at ``path``."""
    from ddlab.base import files
    from ddlab.system import provenance
    from ddlab.system.topology import Topology
    topo = Topology.from_system()
    prov = provenance.collect(command="nvidia-smi topo -m")
    prov["kind"] = "measured"
    topo.name = os.path.basename(path)[len("topology_"):-len(".json")]
    topo.provenance = prov
    topo.description = f"{prov.get('gpu_count')}x {prov.get('gpu_model')}"
    files.write_json(path, topo.to_dict(), schema="topologies", what="recorded topology")
    return 0


def combine_allreduce(res: str, name: str) -> int:
    """The NVLS-off sweeps in one file, as reference/allreduce/<name>.json holds them."""
    from ddlab.measure import collectives as c
    sweeps = []
    for p in PATHS:
        path = os.path.join(res, f"allreduce_{p}_{name}.json")
        if os.path.exists(path):
            sweeps += c.read_json(path)
        else:
            print(f"missing {os.path.basename(path)} (that sweep failed)")
    if not sweeps:
        print("no sweep finished: nothing to combine")
        return 1
    c.write_json(sweeps, os.path.join(res, f"reference_allreduce_{name}.json"))
    print(c.summary(sweeps, at_bytes=512 << 20))
    return 0


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0], epilog=__doc__.split("\n", 2)[2],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=os.environ.get("OUT") or os.path.join(os.getcwd(), "lab_out"),
                   help="where the three files go (default $OUT, else ./lab_out)")
    p.add_argument("--work", default="/tmp/ddlab-lab-server", help="the work folder (packed into OUT)")
    p.add_argument("--allow-nvls", action="store_true", help="also sweep the default path with NCCL's NVLS on "
                   "where the GPUs meet in an NVSwitch (off by default: NCCL_NVLS_ENABLE=0 everywhere). Only on a "
                   "machine of your own: on a shared one multicast can put the GPUs out of service for others")
    p.add_argument("--only", type=lambda t: t.split(","), help="run only these steps (a prefix names a group: "
                   "scaling, allreduce, nbval, scaling-ddp)")
    p.add_argument("--skip", type=lambda t: t.split(","), help="leave these steps out")
    p.add_argument("--repeats", type=int, default=3, help="interleaved rounds of each scaling step (default 3)")
    p.add_argument("--gpus", type=int, help="plan for this many GPUs (default: what torch sees; a dry run without "
                   "GPUs plans for 8)")
    p.add_argument("--topo-file", help="plan from this topology (text or a reference/topologies JSON)")
    p.add_argument("--python", default=os.environ.get("PYTHON") or sys.executable)
    p.add_argument("--deadline", type=float, help="seconds this call may take: a step whose estimate does not fit "
                   "what is left is skipped (recorded so), and each step's timeout is cut to what is left")
    p.add_argument("--dry-run", action="store_true", help="print every step's command and estimate; run nothing")
    p.add_argument("--record-topology", metavar="PATH", help=argparse.SUPPRESS)
    p.add_argument("--combine-allreduce", nargs=2, metavar=("RESULTS", "NAME"), help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse(argv)
    if args.record_topology:
        return record_topology(args.record_topology)
    if args.combine_allreduce:
        return combine_allreduce(*args.combine_allreduce)
    gpus = gpu_count(args)
    if args.dry_run and not gpus:
        gpus = 8
    facts = facts_of(args)
    dry = args.dry_run and not os.environ.get("NAME")
    label, name = ("(dry run)", f"{gpus}x-dry-run") if dry else machine_name(args)
    steps = pick(plan(args, gpus, facts, name), args.only, args.skip)
    total = sum(s["est"] for s in steps)
    head = (f"gpu_lab_server: {len(steps)} step(s) on {label} ({gpus} GPUs, file names {name}); NVLS "
            f"{'on for the default path where there is an NVSwitch' if args.allow_nvls else 'off'}; "
            f"estimated {total / 3600:.1f} h")
    if args.dry_run:
        print(head)
        for s in steps:
            if s["note"]:
                print(f"# {s['note']}")
            print(f"[{s['name']}] about {s['est'] / 60:.0f} min: {shown(s)}")
        return 0
    if gpus < 2:
        print(f"gpu_lab_server: needs at least 2 GPUs, torch sees {gpus} (--dry-run shows the plan)")
        return 2
    os.makedirs(os.path.join(args.work, "results"), exist_ok=True)
    os.makedirs(args.out, exist_ok=True)
    meta = {"machine": label, "name": name, "gpus": gpus, "pairs": facts, "allow_nvls": args.allow_nvls}
    mine = {s["name"] for s in steps}
    records = [r for r in earlier_records(args) if r.get("name") not in mine]
    start = time.monotonic()
    with open(os.path.join(args.out, "lab_server.txt"), "a") as log:
        say(head, log)
        for s in steps:
            left = None if args.deadline is None else args.deadline - (time.monotonic() - start)
            if left is not None and (left < s["est"] or left < 10):
                rec = {"name": s["name"], "command": shown(s), "status": "skipped", "rc": None, "seconds": 0.0,
                       "why": f"{left:.0f} s left of --deadline, the step is estimated at {s['est']:.0f} s"}
                records.append(rec)
                say(f"[{s['name']}] skipped: {rec['why']}", log)
                write_steps(args, records, meta)
                continue
            if left is not None:
                s = dict(s, timeout=int(min(s["timeout"], left)))
            if s["note"]:
                say(f"# {s['note']}", log)
            say(f"[{s['name']}] start (timeout {s['timeout']} s): {shown(s)}", log)
            rec = run_step(s, args, log)
            records.append(rec)
            say(f"[{s['name']}] {rec['status']} in {rec['seconds']} s"
                + (f" (exit {rec['rc']})" if rec.get("rc") else ""), log)
            write_steps(args, records, meta)
            pack(args)
        bad = [r["name"] for r in records if r["name"] in mine and r["status"] != "done"]
        say("gpu_lab_server: done; " + (f"not done: {', '.join(bad)}" if bad else "every step done"), log)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
