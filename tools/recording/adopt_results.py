"""Copy what a GPU recording run wrote into the places the course reads it from, without ever
replacing another machine's recording.

    python tools/recording/adopt_results.py RESULTS_DIR [--dry-run] [--replace-other-machine]

RESULTS_DIR is the folder a run wrote (``gpu_batch.sh``'s results, unpacked from results.tgz). Each JSON
file there goes to its home:

* ``convergence-point-*.json``            -> tools/recording/pending/ (a sweep still in progress)
* ``tuning-*.json`` cut short (fewer interleaved rounds than its repeats) -> tools/recording/pending/ (the
  next tune JOB resumes it); the finished comparison goes to experiments/ and removes it from pending/,
  and a cut copy whose runs the finished one in experiments/ holds stays out of pending/
* ``reference_allreduce_<NAME>.json``     -> source_code/reference/allreduce/<NAME>.json
* ``levels_<NAME>.json``                  -> source_code/reference/allreduce/<NAME>-levels.json
* ``p2p_<NAME>.json``, ``topology_<NAME>.json`` -> source_code/reference/p2p/, topologies/ (gpu_lab_server.py)
* ``step-<model>[-bN].json``              -> source_code/reference/profiles/
* every other recording of an experiment  -> source_code/reference/experiments/ (nccl-paths-, scaling-,
  strong-scaling-, tuning-, one-gpu-, perf-options-, wrapper-cost-, input-pipeline-, convergence-torch-,
  plain-baselines-)

A file whose home already holds a recording made on another machine or software (GPU model or count,
driver, CUDA, NCCL or PyTorch: ``ddlab.system.provenance.SAME_MACHINE``) is not copied: the notebooks
compare that recording with others of its machine, and a result of another machine under its name would
mix two machines in one table. The tool names each such file and what differs, and exits 1; record it on
that machine, or give the new result a name of its own. ``--replace-other-machine`` copies it anyway;
``--keep-other-machine`` first moves the one there to ``<name>-<machine tag>.json`` (its provenance's
machine, ``ddlab.system.machine_name.provenance_slug``): the strong-scaling, tuning and batch-sweep checks of
other machines still find it there.
A file with the same content as its home is left alone; a newer recording of the same machine replaces
the old one (the old stays in git's history), unless it is older than the one there: a results folder on
a GPU machine can keep files of earlier runs, and those never replace a later recording (named "older",
left alone). A file whose runs are all in its home already (a part joined there before), and a
convergence point whose runs are all in the committed sweep, is named "already in" and left alone. Two
strong-scaling recordings of one JOB with different global batches (a JOB cut short, then run again with
``--global-batches`` for the batches left) are joined into one (``recording_sets.join_strong``: a note
names each part's batches and date, and each part's order of repeats where they differ). A strong-scaling
recording that would replace one holding global batches it lacks, and cannot be joined to it, is not
copied (named, exit 1): nothing recorded is dropped. Every copy is written to a temporary file, then renamed.
A file whose name carries a machine's tag (``4xh200-nv18``, as gpu_lab_server.py and record_scaling.py
name theirs) is copied only when its provenance counts that many GPUs. Files of other kinds (logs,
tasks.txt, partial convergence parts) stay where they are.
"""
import argparse
import datetime
import glob
import os
import re
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "source_code"))

from ddlab.base import files  # noqa: E402
from ddlab.system import machine_name, provenance  # noqa: E402
from ddlab.recording import sets as recording_sets  # noqa: E402
from ddlab.training import recording  # noqa: E402

REFERENCE = os.path.join(ROOT, "source_code", "reference")
PENDING = os.path.join(ROOT, "tools", "recording", "pending")
# (file name prefix, home folder under reference/, suffix of the home's name): levels_<NAME>.json ->
# allreduce/<NAME>-levels.json, p2p_<NAME>.json -> p2p/<NAME>.json, topology_<NAME>.json -> topologies/<NAME>.json
MACHINE_FILES = (("levels_", "allreduce", "-levels"), ("p2p_", "p2p", ""), ("topology_", "topologies", ""))
# A machine's file tag in a name (e.g. 4xh200-nv18): the GPU count the file must have been recorded with.
MACHINE_TAG = re.compile(r"(?<![a-z0-9])(\d+)x[a-z]")
EXPERIMENT_PREFIXES = ("nccl-paths-", "scaling-", "strong-scaling-", "tuning-", "one-gpu-", "perf-options-",
                       "wrapper-cost-", "input-pipeline-", "convergence-torch-", "plain-baselines-")


def home_of(name: str, reference: str = None, pending: str = None):
    """Where a result file named ``name`` belongs (under ``reference`` and ``pending``, default
    :data:`REFERENCE` and :data:`PENDING`), or None when it is not a recording the course reads."""
    reference, pending = reference or REFERENCE, pending or PENDING
    if not name.endswith(".json"):
        return None
    if name.startswith("convergence-point-"):
        return os.path.join(pending, name)
    if name.startswith("reference_allreduce_"):
        return os.path.join(reference, "allreduce", name[len("reference_allreduce_"):])
    for prefix, kind, suffix in MACHINE_FILES:      # gpu_lab_server.py's files, named after the machine
        if name.startswith(prefix) and len(name) > len(prefix) + len(".json"):
            return os.path.join(reference, kind, name[len(prefix):-len(".json")] + suffix + ".json")
    if name.startswith("step-"):
        return os.path.join(reference, "profiles", name)
    if name.startswith(EXPERIMENT_PREFIXES):
        return os.path.join(reference, "experiments", name)
    return None


def partial_tuning(src: str) -> bool:
    """Whether ``src`` is a tuning comparison cut short (fewer interleaved rounds than its repeats), which
    waits in pending/ for the run that finishes it."""
    if not os.path.basename(src).startswith("tuning-"):
        return False
    data = files.read_json(src, "recording")
    c = (data.get("config") if isinstance(data, dict) else None) or {}
    rounds, repeats = c.get("rounds"), c.get("repeats")
    return isinstance(rounds, int) and isinstance(repeats, int) and rounds < repeats


def tag_mismatch(name: str, prov: dict) -> str:
    """Why a file named for a machine of N GPUs (``4xh200-nv18`` in its name) does not come from one: its
    provenance counts another number of GPUs; "" when it does, or the name carries no such tag."""
    tags = MACHINE_TAG.findall(name)          # a machine of two models has two: 2xh100-...-2xa100-...
    count = prov.get("gpu_count")
    if not tags or count is None or sum(map(int, tags)) == int(count):
        return ""
    return (f"its name is of a machine of {sum(map(int, tags))} GPUs and it was recorded on "
            f"{provenance.machine_of(prov)} ({count} GPUs)")


def _provenance(path: str) -> dict:
    data = files.read_json(path, "recording")
    prov = data.get("provenance") if isinstance(data, dict) else None
    return prov if isinstance(prov, dict) else {}


def _when(prov: dict):
    """A provenance's date as an aware datetime (a date alone, or no zone: UTC), or None."""
    try:
        when = datetime.datetime.fromisoformat(str(prov.get("date", "")).replace("Z", "+00:00"))
    except ValueError:
        return None
    return when if when.tzinfo else when.replace(tzinfo=datetime.timezone.utc)


def _already_in(src: str, home: str, reference: str) -> str:
    """Why ``src`` is already recorded (its runs all in its home, or, for a convergence point, in a
    committed sweep), else ""."""
    name = os.path.basename(src)
    if name.startswith("convergence-point-"):
        homes = sorted(glob.glob(os.path.join(reference, "experiments", "convergence-torch-*.json")))
    else:
        homes = [home] if name.startswith(EXPERIMENT_PREFIXES) and os.path.exists(home) else []
    try:
        here = recording.load(src)
        for there in homes:
            if recording_sets.holds_runs(recording.load(there), here):
                return f"its runs are all in {os.path.relpath(there, ROOT)} already"
    except ValueError:
        return ""                         # not a result of this kind: the other checks say what it is
    return ""


def _batches_lost(at_home, this) -> list:
    """The global batches of the strong-scaling result ``at_home`` that ``this`` does not hold."""
    def batches(res):
        return set(res.config.get("global_batches", []))
    return sorted(batches(at_home) - batches(this))


def plan(results: str, reference: str = None, pending: str = None, replace_other: bool = False,
         keep_other: bool = False) -> list:
    """(source, home, action, why) for each recording in ``results``: action "new", "replace",
    "same" (already there), "inside" (its runs are already in its home or in the committed sweep),
    "join" (a strong-scaling part joined to the one there; the step then has a fifth item, the joined
    result), "older" (the recording there is of the same machine and later), "aside" (with ``keep_other``:
    home holds another machine's recording, which moves to the fifth item, its name with that machine's
    tag, and the result takes home), or "refuse" (home holds another machine's recording, the result has
    no provenance, or a strong-scaling result would drop global batches of the one there; ``why`` says
    which). A result that cannot be read raises ResultFileError (a ValueError)."""
    out = []
    for src in sorted(glob.glob(os.path.join(results, "*.json"))):
        home = home_of(os.path.basename(src), reference, pending)
        if home is None:
            continue
        here = _provenance(src)           # read first: a truncated result is never copied
        finished_home = home
        if partial_tuning(src):
            home = os.path.join(pending or PENDING, os.path.basename(src))
        if not here:
            out.append((src, home, "refuse", "it has no provenance (which machine, software and command made it)"))
            continue
        wrong = tag_mismatch(os.path.basename(src), here)
        if wrong:
            out.append((src, home, "refuse", wrong))
            continue
        inside = _already_in(src, home, reference or REFERENCE) or (   # a cut run the finished one holds
            home != finished_home and _already_in(src, finished_home, reference or REFERENCE))
        if inside:
            out.append((src, home, "inside", inside))
            continue
        if not os.path.exists(home):
            out.append((src, home, "new", ""))
            continue
        with open(src, "rb") as a, open(home, "rb") as b:
            if a.read() == b.read():
                out.append((src, home, "same", ""))
                continue
        there = _provenance(home)
        differ = provenance.differences(there, here)
        new_at, old_at = _when(here), _when(there)
        lost = []
        if os.path.basename(src).startswith("strong-scaling-"):   # joined there, or none of its batches dropped
            at_home, this = recording.load(home), recording.load(src)
            joined = recording_sets.join_strong(at_home, this) if not differ else None
            if joined is not None:
                out.append((src, home, "join", f"global batches {joined.config['global_batches']}", joined))
                continue
            lost = _batches_lost(at_home, this)
        if not differ and new_at and old_at and new_at < old_at:
            out.append((src, home, "older", f"recorded {here.get('date')}, the one there {there.get('date')}"))
        elif differ and keep_other:
            aside = f"{os.path.splitext(home)[0]}-{machine_name.provenance_slug(there)}.json"
            if os.path.exists(aside):
                out.append((src, home, "refuse", f"{os.path.relpath(aside, ROOT)} exists already: keep aside by hand"))
            else:
                out.append((src, home, "aside", f"the recording of {provenance.machine_of(there)} there is kept as "
                            f"{os.path.basename(aside)}", aside))
        elif differ and not replace_other:
            out.append((src, home, "refuse", f"{os.path.relpath(home, ROOT)} was recorded on "
                        f"{provenance.machine_of(there)}, this result on {provenance.machine_of(here)} "
                        f"({'; '.join(differ)})"))
        elif lost:
            out.append((src, home, "refuse", f"it would drop global batch(es) {', '.join(map(str, lost))} of "
                        f"{os.path.relpath(home, ROOT)} (recorded {there.get('date', '?')}), and the two could not "
                        "be joined (another run description, or a global batch in both)"))
        else:
            out.append((src, home, "replace", f"{there.get('date', '?')} -> {here.get('date', '?')}"
                        + (f" (another machine: {'; '.join(differ)})" if differ else "")))
    return out


def _copy(src: str, dst: str) -> None:
    """Copies ``src`` to ``dst`` atomically (ddlab.base.files): ``dst`` is the old file or the whole new one."""
    with open(src, "rb") as f:
        files.write_bytes(dst, f.read())


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("results", help="the folder a recording run wrote (unpacked results.tgz)")
    p.add_argument("--dry-run", action="store_true", help="say what would be copied, copy nothing")
    other = p.add_mutually_exclusive_group()
    other.add_argument("--replace-other-machine", action="store_true",
                       help="replace a recording even when it was made on another machine or software")
    other.add_argument("--keep-other-machine", action="store_true",
                       help="keep a recording made on another machine under its machine's name "
                            "(<name>-<machine tag>.json) and copy the new one to its home")
    a = p.parse_args(argv)
    if not os.path.isdir(a.results):
        p.error(f"{a.results} is not a folder (unpack results.tgz first: tar xzf results.tgz)")
    try:
        steps = plan(a.results, replace_other=a.replace_other_machine, keep_other=a.keep_other_machine)
    except (ValueError, OSError) as exc:
        print(f"adopt_results: error: {exc}", file=sys.stderr)
        return 2
    if not steps:
        print(f"adopt_results: no recording the course reads in {a.results}")
        return 0
    for src, home, action, why, *joined in steps:
        if action in ("new", "replace") and not a.dry_run:
            _copy(src, home)
            begun = os.path.join(PENDING, os.path.basename(src))     # the partial comparison this one finished
            if home != begun and os.path.basename(src).startswith("tuning-") and os.path.exists(begun):
                os.remove(begun)
                print(f"{'removed':11} {os.path.relpath(begun, ROOT)}: the comparison it began is complete")
        if action == "join" and not a.dry_run:
            recording.save(joined[0], home)
        if action == "aside" and not a.dry_run:     # the other machine's copied aside first: home is never lost
            _copy(home, joined[0])
            _copy(src, home)
        verb = {"new": "new", "replace": "replaced", "same": "unchanged", "older": "older", "join": "joined",
                "inside": "already in", "refuse": "NOT copied", "aside": "copied"}[action]
        print(f"{verb:11} {os.path.basename(src)} -> {os.path.relpath(home, ROOT)}" + (f": {why}" if why else ""))
    if any(s[2] == "older" for s in steps):
        print("adopt_results: the files marked older were left in the results folder by an earlier run on the same "
              "machine; the later recordings stay.")
    refused = [s for s in steps if s[2] == "refuse"]
    if refused:
        print(f"adopt_results: {len(refused)} file(s) not copied (each line above says why). A home that holds "
              "another machine's recording: record the result on that machine, or name it apart (e.g. a variant); "
              "--keep-other-machine keeps the one there under its machine's name, --replace-other-machine "
              "replaces it.", file=sys.stderr)
    if a.dry_run:
        print("adopt_results: dry run, nothing copied")
    return 1 if refused else 0


if __name__ == "__main__":
    sys.exit(main())
