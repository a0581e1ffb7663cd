"""ddlab.views.host_link_plots: a host-link result drawn (GB/s against size, the raw rate line)."""
import matplotlib

matplotlib.use("Agg")

import _one_gpu_fakes  # noqa: E402
from ddlab.views import host_link_plots  # noqa: E402


def test_the_gpus_node_in_full_the_other_node_dotted_and_the_raw_rate():
    r = _one_gpu_fakes.host_result()
    ax = host_link_plots.plot(r, caption="measured now on a test")
    labels = [ln.get_label() for ln in ax.get_lines()]
    assert "host -> GPU, pinned" in labels and "both at once, pageable" in labels
    assert "host -> GPU, pinned, from NUMA node 1" in labels
    raw = next(ln for ln in ax.get_lines() if ln.get_label().startswith("PCIe Gen5 x16 raw"))
    assert raw.get_ydata()[0] == r.peak_gbps
    assert "the GPU's" in ax.get_title() and "measured now on a test" in ax.get_title()
    r.link = None
    assert not any(ln.get_label().startswith("PCIe") for ln in host_link_plots.plot(r).get_lines())
