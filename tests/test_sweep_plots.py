"""ddlab.views.sweep_plots: sweeps drawn over message size."""
import matplotlib
import pytest

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402

from ddlab.measure import collectives  # noqa: E402
from ddlab.views import sweep_plots  # noqa: E402


def test_plot_sweep():
    ar = collectives.load_recorded("h200x2")["default"]
    ax = sweep_plots.plot_sweep({"CPU": ar, "again": ar}, metric="busbw")
    assert [ln.get_label() for ln in ax.get_lines()] == ["CPU", "again"]
    assert list(ax.get_lines()[0].get_xdata()) == [r["bytes"] for r in ar.rows]
    assert ax.get_xscale() == "log"
    plt.close(ax.figure)
    ax = sweep_plots.plot_sweep(ar, metric="time")
    assert ax.get_yscale() == "log"
    assert list(ax.get_lines()[0].get_ydata()) == [r["time_us"] for r in ar.rows]
    plt.close(ax.figure)
    with pytest.raises(ValueError, match="metric"):
        sweep_plots.plot_sweep(ar, metric="latency")


def test_a_dict_of_recorded_sweeps_is_labelled_with_the_path_as_it_ran():
    ax = sweep_plots.plot_sweep(collectives.load_recorded("h200x2"))
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels[0].startswith("NCCL default, NVLS off") and labels[1].startswith("shm")
