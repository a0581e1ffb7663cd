"""``ddlab p2p`` (ddlab.measure.p2p_cli) and recorded runs (ddlab.measure.p2p_diagnosis)."""
import json
import os

import numpy as np
import pytest

from _p2p_fixtures import FIX, fixture
from ddlab.base import reference
from ddlab.measure import p2p_cli, p2p_parse, p2p_diagnosis, p2p_run
from ddlab.system import hardware


def test_cli_without_gpu_prints_one_line_no_traceback(capsys, monkeypatch):
    monkeypatch.setattr(p2p_run, "gpu_visible", lambda: False)      # no GPU, on any machine
    assert p2p_cli.cli(["--size", "64M"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ddlab p2p: no NVIDIA GPU") and "Traceback" not in err


def test_cli_parses_a_file(capsys):
    assert p2p_cli.cli(["--file", os.path.join(FIX, "nvidia_sample_2gpu.txt")]) == 0
    out = capsys.readouterr().out
    assert "Unidirectional P2P=Enabled Bandwidth (P2P Writes) Matrix (GB/s)" in out
    assert "Reading: 2 GPUs (Example GPU-SXM 80GB)" in out


def test_cli_json(capsys):
    assert p2p_cli.cli(["--file", os.path.join(FIX, "nvidia_sample_old_4gpu.txt"), "--json"]) == 0
    obj = json.loads(capsys.readouterr().out)
    assert obj["result"]["n"] == 4 and "lat_cpu_p2p_on" not in obj["result"]["matrices"]
    assert obj["summary"].startswith("4 GPUs")


def test_cli_bad_file(capsys, tmp_path):
    assert p2p_cli.cli(["--file", str(tmp_path / "missing.txt")]) == 1
    assert "No such file" in capsys.readouterr().err
    bad = tmp_path / "bad.txt"
    bad.write_text("just some log\n")
    assert p2p_cli.cli(["--file", str(bad)]) == 1
    assert "no p2p tables found" in capsys.readouterr().err


def test_record_and_load_recorded(tmp_path, monkeypatch):
    monkeypatch.setattr(reference, "REFERENCE_DIR", str(tmp_path))
    # Provenance would import torch and TensorFlow to report their versions: not needed here.
    monkeypatch.setattr(hardware, "inventory", lambda **kw: hardware.Inventory())
    with pytest.raises(reference.ReferenceMissing, match="p2p/nowhere"):
        p2p_diagnosis.load_recorded("nowhere")
    r = p2p_parse.parse(fixture("nvidia_sample_2gpu.txt"))
    with pytest.raises(ValueError, match="format-demo"):
        p2p_diagnosis.record(p2p_parse.parse(fixture("ours_format_demo_1gpu.txt")), name="demo")
    path = p2p_diagnosis.record(r, name="example", command="p2p_bandwidth_latency")
    assert path == str(tmp_path / "p2p" / "example.json")
    back = p2p_diagnosis.load_recorded("example")
    assert back.provenance["command"] == "p2p_bandwidth_latency"
    np.testing.assert_array_equal(back.matrices["uni_p2p_on"], r.matrices["uni_p2p_on"])
    assert back.text == r.text
    assert p2p_cli.cli(["--recorded", "example"]) == 0
