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


WRITER = """
import sys
sys.path.insert(0, {source!r})
from ddlab.base import files
print("writing", flush=True)
files.write_json({path!r}, {{"rows": list(range(3_000_000))}})
"""


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
