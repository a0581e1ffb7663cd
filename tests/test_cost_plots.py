"""The cost model's plots (ddlab.views.cost_plots): a sweep with its alpha-beta fit, and the
step model's predicted against measured speedups."""
import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")

from ddlab.views import cost_plots as cp  # noqa: E402
from test_alpha_beta import SIZES, synthetic_sweep  # noqa: E402


def test_plot_alpha_beta_draws_points_fit_and_regions():
    import matplotlib.pyplot as plt
    t = 20e-6 + SIZES / 300e9
    ax = cp.plot_alpha_beta(SIZES, t)
    labels = [ln.get_label() for ln in ax.get_lines()]
    assert labels[0] == "measured"
    assert labels[1].startswith("fit: alpha = 20 us, beta = 300 GB/s")
    assert labels[2].startswith("crossover")
    # The crossover line sits at alpha*beta = 6 MB.
    assert ax.get_lines()[2].get_xdata()[0] == pytest.approx(20e-6 * 300e9)
    texts = " ".join(tx.get_text() for tx in ax.texts)
    assert "latency-bound" in texts and "bandwidth-bound" in texts
    assert len(ax.patches) == 2               # the two shaded regions
    # Measured points are drawn in microseconds.
    np.testing.assert_allclose(ax.get_lines()[0].get_ydata(), t * 1e6)
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    plt.close(ax.figure)


def test_plot_sweep_fit_uses_given_axes():
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots()
    out = cp.plot_sweep_fit(synthetic_sweep(), ax=ax)
    assert out is ax
    assert "all_reduce" in ax.get_lines()[0].get_label()
    plt.close(fig)


def test_plot_validation_draws_every_point_and_the_band():
    from ddlab.base.tables import Table
    rows = [{"launcher": "ddp", "model": "cnn", "path": "default", "predicted": 1.9, "measured": 2.0},
            {"launcher": "horovod", "model": "wide", "path": "socket", "predicted": 0.06, "measured": 0.055}]
    t = Table([("launcher", "text"), ("model", "text"), ("path", "text"), ("predicted", "ratio"),
               ("measured", "ratio")], rows)
    ax = cp.plot_validation(t)
    xs = sorted(x for line in ax.get_lines() if len(line.get_xdata()) == 1 for x in line.get_xdata())
    assert xs == [0.055, 2.0]
    assert len(ax.collections) == 1                      # the ±10% band
    with pytest.raises(ValueError, match="nothing to plot"):
        cp.plot_validation(Table([("predicted", "ratio")], []))
    # before and after: each run's earlier prediction (from its error) is a grey dot joined to its marker
    rows[0]["without_err"], rows[1]["without_err"] = 10.0, None
    ax = cp.plot_validation(rows, before="without_err")
    dots = [line for line in ax.get_lines() if line.get_marker() == "."]
    assert [(d.get_xdata()[0], d.get_ydata()[0]) for d in dots] == [(2.0, pytest.approx(2.2))]
    joins = [line for line in ax.get_lines() if len(line.get_xdata()) == 2 and line.get_color() == "gray"]
    assert [list(j.get_ydata()) for j in joins] == [[pytest.approx(2.2), 1.9]]
    assert "before: without" in [t.get_text() for t in ax.get_legend().get_texts()]
