"""The alpha-beta message-time calculator: the function and the widget around it."""
import builtins
import sys

import pytest

from ddlab import links, widgets


def test_worked_example_64KiB_over_pcie3():
    # the notebook's worked example: 64 KiB over PCIe 3.0 x16 (15.754 GB/s, 4 us)
    r = widgets.message_time(64 * 1024, "pcie3_x16")
    assert r.latency_s == pytest.approx(4e-6)
    assert r.bandwidth_s == pytest.approx(65536 / 15.7538e9, rel=1e-4)     # 4.16 us
    assert r.total_s == pytest.approx(8.16e-6, rel=1e-3)
    assert r.crossover_bytes == pytest.approx(4e-6 * 15.7538e9, rel=1e-4)  # ~63 kB: both terms equal there
    assert r.effective_Bps == pytest.approx(65536 / 8.16e-6, rel=1e-3)
    text = r.explain()
    assert "4.16 us" in text and "8.16 us" in text and "nearly equal" in text


def test_64KiB_in_4us_is_16_GBps_not_1_6():
    # the mistake older material made: 64 KiB / 4 us is about 16 GB/s
    r = widgets.message_time(64 * 1024, "pcie3_x16", latency_us=0.0, bandwidth_gbs=65536 / 4e-6 / 1e9)
    assert r.total_s == pytest.approx(4e-6)
    assert r.effective_Bps / 1e9 == pytest.approx(16.384)


def test_dominant_term_switches_at_the_crossover():
    link = links.get("nvlink4_x18")
    small = widgets.message_time(1024, link)
    big = widgets.message_time(2**30, link)
    assert small.dominant == "latency" and small.latency_share > 0.99
    assert big.dominant == "bandwidth" and big.latency_share < 0.001
    cross = small.crossover_bytes                 # 2 us x 450 GB/s = 900 kB
    assert cross == pytest.approx(900e3)
    assert widgets.message_time(cross * 0.9, link).dominant == "latency"
    assert widgets.message_time(cross * 1.1, link).dominant == "bandwidth"


def test_what_if_overrides_and_bad_input():
    r = widgets.message_time(1e6, "eth_10g", latency_us=1, bandwidth_gbs=100)
    assert r.total_s == pytest.approx(1e-6 + 1e6 / 100e9)
    assert "what-if" in r.link.name
    for bad in (-1, "64KiB", None, float("nan"), True):
        with pytest.raises(ValueError, match="message size"):
            widgets.message_time(bad, "pcie3_x16")
    with pytest.raises(ValueError, match="unknown link"):
        widgets.message_time(10, "pcie7")
    with pytest.raises(ValueError, match="bandwidth must be > 0"):
        widgets.message_time(10, "pcie3_x16", bandwidth_gbs=0)


def test_formatting_units():
    assert widgets.format_bytes(65536) == "64 KiB"
    assert widgets.format_bytes(1.5 * 2**20) == "1.5 MiB"
    assert widgets.format_bytes(3) == "3 B"
    assert widgets.format_time(4.16e-6) == "4.16 us"
    assert widgets.format_time(2.5e-3) == "2.5 ms"
    assert widgets.format_rate(16.384e9) == "16.4 GB/s"


def test_compare_links_lists_every_link():
    text = widgets.compare_links(2**20)
    for t in links.LINKS.values():
        assert t.name in text
    assert "1 MiB" in text


def test_widget_updates_when_the_slider_moves():
    ipywidgets = pytest.importorskip("ipywidgets")
    box = widgets.message_time_calculator(64 * 1024, "pcie3_x16")
    assert isinstance(box, ipywidgets.VBox)
    size, choice, out = box.children
    assert "8.16 us" in out.value
    size.value = 2**30
    assert "1 GiB" in out.value and "dominant term: bandwidth" in out.value
    choice.value = "nvlink4_x18"
    assert "NVLink 4" in out.value


def test_without_ipywidgets_it_prints_and_returns_the_result(monkeypatch, capsys):
    real_import = builtins.__import__

    def no_ipywidgets(name, *args, **kwargs):
        if name == "ipywidgets":
            raise ImportError("no ipywidgets here")
        return real_import(name, *args, **kwargs)

    monkeypatch.delitem(sys.modules, "ipywidgets", raising=False)
    monkeypatch.setattr(builtins, "__import__", no_ipywidgets)
    r = widgets.message_time_calculator(64 * 1024, "pcie3_x16")
    assert isinstance(r, widgets.MessageTime)
    out = capsys.readouterr().out
    assert "ipywidgets is not installed" in out and "8.16 us" in out


def test_agrees_with_the_cost_model():
    from ddlab import cost_model
    for key in links.names():
        t = links.get(key)
        for n in (1, 4096, 2**20, 2**30):
            assert widgets.message_time(n, t).total_s == pytest.approx(
                cost_model.transfer_time(n, t.latency_s, t.bandwidth_Bps))


def test_plot_message_times_marks_each_crossover():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig = widgets.plot_message_times(["pcie3_x16", "nvlink4_x18"])
    ax_t, ax_b = fig.axes
    assert len(ax_t.lines) == 4 and len(ax_b.lines) == 4          # a curve and a crossover dot per link
    dot = ax_b.lines[1]
    assert dot.get_xdata()[0] == pytest.approx(4e-6 * links.pcie_x16_gbs(3) * 1e9)
    assert dot.get_ydata()[0] == pytest.approx(links.pcie_x16_gbs(3) / 2)
    assert "not measured" in " ".join(t.get_text() for t in fig.texts)
    plt.close(fig)
    with pytest.raises(ValueError):
        widgets.plot_message_times([])
