"""Reading p2p test output (ddlab.measure.p2p_parse): NVIDIA's p2pBandwidthLatencyTest, current and
old, and our program's; missing and malformed tables."""
import json

import numpy as np
import pytest

from _p2p_fixtures import fixture
from ddlab.measure import p2p, p2p_diagnosis, p2p_parse


# ============================================================================ NVIDIA's sample
def test_parse_nvidia_sample_current_format():
    r = p2p_parse.parse(fixture("nvidia_sample_2gpu.txt"))
    assert r.source == "nvidia-sample" and not r.synthetic
    assert r.n == 2 and r.labels == [0, 1]
    assert set(r.matrices) == set(p2p.STANDARD_KEYS)
    assert r.matrices["uni_p2p_on"][0, 1] == 300.0 and r.matrices["uni_p2p_on"][1, 0] == 360.0
    assert r.matrices["bi_p2p_on"][1, 0] == 610.0
    assert r.matrices["lat_gpu_p2p_off"][0, 1] == 15.0 and r.matrices["lat_cpu_p2p_off"][1, 0] == 9.0
    assert r.matrices["lat_gpu_p2p_on"][1, 0] == 2.6 and r.matrices["lat_cpu_p2p_on"][0, 1] == 2.8
    assert r.chosen["uni_p2p_on"] == "uni_p2p_on:ce:write"
    assert r.connectivity.dtype == bool and r.connectivity.all()
    assert [d["name"] for d in r.devices] == ["Example GPU-SXM 80GB"] * 2
    assert r.devices[1]["pci_bus_id"] == "00000000:2A:00.0"


def test_parse_nvidia_sample_with_reads():
    r = p2p_parse.parse(fixture("nvidia_sample_4gpu_reads.txt"))
    assert r.n == 4
    assert {"uni_p2p_on:ce:write", "uni_p2p_on:ce:read", "lat_gpu_p2p_on:ce:read",
            "lat_cpu_p2p_on:ce:read"} <= set(r.variants)
    assert r.chosen["uni_p2p_on"] == "uni_p2p_on:ce:write"  # writes stand for the standard key
    assert r.matrices["uni_p2p_on"][1, 2] == 50.0 and r.variants["uni_p2p_on:ce:read"][1, 2] == 48.0
    assert not r.connectivity[0, 3] and not r.connectivity[3, 0] and r.connectivity[1, 3]


def test_parse_nvidia_sample_old_format():
    text = fixture("nvidia_sample_old_4gpu.txt")
    r = p2p_parse.parse(text)
    # Old samples: one latency table per state (taken as GPU-timed), no CPU rows.
    assert set(r.matrices) == {"uni_p2p_off", "uni_p2p_on", "bi_p2p_off", "bi_p2p_on",
                               "lat_gpu_p2p_off", "lat_gpu_p2p_on"}
    assert r.matrices["uni_p2p_on"][0, 1] == 12.0 and r.matrices["lat_gpu_p2p_on"][2, 3] == 8.0
    expected = np.array([[1, 1, 0, 0], [1, 1, 0, 0], [0, 0, 1, 1], [0, 0, 1, 1]], dtype=bool)
    assert (r.connectivity == expected).all()
    # Without the CAN/CANNOT lines the cliques alone give the same connectivity.
    r2 = p2p_parse.parse("\n".join(ln for ln in text.splitlines() if not ln.startswith("Device=")))
    assert (r2.connectivity == expected).all()


def test_parse_tolerates_crlf_and_ansi_codes():
    text = fixture("nvidia_sample_2gpu.txt").replace("\n", "\r\n").replace("Unidirectional", "\x1b[1mUnidirectional")
    r = p2p_parse.parse(text)
    assert r.matrices["uni_p2p_on"][1, 0] == 360.0


# ============================================================================ ours
def test_parse_our_format_demo_output():
    r = p2p_parse.parse(fixture("ours_format_demo_3gpu.txt"))
    assert r.source == "ddlab" and r.synthetic
    assert set(r.matrices) == set(p2p.STANDARD_KEYS)
    assert {"uni_p2p_on:sm:write", "uni_p2p_on:sm:read", "bi_p2p_on:ce:read", "lat_gpu_p2p_on:sm:write"} <= set(r.variants)
    assert np.isnan(r.variants["lat_gpu_p2p_on:sm:write"][1, 1])  # "n/a" in the text
    assert r.parameters["link_peak_gbps"] == 478.08 and r.parameters["size"] == 1073741824
    assert r.versions == {"cuda_driver": "13.0", "cuda_runtime": "13.0"}
    assert r.devices[2]["pci_bus_id"] == "00000000:38:00.0" and r.devices[0]["sm_count"] == 132
    assert not r.connectivity[0, 2]
    # The program's JSON and its text say the same.
    j = p2p.P2PResult.from_dict(json.loads(fixture("ours_format_demo_3gpu.json")))
    assert set(j.variants) == set(r.variants)
    for k in r.variants:
        np.testing.assert_allclose(j.variants[k], r.variants[k], atol=0.006)
    assert (j.connectivity == r.connectivity).all() and j.synthetic


def test_parse_one_gpu_output():
    r = p2p_parse.parse(fixture("ours_format_demo_1gpu.txt"))
    assert r.n == 1 and r.matrices["uni_p2p_on"].shape == (1, 1)
    assert "two GPUs" in p2p_diagnosis.summary(r)


def test_parse_real_capture_from_h200():
    r = p2p_parse.parse(fixture("h200x2_ours.txt"))
    assert r.source == "ddlab" and not r.synthetic and r.n == 2
    assert set(r.matrices) == set(p2p.STANDARD_KEYS)
    assert all("H200" in d["name"] for d in r.devices)
    assert r.validation and r.validation.startswith("PASSED")
    on, off = r.matrices["uni_p2p_on"], r.matrices["uni_p2p_off"]
    assert on[0, 1] > 3 * off[0, 1] and on[1, 0] > 3 * off[1, 0]  # NVLink beats host staging
    assert r.matrices["lat_gpu_p2p_on"][0, 1] < r.matrices["lat_gpu_p2p_off"][0, 1]
    # The program's own --json of the same run agrees with its printed tables.
    j = p2p.P2PResult.from_dict(json.loads(fixture("h200x2_ours.json")))
    assert set(j.variants) == set(r.variants)
    for k in r.variants:
        np.testing.assert_allclose(j.variants[k], r.variants[k], atol=0.006, rtol=1e-5)


# ============================================================================ missing and malformed
def test_missing_blocks_are_absent():
    text = fixture("nvidia_sample_2gpu.txt")
    cut = text.split("Bidirectional P2P=Disabled")[0]
    r = p2p_parse.parse(cut)
    assert set(r.matrices) == {"uni_p2p_off", "uni_p2p_on"}
    r = p2p_parse.parse(text.split("P2P=Enabled Latency")[0])
    assert "lat_gpu_p2p_off" in r.matrices and "lat_gpu_p2p_on" not in r.matrices


@pytest.mark.parametrize("text, message", [
    ("hello world\nnothing here\n", "no p2p tables found"),
    ("Unidirectional P2P=Enabled Bandwidth (P2P Writes) Matrix (GB/s)\nsomething else\n", "column header"),
    ("Unidirectional P2P=Enabled Bandwidth Matrix (GB/s)\n   D\\D     0      1\n     0 1.00 2.00\n", "1 row"),
    ("Unidirectional P2P=Enabled Bandwidth Matrix (GB/s)\n   D\\D     0      1\n     0 1.00 2.00\n     1 3.00 abc\n",
     "'abc' is not a number"),
    ("Unidirectional P2P=Enabled Bandwidth Matrix (GB/s)\n   D\\D     0      1\n     0 1.00\n     1 3.00 4.00\n",
     "followed by 2 values"),
    ("P2P=Enabled Latency (P2P Writes) Matrix (us)\n\nNOTE: nothing\n", "column header"),
])
def test_malformed_text_raises_clear_error(text, message):
    with pytest.raises(p2p_parse.P2PParseError, match=message):
        p2p_parse.parse(text)


def test_two_runs_pasted_together_are_refused():
    text = fixture("nvidia_sample_2gpu.txt")
    with pytest.raises(p2p_parse.P2PParseError, match="appears twice"):
        p2p_parse.parse(text + text)


def test_tables_for_different_gpus_are_refused():
    a = "Unidirectional P2P=Disabled Bandwidth Matrix (GB/s)\n   D\\D     0      1\n     0 1.00 2.00\n     1 3.00 4.00\n"
    b = "Unidirectional P2P=Enabled Bandwidth Matrix (GB/s)\n   D\\D     0      2\n     0 1.00 2.00\n     2 3.00 4.00\n"
    with pytest.raises(p2p_parse.P2PParseError, match="for GPUs"):
        p2p_parse.parse(a + b)


def test_parse_rejects_bytes():
    with pytest.raises(TypeError):
        p2p_parse.parse(b"Unidirectional")
