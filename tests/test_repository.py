"""Repository hygiene that the course's promises depend on."""
import glob
import json
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def notebooks():
    found = glob.glob(os.path.join(ROOT, "notebooks", "*.ipynb"))      # in the course's order: 9 before 10
    return [os.path.join(ROOT, "Start_Here.ipynb")] + sorted(found, key=lambda p: (int(os.path.basename(p).split(".")[0]), p))


def test_notebooks_are_committed_without_outputs():
    for nb in notebooks():
        cells = json.load(open(nb))["cells"]
        dirty = [i for i, c in enumerate(cells) if c["cell_type"] == "code" and (c.get("outputs") or c.get("execution_count"))]
        assert not dirty, f"{nb}: code cells {dirty} carry outputs; strip them before committing"


def test_notebooks_use_the_course_kernel():
    for nb in notebooks():
        assert json.load(open(nb))["metadata"]["kernelspec"]["name"] == "ddlab", nb


def test_start_here_links_to_every_notebook():
    start = open(os.path.join(ROOT, "Start_Here.ipynb")).read()
    for nb in notebooks()[1:]:
        assert "notebooks/" + os.path.basename(nb) in start, nb


def test_ci_runs_the_readme_test_commands():
    readme = open(os.path.join(ROOT, "README.md")).read()
    first_block = re.search(r"```\n(.*?)```", readme, re.S).group(1)
    for command in ("make lab", "make test", "make browser-test"):
        assert re.search(rf"^{command}(\s|$)", first_block, re.M), command
    ci = open(os.path.join(ROOT, ".ci", "run")).read()
    runs = re.findall(r"^make ([\w-]+)(?=\s|$)", ci, re.M)     # each make line, redirected or in the background
    # make test first: the browser test shows again the training runs it keeps
    assert runs[0] == "test" and sorted(runs) == ["browser-test", "slurm-test", "test", "wheelhouse-test"], runs
    # every command CI runs is one the README gives (in a code block, at the start of a line), with no
    # other arguments than the README's
    blocks = "\n".join(re.findall(r"```\n(.*?)```", readme, re.S))
    for target, args in re.findall(r"^make ([\w-]+)([^\n>&|]*)", ci, re.M):
        cmd = f"make {target}{args}".rstrip()
        assert re.search(rf"^{re.escape(cmd)}(\s|$)", blocks, re.M), f"CI runs `{cmd}`, which no README code block shows"


def test_the_browser_test_starts_the_server_make_lab_starts():
    mk = open(os.path.join(ROOT, "Makefile")).read()
    lab_recipe = re.search(r"^lab: .*?\n((?:\t.*\n)+)", mk, re.M).group(1)
    assert "\t$(LAB_CMD)\n" in lab_recipe
    assert re.search(r"^lab-command:\n\t@echo '\$\(LAB_CMD\)'$", mk, re.M)
    assert re.search(r"^test: .*\n(?:\t.*\n)*?\t.*--ignore=tests/browser", mk, re.M), "make test must leave the browser test to make browser-test"


def test_notebooks_open_in_jupyterlab_unmodified():
    """JupyterLab rewrites a notebook's metadata from the kernel on opening, and assigns cell ids to
    notebooks older than format 4.5: either marks the notebook modified. Committed notebooks hold
    exactly what it would write (ddlab.course.kernel.NOTEBOOK_METADATA) and are nbformat 4.5 with ids."""
    import nbformat
    from ddlab.course.kernel import NOTEBOOK_METADATA
    for path in notebooks():
        nb = nbformat.read(path, as_version=nbformat.NO_CONVERT)
        name = os.path.relpath(path, ROOT)
        assert (nb.nbformat, nb.nbformat_minor) == (4, 5), f"{name}: nbformat {nb.nbformat}.{nb.nbformat_minor}, want 4.5"
        nbformat.validate(nb)
        ids = [c.get("id") for c in nb.cells]
        assert all(ids) and len(set(ids)) == len(ids), f"{name}: every cell needs its own id"
        got = {key: nb.metadata.get(key) for key in NOTEBOOK_METADATA}
        assert got == NOTEBOOK_METADATA, (f"{name}: notebook metadata must be exactly {NOTEBOOK_METADATA} "
                                          f"(what JupyterLab writes for the course kernel), not {got}")


def test_lab_binds_to_loopback_with_a_token():
    mk = open(os.path.join(ROOT, "Makefile")).read()
    assert "LAB_IP ?= 127.0.0.1" in mk
    assert "token=''" not in mk and "NotebookApp.token" not in mk and "ServerApp.token" not in mk


def test_recorded_results_carry_provenance():
    for p in glob.glob(os.path.join(ROOT, "source_code", "reference", "**", "*.json"), recursive=True):
        obj = json.load(open(p))
        prov = obj.get("provenance")
        assert isinstance(prov, dict), p
        if not prov.get("cited") and not prov.get("illustrative"):
            for key in ("machine", "gpu_model", "gpu_count", "driver", "command", "date"):
                assert key in prov, (p, key)


# ------------------------------------------------------------------------ recordings
# A recording reads the same from every checkout and says nothing about the machine it was made on
# beyond its hardware: no host name, no absolute path in its command, no folder of that machine in
# any string. Captured program output inside it (NCCL's log lines, which start with the host's
# name) stays as the program printed it.
# Folders of the machine that recorded (its home, scratch and checkout), in any string.
MACHINE_PATH = re.compile(r"(?<![\w.~$/-])/(?:root|home|tmp|var/tmp|work|workspace|scratch|mnt|opt)(?:/|(?![\w.-]))")
# Any absolute path in a command: a recorded command reads the same from every checkout.
ABSOLUTE_PATH = re.compile(r"(?<![\w.~$/-])/(?!/)[\w.+-]")


def recorded_data_files():
    """Every committed recording: source_code/reference/**/*.json and the points of a recording
    in progress, tools/recording/pending/*.json (results/ holds what this checkout measured
    itself and is git-ignored)."""
    found = []
    for parts in (("source_code", "reference", "**", "*.json"), ("tools", "recording", "pending", "*.json")):
        found += glob.glob(os.path.join(ROOT, *parts), recursive=True)
    return sorted(found)


def recorded_text_hits(obj) -> list:
    """(where, why, text) for each provenance that names a host, names the machine other than by
    its hardware or gives a command with an absolute path, and each string that names a folder of
    the recording machine."""
    from ddlab.system.machine_name import machine_label
    hits = []

    def walk(o, where):
        if isinstance(o, dict):
            prov = o.get("provenance")
            if isinstance(prov, dict) and not prov.get("cited") and not prov.get("illustrative"):
                p = where + "/provenance"
                if "hostname" in prov:
                    hits.append((p, "names the recording host", str(prov["hostname"])))
                if prov.get("gpu_count") is not None:
                    base, m = machine_label(prov), str(prov.get("machine"))
                    if not (m == base or m.startswith(base + ", ")):
                        hits.append((p, f"machine is not its hardware ({base}...)", m))
                if isinstance(prov.get("command"), str) and ABSOLUTE_PATH.search(prov["command"]):
                    hits.append((p, "command holds an absolute path", prov["command"]))
            for k, v in o.items():
                walk(v, f"{where}/{k}")
        elif isinstance(o, list):
            for i, v in enumerate(o):
                walk(v, f"{where}[{i}]")
        elif isinstance(o, str):
            hits.extend((where, "names a folder of the recording machine", o[max(0, m.start() - 40):m.end() + 40])
                        for m in MACHINE_PATH.finditer(o))
    walk(obj, "")
    return hits


def test_recorded_text_check_recognises_leaks():
    prov = {"machine": "gpu-17", "gpu_model": "NVIDIA H200", "gpu_count": 2, "hostname": "gpu-17",
            "command": "/opt/env/bin/python3 /work/main/source_code/train/fmnist_torch.py"}
    whys = {why.split(" (")[0] for _, why, _ in recorded_text_hits({"provenance": prov, "log": "written to /tmp/w/x.json"})}
    assert whys == {"names the recording host", "machine is not its hardware", "command holds an absolute path",
                    "names a folder of the recording machine"}
    good = {"provenance": {"machine": "2x NVIDIA H200, NV18", "gpu_model": "NVIDIA H200", "gpu_count": 2,
                           "command": "python3 source_code/train/fmnist_torch.py --out $OUT/x.json"},
            "text": "see https://github.com/NVIDIA/nccl-tests/blob/master/README.md",
            "log": "vm:4747:4823 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM",
            "cited": {"provenance": {"cited": True, "command": "/usr/bin/p2pmark"}}}
    assert recorded_text_hits(good) == []


def test_recordings_name_hardware_and_hold_no_host_name_or_absolute_path():
    files = recorded_data_files()
    assert any(f.endswith(os.path.join("allreduce", "h200x2.json")) for f in files), "no recording found"
    found = []
    for path in files:
        rel = os.path.relpath(path, ROOT)
        found += [f"{rel}:{where}: {why}: {text[:160]}" for where, why, text in recorded_text_hits(json.load(open(path)))]
    assert not found, f"recorded data to fix ({len(found)}):\n" + "\n".join(found[:40])


# ----------------------------------------------------------------------------- minutes agree everywhere
_ROW_MINUTES = re.compile(r"^\|[^\n]*?\]\((?:\.\./)?notebooks/(?P<file>[\w.-]+\.ipynb)\)[^\n]*?\|\s*(?P<min>\d+)\s*\|",
                          re.M)


def _minutes_in_tables(text: str) -> dict:
    """notebook file -> minutes, from Markdown table rows that link to the notebook and have a
    cell holding only a whole number (the minutes)."""
    return {m["file"]: int(m["min"]) for m in _ROW_MINUTES.finditer(text)}


def _minutes_in_notebook(path: str) -> int:
    text = "\n".join("".join(c["source"]) for c in json.load(open(path))["cells"] if c["cell_type"] == "markdown")
    found = re.findall(r"\*\*Time\.\*\*\s+About (\d+) minutes", text)
    assert len(found) == 1, f"{path}: expected one '**Time.** About N minutes.' line, found {found}"
    return int(found[0])


def test_minutes_agree_in_notebook_start_here_readme_and_guide():
    start = "\n".join("".join(c["source"]) for c in json.load(open(os.path.join(ROOT, "Start_Here.ipynb")))["cells"]
                      if c["cell_type"] == "markdown")
    tables = {"Start_Here": _minutes_in_tables(start),
              "README": _minutes_in_tables(open(os.path.join(ROOT, "README.md")).read()),
              "instructor guide": _minutes_in_tables(open(os.path.join(ROOT, "instructor", "GUIDE.md")).read())}
    for nb in notebooks()[1:]:
        name = os.path.basename(nb)
        minutes = _minutes_in_notebook(nb)
        assert 15 <= minutes <= 30, f"{name}: {minutes} minutes; each notebook is 15-30 minutes"
        for where, table in tables.items():
            assert table.get(name) == minutes, f"{name}: {minutes} minutes in the notebook, {table.get(name)} in {where}"
    # the three lists name the same notebooks with the same minutes (also the ones not written yet)
    assert tables["Start_Here"] == tables["README"] == tables["instructor guide"]


def test_start_here_states_the_course_total_that_the_table_adds_up_to_and_links_to_notebook_1():
    cells = json.load(open(os.path.join(ROOT, "Start_Here.ipynb")))["cells"]
    start = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    per_notebook = sum(_minutes_in_tables(start).values())
    m = re.search(r"\*\*Time\.\*\*\s+About (\d+) minutes for this page\..*?about (\d+) minutes for the (\w+), so the "
                  r"whole course is about (\d+) minutes", start, re.S)
    assert m, "Start_Here states its own minutes, the notebooks' sum and the course's total in its Time line"
    page, nine, count, total = int(m[1]), int(m[2]), m[3], int(m[4])
    assert nine == per_notebook and total == page + per_notebook
    assert count == {9: "nine", 10: "ten", 11: "eleven"}[len(notebooks()) - 1]
    last = "".join(cells[-1]["source"])
    assert cells[-1]["cell_type"] == "markdown" and "](notebooks/1.Data-Parallel-Training.ipynb)" in last


# Notebooks whose stated minutes do not cover the estimate yet, each with what is to be done; the
# test below fails when one of them comes to fit (take it off) or another stops fitting.
KNOWN_OVER = {}


def test_stated_minutes_cover_reading_and_exercises():
    from ddlab.course import minutes
    over = {}
    for nb in notebooks()[1:]:
        row = minutes.estimate(nb)
        if row["fits"] != "yes":
            over[os.path.basename(nb)] = row["fits"]
    assert set(over) == set(KNOWN_OVER), f"notebooks whose stated minutes do not cover the estimate: {over}"


def test_stated_minutes_cover_every_run_all_timed_on_a_gpu_machine():
    """tools/recording/nbval_timings.json (written by gpu_nbval.sh): each notebook's latest Run All
    that passed under nbval on each GPU machine, the live multi-GPU paths included. Each notebook
    must still fit its stated minutes with that Run All added to its reading and exercises. A time
    kept with the SHA-256 of a notebook file that has changed since timed an earlier version, and is
    not held against this one."""
    from ddlab.course import minutes
    with open(os.path.join(ROOT, "tools", "recording", "nbval_timings.json")) as f:
        timings = json.load(f)
    over, checked = [], 0
    for machine, rows in timings.items():
        for nb, row in rows.items():
            if minutes.timing_is_current(os.path.join(ROOT, nb), row) is False:
                continue
            est = minutes.estimate(os.path.join(ROOT, nb), row["seconds"])
            checked += 1
            if est["fits"] != "yes":
                over.append(f"{nb}: {est['fits']} with Run All {row['seconds']} s on {machine}")
    assert checked and not over, over


def test_minutes_parser_reads_each_table_shape():
    rows = ("| [2. Latency](notebooks/2.A.ipynb) | the model | 25 | cpu | gpu | gpus |\n"
            "| [3. Topology](../notebooks/3.B.ipynb) | 30 | stress |\n"
            "| 6. Hands-on | refactor | coming | | | |\n")
    assert _minutes_in_tables(rows) == {"2.A.ipynb": 25, "3.B.ipynb": 30}


def test_every_notebook_links_to_its_neighbours_and_ends_with_a_quiz():
    files = [os.path.basename(p) for p in notebooks()[1:]]
    for i, nb in enumerate(notebooks()[1:]):
        cells = json.load(open(nb))["cells"]
        text = "\n".join("".join(c["source"]) for c in cells)
        assert "**Objectives.**" in text and "## " in text and "Summary" in text, nb
        assert re.search(r"checks\.quiz\((\d+|checks\.\w+)\)", text), f"{nb}: no self-check quiz"
        assert "sequence.live_here(" in text or "inv.mode" in text, f"{nb}: does not say what runs live here"
        last = "".join(cells[-1]["source"])
        assert "**Next:**" in last and "Start_Here.ipynb" in last, nb
        if i + 1 < len(files):
            assert f"]({files[i + 1]})" in last, f"{nb}: next should link to {files[i + 1]}"
        if i > 0:
            assert f"]({files[i - 1]})" in last, f"{nb}: previous should link to {files[i - 1]}"


def test_the_bootcamp_is_credited_and_the_licences_are_stated():
    notice = open(os.path.join(ROOT, "NOTICE")).read()
    assert "openhackathons-org/gpubootcamp" in notice and "CC BY 4.0" in notice and "MIT" in notice
    readme = open(os.path.join(ROOT, "README.md")).read()
    assert "[NOTICE](NOTICE)" in readme and "CC BY 4.0" in readme and "MIT" in readme
    for nb in ["Start_Here.ipynb", "notebooks/1.Data-Parallel-Training.ipynb", "notebooks/3.System-Topology.ipynb",
               "notebooks/4.NCCL-Transports-and-P2P-Level.ipynb", "notebooks/5.NCCL-Paths-with-Horovod-and-DDP.ipynb",
               "notebooks/7.Hands-On-DDP.ipynb", "notebooks/8.Hands-On-Horovod.ipynb",
               "notebooks/9.Convergence-at-Scale.ipynb"]:
        text = "\n".join("".join(c["source"]) for c in json.load(open(os.path.join(ROOT, nb)))["cells"])
        assert "github.com/openhackathons-org/gpubootcamp" in text and "CC BY 4.0" in text, nb


# ----------------------------------------------------------------------------- installs that agree
def _read(*parts):
    with open(os.path.join(ROOT, *parts), encoding="utf-8") as f:
        return f.read()


INSTALLS = ("Makefile", "Dockerfile", "environment.yml")


def test_every_install_installs_the_course_kernel():
    """make, the Dockerfile and environment.yml install the same kernel, "Python (ddlab)" from
    ddlab.course.kernel, never ipykernel's plain one (with it the notebooks open as modified)."""
    assert re.search(r"^\t\$\(VPY\) -m ddlab\.course\.kernel\b", _read("Makefile"), re.M)
    assert re.search(r"^\s*&& python -m ddlab\.course\.kernel \\$", _read("Dockerfile"), re.M)
    assert re.search(r"^#\s+python -m ddlab\.course\.kernel\b", _read("environment.yml"), re.M)
    for path in INSTALLS + ("README.md",) + tuple(os.path.relpath(p, ROOT) for p in glob.glob(
            os.path.join(ROOT, "tools", "**", "*.sh"), recursive=True)):
        assert "ipykernel install" not in _read(path), f"{path} installs ipykernel's plain kernel"


def test_one_python_range_everywhere():
    import sys
    sys.path.insert(0, os.path.join(ROOT, "tools"))
    try:
        import check_python
    finally:
        sys.path.pop(0)
    spec, low, high = check_python.supported_range()
    assert re.search(rf'^requires-python = "{re.escape(spec)}"$', _read("pyproject.toml"), re.M)
    assert re.search(rf"^  - python{re.escape(spec)}$", _read("environment.yml"), re.M), \
        f"environment.yml must ask for python{spec}, pyproject.toml's range"
    # make's bootstrap check, the image build and the GPU machines' set-up ask the one script
    assert re.search(r"^\$\(VPY\):\n\t@\$\(BOOTSTRAP_PYTHON\) tools/check_python\.py$", _read("Makefile"), re.M)
    docker = _read("Dockerfile")
    assert "COPY tools/check_python.py tools/" in docker and "RUN python tools/check_python.py" in docker
    assert "python3 tools/check_python.py" in _read("tools", "recording", "gpu_setup.sh")
    default = re.search(r"^PYV=\$\{1:-(\d+)\.(\d+)\}$", _read("tools", "recording", "prepare_offline.sh"), re.M)
    assert default and low <= (int(default.group(1)), int(default.group(2))) < high
    newest = f"{high[0]}.{high[1] - 1}"
    assert f"Python {low[0]}.{low[1]}-{newest}," in _read("README.md")
    assert f"Python {newest} (the newest the course supports)" in docker
    for path in glob.glob(os.path.join(ROOT, "tools", "recording", "*.sh")) + [os.path.join(ROOT, "Makefile")]:
        text = open(path).read()
        assert not re.search(r"\(3, 1\d\)|python3\.1\d\b|version_info", text), f"{path} names its own Python range"
    assert check_python.main([]) == 0          # this test's Python is one the course supports


def test_the_lock_file_says_what_it_locks():
    lock = _read("requirements-lock.txt")
    header = "".join(line for line in lock.splitlines(keepends=True) if line.startswith("#"))
    assert "A CPU-only resolution" in header and "nvidia-*" in header
    pins = [line.split("==")[0].lower() for line in lock.splitlines() if line and not line.startswith("#")]
    assert not [p for p in pins if p.startswith("nvidia-") and p != "nvidia-ml-py" or p == "triton"], \
        "the lock pins CUDA packages: say so in its header (it is described as a CPU-only resolution)"
    setup = next(par for par in _read("README.md").split("\n\n") if par.startswith("That is the whole set-up"))
    assert "`requirements-lock.txt`, a CPU-only resolution" in setup.replace("\n", " ")


HOROVOD_VERSION = _read("source_code", "patches", "HOROVOD_VERSION").strip()


def test_horovod_version_is_named_once():
    v = HOROVOD_VERSION
    assert re.fullmatch(r"\d+\.\d+\.\d+", v)
    patches = [os.path.basename(p) for p in glob.glob(os.path.join(ROOT, "source_code", "patches", "*.patch"))]
    assert patches == [f"horovod-{v}-ddlab.patch"]
    # what builds or installs Horovod reads the version from the file, never writes it out
    readers = ["Makefile", "tools/build_horovod.sh", "tools/wheelhouse.sh", "tools/recording/gpu_setup.sh",
               "tools/recording/prepare_offline.sh", "tools/recording/record_horovod_smoke.py"]
    for path in readers + ["Dockerfile", "tools/recording/gpu_probe.sh", "tools/recording/gpu_record_benchmarks.sh"]:
        text = _read(path)
        assert v not in text, f"{path} names Horovod {v}; read source_code/patches/HOROVOD_VERSION"
    for path in readers:
        assert "HOROVOD_VERSION" in _read(path), f"{path} does not read source_code/patches/HOROVOD_VERSION"
    assert "COPY source_code/patches source_code/patches" in _read("Dockerfile")   # build_horovod.sh reads it there
    # every document that mentions a Horovod version mentions this one
    docs = ["README.md", "source_code/patches/README.md", "tools/recording/README.md"] + \
        [os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "instructor", "*.md")) + notebooks()]
    mention = re.compile(r"horovod(?:[- ]|==| v|'s last release \()(\d+\.\d+\.\d+)", re.I)
    seen = 0
    for path in docs:
        for found in mention.findall(_read(path)):
            seen += 1
            assert found == v, f"{path} mentions Horovod {found}, but source_code/patches/HOROVOD_VERSION says {v}"
    assert seen >= 5


def test_the_scripts_import_what_the_package_has():
    """The shell scripts' inline Python (`python -c 'from ddlab.x import y'`) names modules and
    names that exist: a moved module otherwise breaks only the offline install or the recording."""
    import importlib
    paths = glob.glob(os.path.join(ROOT, "tools", "**", "*.sh"), recursive=True) + \
        [os.path.join(ROOT, p) for p in INSTALLS]
    seen = 0
    for path in paths:
        for module, names in re.findall(r"from (ddlab[\w.]*) import ([\w, ]+)", open(path).read()):
            mod = importlib.import_module(module)
            for name in (n.split(" as ")[0].strip() for n in names.split(",")):
                seen += 1
                assert hasattr(mod, name) or importlib.util.find_spec(f"{module}.{name}"), \
                    f"{os.path.relpath(path, ROOT)}: from {module} import {name}: no such name"
    assert seen >= 3


def test_the_documents_stay_within_their_word_limits():
    """README, instructor guide and the recording README are references: each within its limit of
    ddlab.course.minutes.WORD_LIMITS (words as ddlab.course.minutes.doc_words counts them)."""
    from ddlab.course import minutes
    over = []
    assert minutes.DOCUMENTS == ("README.md", "instructor/GUIDE.md", "tools/recording/README.md")
    for rel in minutes.DOCUMENTS:
        words, limit = minutes.doc_words(_read(*rel.split("/"))), minutes.word_limit(rel)
        if words > limit:
            over.append(f"{rel}: {words:,} words, over its limit of {limit:,}")
    assert not over, over
