"""ddlab.views.topology_drawing: one box per GPU and NIC, links styled by kind, NVSwitch as a hub."""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from ddlab.system import topology  # noqa: E402
from ddlab.views.topology_drawing import draw  # noqa: E402

from test_topology import fixture  # noqa: E402


def gids(ax, prefix):
    return sorted(a.get_gid() for a in ax.patches + ax.lines if (a.get_gid() or "").startswith(prefix))


@pytest.mark.parametrize("name,n", [("h100x2_forum_paste_double_spaced.txt", 2), ("v100x4_glued_header.txt", 4),
                                    ("p100x8_dgx1_mlx5_soc.txt", 8), ("gh200x1_gpu_numa_id.txt", 1)])
def test_draw_has_one_box_per_gpu_and_nic(name, n):
    t = fixture(name)
    ax = draw(t)
    try:
        assert gids(ax, "gpu:") == sorted(f"gpu:{g}" for g in t.gpus)
        assert len(gids(ax, "nic:")) == len(t.nics)
        texts = {x.get_text().split("\n")[0] for x in ax.texts}
        assert {f"GPU{g}" for g in t.gpus} <= texts
        assert len(gids(ax, "link:")) == n * (n - 1) // 2
    finally:
        plt.close(ax.figure)


def test_draw_styles_links_by_kind_and_labels_them():
    t = topology.recorded("dgx1-v100")
    fig, ax = plt.subplots()
    try:
        assert draw(t, ax=ax) is ax
        lines = {ln.get_gid(): ln for ln in ax.lines if ln.get_gid()}
        assert lines["link:0-3"].get_linewidth() > lines["link:0-1"].get_linewidth()  # NV2 thicker than NV1
        assert lines["link:0-1"].get_color() != lines["link:0-5"].get_color()  # NVLink vs SYS
        assert lines["link:0-5"].get_linestyle() == ":"
        labels = [x.get_text() for x in ax.texts]
        assert labels.count("NV2") == 8 and labels.count("NV1") == 8
        assert len(gids(ax, "numa:")) == 2  # two CPU groups drawn
        legend = [x.get_text() for x in ax.get_legend().get_texts()]
        assert "NV# (NVLink)" in legend and "SYS/SOC" in legend
    finally:
        plt.close(fig)


def test_draw_all_to_all_nvlink_as_a_hub():
    t = fixture("a100x8_nic_legend_tabs.txt")
    ax = draw(t)
    try:
        assert gids(ax, "nvlink-hub") == ["nvlink-hub"]
        assert len([g for g in gids(ax, "link:") if g.endswith("-hub")]) == 8
        assert any("every pair NV12" in x.get_text() for x in ax.texts)
        assert len(gids(ax, "niclink:")) > 0
    finally:
        plt.close(ax.figure)
