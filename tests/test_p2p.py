"""ddlab.measure.p2p: P2PResult, its dictionary and its text form (read back by p2p_parse), one
matrix as a table."""
import json

import numpy as np
import pytest

from _p2p_fixtures import fixture
from ddlab.measure import p2p, p2p_parse


@pytest.mark.parametrize("name", ["nvidia_sample_2gpu.txt", "nvidia_sample_4gpu_reads.txt",
                                  "nvidia_sample_old_4gpu.txt", "ours_format_demo_3gpu.txt"])
def test_format_tables_and_dict_round_trip(name):
    r = p2p_parse.parse(fixture(name))
    again = p2p_parse.parse(p2p.format_tables(r))
    assert set(again.variants) == set(r.variants)
    for k in r.variants:
        np.testing.assert_allclose(again.variants[k], r.variants[k], atol=0.006)
    assert (again.connectivity == r.connectivity).all()
    assert again.devices == r.devices and again.synthetic == r.synthetic
    d = json.loads(json.dumps(r.to_dict()))  # NaN must have become null
    back = p2p.P2PResult.from_dict(d)
    for k in r.matrices:
        np.testing.assert_array_equal(back.matrices[k], r.matrices[k])
    assert back.chosen == r.chosen and back.devices == r.devices


def test_from_dict_rejects_wrong_shapes():
    with pytest.raises(ValueError, match="expected \\(2, 2\\)"):
        p2p.P2PResult.from_dict({"n": 2, "labels": [0, 1], "variants": {"uni_p2p_on": [[1.0, 2.0]]}})
    with pytest.raises(ValueError, match="not a p2p result"):
        p2p.P2PResult.from_dict({"labels": [0]})


def test_matrix_table_shows_one_matrix():
    r = p2p_parse.parse(fixture("nvidia_sample_2gpu.txt"))
    t = r.matrix_table("uni_p2p_on")
    assert t.title == p2p.TITLES["uni_p2p_on"]
    assert [c.heading for c in t.columns] == ["src \\ dst", "0", "1"]
    m = r.matrices["uni_p2p_on"]
    assert t.rows[0]["gpu1"] == m[0][1] and t.rows[1]["gpu0"] == m[1][0]
    assert t.cells()[0][2] == f"{m[0][1]:.2f}"
    with pytest.raises(KeyError, match="no matrix 'uni_p2p_on:sm'"):
        r.matrix_table("uni_p2p_on:sm")
