"""ddlab.base.files: results written whole or not at all, read back with one clear message."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from ddlab.base import files

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.join(os.path.dirname(HERE), "source_code")


def test_write_json_round_trips_and_leaves_no_temporary_file(tmp_path):
    p = tmp_path / "sub" / "r.json"
    assert files.write_json(str(p), {"a": [1, 2.5]}) == str(p)
    assert files.read_json(str(p)) == {"a": [1, 2.5]}
    assert os.listdir(p.parent) == ["r.json"]
    assert p.read_text().endswith("\n")


def test_a_new_file_follows_the_umask_and_an_existing_one_keeps_its_mode(tmp_path):
    import stat
    old = os.umask(0o022)
    try:
        p = files.write_text(str(tmp_path / "new.txt"), "x")
        assert stat.S_IMODE(os.stat(p).st_mode) == 0o644          # not mkstemp's owner-only 0600
        os.chmod(p, 0o640)
        files.write_text(p, "y")
        assert stat.S_IMODE(os.stat(p).st_mode) == 0o640
    finally:
        os.umask(old)


def test_nan_is_refused_and_the_old_file_stays(tmp_path):
    p = tmp_path / "r.json"
    files.write_json(str(p), {"v": 1})
    with pytest.raises(ValueError):
        files.write_json(str(p), {"v": float("nan")})
    assert json.loads(p.read_text()) == {"v": 1} and os.listdir(tmp_path) == ["r.json"]


def test_a_corrupt_file_gets_one_message_naming_it_and_the_way_back(tmp_path):
    p = tmp_path / "r.json"
    p.write_text('{"rows": [1, 2')
    with pytest.raises(files.ResultFileError, match=r"(?s)r\.json is truncated or corrupt.*record it again.*git"):
        files.read_json(str(p), "recorded result")
    with pytest.raises(files.ResultFileError, match="no recorded result at"):
        files.read_json(str(tmp_path / "absent.json"), "recorded result")


def test_nan_is_refused_with_one_message_naming_the_field(tmp_path):
    p = tmp_path / "r.json"
    with pytest.raises(files.ResultFileError, match=r"not writing the result .*r\.json: rows\[1\]\.loss is NaN or "
                                                    r"infinite.*left as it was"):
        files.write_json(str(p), {"rows": [{"loss": 1.0}, {"loss": float("inf")}]})
    assert not p.exists() and os.listdir(tmp_path) == []
    assert files.non_finite_field({"a": [1, {"b": float("nan")}]}) == "a[1].b"
    assert files.non_finite_field({"a": [1.5, None, "x"]}) is None
    assert files.nan_to_null({"a": (1.0, float("nan")), "b": {"c": float("-inf")}}) == {"a": [1.0, None], "b": {"c": None}}
    files.write_json(str(p), {"loss": float("nan")}, allow_nan=True)       # a worker's result to its parent only
    assert "NaN" in p.read_text()


def test_open_atomic_streams_into_a_temporary_file_and_keeps_the_old_one_on_error(tmp_path):
    p = tmp_path / "data.gz"
    p.write_bytes(b"old")
    with pytest.raises(OSError):
        with files.open_atomic(str(p), "wb") as f:
            f.write(b"half of the ")
            raise OSError("connection reset")
    assert p.read_bytes() == b"old" and os.listdir(tmp_path) == ["data.gz"]
    with files.open_atomic(str(p), "wb") as f:
        f.write(b"new")
    assert p.read_bytes() == b"new" and os.listdir(tmp_path) == ["data.gz"]
    with pytest.raises(ValueError, match="mode 'w' or 'wb'"):
        with files.open_atomic(str(p), "a"):
            pass
    assert files.write_bytes(str(tmp_path / "b.bin"), b"\x00\x01") and (tmp_path / "b.bin").read_bytes() == b"\x00\x01"


def test_write_figure_saves_a_whole_png(tmp_path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots()
    ax.plot([1, 2])
    p = tmp_path / "f.png"
    assert files.write_figure(str(p), fig, dpi=50) == str(p)
    plt.close(fig)
    assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and os.listdir(tmp_path) == ["f.png"]


def test_read_and_write_json_check_a_schema(tmp_path):
    p = tmp_path / "s.json"
    good = {"format": 1, "step": "x", "status": "skipped", "why": "no GPU"}
    files.write_json(str(p), good, schema="report-step")
    assert files.read_json(str(p), "report step", schema="report-step") == good
    with pytest.raises(files.ResultFileError, match=r"not writing the result .*s\.json: it does not match the "
                                                    r"report-step recording format at status"):
        files.write_json(str(p), dict(good, status="maybe"), schema="report-step")
    assert json.loads(p.read_text()) == good
    p.write_text(json.dumps(dict(good, why=3)))
    with pytest.raises(files.ResultFileError, match=r"the report step .*s\.json does not match the report-step "
                                                    r"recording format at why \(3 is not of type 'string'\); "
                                                    r"record it again, or restore it from git"):
        files.read_json(str(p), "report step", schema="report-step")


WRITER = """
import sys
sys.path.insert(0, {source!r})
from ddlab.base import files
print("writing", flush=True)
files.write_json({path!r}, {{"rows": list(range(3_000_000))}})
"""


STALLED_WRITER = """
import sys, time
sys.path.insert(0, {source!r})
from ddlab.base import files
with files.open_atomic({path!r}) as f:
    f.write('{{"rows": [' + ', '.join(map(str, range(100_000))))
    f.flush()
    print("half written", flush=True)
    time.sleep(60)                     # a slow disk: killed here, in the middle of the file
    f.write(']}}')
"""


def test_a_writer_killed_in_the_middle_of_its_file_leaves_the_old_one_whole(tmp_path):
    p = tmp_path / "r.json"
    files.write_json(str(p), {"rows": [1, 2, 3]})
    proc = subprocess.Popen([sys.executable, "-c", STALLED_WRITER.format(source=SOURCE, path=str(p))],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "half written"
        partial = [f for f in os.listdir(tmp_path) if f.endswith(".tmp")]
        assert len(partial) == 1 and os.path.getsize(tmp_path / partial[0]) > 100_000   # caught mid-write
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    assert files.read_json(str(p))["rows"] == [1, 2, 3]


def test_a_writer_killed_mid_write_leaves_the_old_file_whole(tmp_path):
    p = tmp_path / "r.json"
    files.write_json(str(p), {"rows": [1, 2, 3]})
    proc = subprocess.Popen([sys.executable, "-c", WRITER.format(source=SOURCE, path=str(p))],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "writing"
    time.sleep(0.3)                      # into json.dumps / the write of ~20 MB
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    # the old file or the new one, whole: never a truncated JSON
    rows = files.read_json(str(p))["rows"]
    assert rows in ([1, 2, 3], list(range(3_000_000)))


# ----------------------------------------------------------------------------- no writer in place
REPO = os.path.dirname(HERE)
SCANNED = ["source_code/ddlab", "source_code/train", "source_code/handson", "tools", "tools/recording"]
# (file, kind of write): why it may write in place. Keep it short: each entry is a file that is not a result.
ALLOWED = {
    ("source_code/ddlab/course/repair.py", "open(..., 'a')"):
        "the probe's log: each rank of a live run appends one line per event while it runs, and the check "
        "reads the lines back after the run has ended; it is not kept as a result",
    ("tools/recording/gpu_lab_server.py", "open(..., 'w')"):
        "a step's log: the step's own output, streamed into it while the step runs (a hung step's log is "
        "what tells why); the step's results are the files its commands write",
    ("tools/recording/gpu_lab_server.py", "open(..., 'a')"):
        "the run's log, lab_server.txt: one line per step as it ends, kept across --resume runs",
}


def _writes_in_place(path: str) -> list:
    """[(line, kind)] of every write in ``path`` that does not go through ddlab.base.files: open()
    (or gzip.open, Path.open) for writing or appending, json.dump to a file object,
    Path.write_text / write_bytes, savefig to a path, and a file's own rename (os.replace/os.rename)."""
    import ast
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        fn = node.func
        name = fn.id if isinstance(fn, ast.Name) else fn.attr if isinstance(fn, ast.Attribute) else None
        owner = fn.value.id if isinstance(fn, ast.Attribute) and isinstance(fn.value, ast.Name) else None
        if name == "open" and any(k.arg == "fileobj" for k in node.keywords):
            pass                                          # tarfile/gzip over a file object already opened
        elif name == "open":
            mode = node.args[1] if len(node.args) > 1 and owner != "os" else \
                next((k.value for k in node.keywords if k.arg == "mode"), None)
            if isinstance(mode, ast.Constant) and isinstance(mode.value, str) and set(mode.value) & set("wax+"):
                found.append((node.lineno, f"open(..., {mode.value!r})"))
        elif name == "dump" and owner == "json":
            found.append((node.lineno, "json.dump("))
        elif name in ("write_text", "write_bytes") and owner != "files":
            found.append((node.lineno, f".{name}("))
        elif name == "savefig":
            found.append((node.lineno, ".savefig("))
        elif name in ("replace", "rename") and owner == "os":
            found.append((node.lineno, f"os.{name}("))
    return sorted(found)


def _scanned_files() -> list:
    out = []
    for folder in SCANNED:
        root = os.path.join(REPO, folder)
        if folder == "source_code/ddlab":
            out += [os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs if f.endswith(".py")]
        else:
            out += [os.path.join(root, f) for f in os.listdir(root) if f.endswith(".py")]
    return sorted(p for p in out if not p.endswith(os.path.join("ddlab", "base", "files.py")))


def test_every_result_is_written_through_ddlab_base_files():
    scanned = _scanned_files()
    assert len(scanned) > 100 and any(p.endswith("fmnist_torch.py") for p in scanned)
    bad, used = [], set()
    for path in scanned:
        rel = os.path.relpath(path, REPO)
        for line, kind in _writes_in_place(path):
            if (rel, kind) in ALLOWED:
                used.add((rel, kind))
            else:
                bad.append(f"{rel}:{line}: {kind}")
    assert not bad, ("written in place, not through ddlab.base.files (write_text, write_json, write_bytes, "
                     "write_figure, open_atomic):\n" + "\n".join(bad))
    assert used == set(ALLOWED), f"allowed but no longer there (remove them): {set(ALLOWED) - used}"


def test_the_scan_finds_each_kind_of_write_in_place(tmp_path):
    p = tmp_path / "w.py"
    p.write_text("import json, os, gzip\n"
                 "with open(a, 'w') as f:\n    json.dump(x, f)\n"
                 "gzip.open(b, mode='wb')\n"
                 "path.write_text('x')\n"
                 "fig.savefig('a.png')\n"
                 "os.replace(t, a)\n"
                 "open(a, 'a')\n"
                 "open(a)\nopen(a, 'rb')\nos.open(a, os.O_RDONLY)\nfiles.write_text(a, 'x')\njson.dumps(x)\n"
                 "tarfile.open(fileobj=buf, mode='w:gz')\n")
    assert _writes_in_place(str(p)) == [(2, "open(..., 'w')"), (3, "json.dump("), (4, "open(..., 'wb')"),
                                        (5, ".write_text("), (6, ".savefig("), (7, "os.replace("),
                                        (8, "open(..., 'a')")]


def test_a_folder_or_unreadable_path_gets_one_message_not_an_oserror(tmp_path):
    (tmp_path / "r.json").mkdir()
    with pytest.raises(files.ResultFileError, match=r"cannot read the recording .*r\.json"):
        files.read_json(str(tmp_path / "r.json"), "recording")


def test_a_value_json_cannot_hold_gets_one_message_and_the_old_file_stays(tmp_path):
    p = tmp_path / "r.json"
    files.write_json(str(p), {"rows": [1]})
    with pytest.raises(files.ResultFileError, match=r"not writing the result .*r\.json: Object of type set"):
        files.write_json(str(p), {"rows": {1, 2}})
    assert files.read_json(str(p)) == {"rows": [1]}


def test_an_old_temporary_file_of_a_killed_writer_is_removed_by_the_next_write(tmp_path):
    p = tmp_path / "r.json"
    old, fresh = tmp_path / ".r.json.abc123.tmp", tmp_path / ".r.json.def456.tmp"
    old.write_text('{"rows": [1,')
    fresh.write_text('{"rows": [2,')
    hour_ago = time.time() - files.ORPHAN_AGE_S - 60
    os.utime(old, (hour_ago, hour_ago))
    files.write_json(str(p), {"rows": [3]})
    assert not old.exists() and fresh.exists()      # a fresh one may belong to a writer still at work
    assert files.read_json(str(p)) == {"rows": [3]}


def test_set_aside_renames_a_file_to_a_free_name_beside_it(tmp_path):
    from ddlab.base import files
    for text in ("one", "two", "three"):
        (tmp_path / "r.json").write_text(text)
        files.set_aside(str(tmp_path / "r.json"), "replaced-")
    assert not (tmp_path / "r.json").exists()
    assert [(p.name, p.read_text()) for p in sorted(tmp_path.iterdir())] == [
        ("replaced-r-2.json", "two"), ("replaced-r-3.json", "three"), ("replaced-r.json", "one")]
    with pytest.raises(FileNotFoundError):
        files.set_aside(str(tmp_path / "missing.json"), "replaced-")

