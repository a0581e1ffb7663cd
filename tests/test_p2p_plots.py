"""ddlab.views.p2p_plots: a p2p run's heatmaps, with the share of the link's peak (a number, or per
pair from ddlab.measure.p2p_diagnosis.link_peaks)."""
import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")

from _p2p_fixtures import fixture  # noqa: E402
from ddlab.measure import p2p_diagnosis, p2p_parse  # noqa: E402
from ddlab.views import p2p_plots  # noqa: E402


def test_heatmaps_one_axes_per_matrix():
    import matplotlib.pyplot as plt
    r = p2p_parse.parse(fixture("nvidia_sample_2gpu.txt"))
    fig = p2p_plots.plot_heatmaps(r, link_peak_gbps=450.0)
    assert len(fig.axes) == 8
    texts = [t.get_text() for t in fig.axes[1].texts]  # uni_p2p_on
    assert "360\n80% pk" in texts and "300\n67% pk" in texts
    assert "link peak 450 GB/s" in fig.axes[1].get_title()
    plt.close(fig)
    old = p2p_parse.parse(fixture("nvidia_sample_old_4gpu.txt"))
    fig = p2p_plots.plot_heatmaps(old)
    assert len(fig.axes) == 6 and not any("% pk" in t.get_text() for ax in fig.axes for t in ax.texts)
    plt.close(fig)


def test_heatmaps_peak_matrix_and_variant_keys():
    import matplotlib.pyplot as plt
    r = p2p_parse.parse(fixture("ours_format_demo_3gpu.txt"))
    peak = np.full((3, 3), 100.0)
    fig = p2p_plots.plot_heatmaps(r, link_peak_gbps=peak, keys=["uni_p2p_on:sm:read", "bi_p2p_on"])
    assert len(fig.axes) == 2
    assert "SYNTHETIC" in fig._suptitle.get_text()
    assert any("% pk" in t.get_text() for t in fig.axes[0].texts)
    plt.close(fig)
    with pytest.raises(KeyError, match="no matrix"):
        p2p_plots.plot_heatmaps(r, keys=["uni_p2p_sideways"])
    with pytest.raises(ValueError, match="expected a number or \\(3, 3\\)"):
        p2p_plots.plot_heatmaps(r, link_peak_gbps=np.ones((2, 2)))


def test_link_peaks_from_topology_labels():
    from ddlab.system import links
    peaks = p2p_diagnosis.link_peaks([["X", "NV18"], ["NV18", "X"]], nvlink_generation=4)
    assert np.isnan(peaks[0, 0]) and peaks[0, 1] == links.for_label("NV18", nvlink_generation=4).bandwidth_gbs
    with pytest.raises(ValueError, match="square"):
        p2p_diagnosis.link_peaks([["X", "NV18"]])
    r = p2p_parse.parse(fixture("nvidia_sample_2gpu.txt"))
    fig = p2p_plots.plot_heatmaps(r, link_peak_gbps=peaks, keys=["uni_p2p_on"])
    assert any("% pk" in t.get_text() for t in fig.axes[0].texts)
    import matplotlib.pyplot as plt
    plt.close(fig)
