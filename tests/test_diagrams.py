"""The data-path drawings and the image generator."""
import hashlib
import importlib.util
import os

import pytest

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import FancyArrowPatch  # noqa: E402

from ddlab.views import diagrams  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _texts(fig):
    return " ".join(t.get_text() for ax in fig.axes for t in ax.texts) + " " + \
        " ".join(ax.get_title() for ax in fig.axes)


def _arrows(ax):
    return [p for p in ax.patches if isinstance(p, FancyArrowPatch)]


def test_host_staging_shows_two_pcie_crossings_through_host_memory():
    fig = diagrams.host_staging()
    text = _texts(fig)
    for word in ("GPU0", "GPU1", "Host memory", "CPU", "PCIe switch", "Host staging", "Two PCIe crossings"):
        assert word in text
    ax = fig.axes[0]
    assert len(_arrows(ax)) == 6          # 3 hops to host memory, 3 back down to GPU1
    colours = {tuple(a.get_edgecolor()) for a in _arrows(ax)}
    assert len(colours) == 1              # one path, one colour
    # the NVLink between the GPUs is there but idle: no arrow runs along it
    assert "NVLink (idle: no peer access)" in text
    (nx0, ny0), (nx1, ny1) = diagrams.WIRES["nvlink"]
    for a in _arrows(ax):
        (x0, y0), (x1, y1) = a._posA_posB
        assert not (abs(y0 - ny0) < 0.5 and abs(y1 - ny1) < 0.5), "an arrow runs along the NVLink"
    plt.close(fig)


def test_peer_to_peer_shows_nvlink_and_pcie_paths_and_no_host_memory():
    fig = diagrams.peer_to_peer()
    text = _texts(fig)
    assert "NVLink" in text and "not on the path" in text and "never touched" in text
    ax = fig.axes[0]
    arrows = _arrows(ax)
    assert len(arrows) == 3               # 1 NVLink hop; 2 PCIe hops through the switch
    assert len({tuple(a.get_edgecolor()) for a in arrows}) == 2
    # no arrow reaches the host-memory box
    x, y, w, h, _ = diagrams.BOXES["mem"]
    for a in arrows:
        (x0, y0), (x1, y1) = a._posA_posB
        assert not (x <= x1 <= x + w and y <= y1 <= y + h)
    plt.close(fig)


def test_data_paths_has_both_panels_and_draws_into_given_axes():
    fig = diagrams.data_paths()
    assert len(fig.axes) == 2
    assert "How data gets from GPU0 to GPU1" in fig._suptitle.get_text()
    plt.close(fig)
    fig, ax = plt.subplots()
    assert diagrams.host_staging(ax) is fig
    plt.close(fig)


def _digests(folder):
    return {f: hashlib.sha256(open(os.path.join(folder, f), "rb").read()).hexdigest()
            for f in sorted(os.listdir(folder))}


def _make_images():
    spec = importlib.util.spec_from_file_location("make_images", os.path.join(REPO, "tools", "make_images.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_make_images_writes_deterministic_pngs(tmp_path, capsys):
    mi = _make_images()
    for out in ("a", "b"):
        assert mi.main(["--only", "data_paths,host_staging,peer_to_peer", "--out", str(tmp_path / out)]) == 0
    a, b = _digests(tmp_path / "a"), _digests(tmp_path / "b")
    assert set(a) == {"data_paths.png", "host_staging.png", "peer_to_peer.png"}
    assert a == b
    for f in a:
        head = open(tmp_path / "a" / f, "rb").read(8)
        assert head == b"\x89PNG\r\n\x1a\n"


def test_make_images_rejects_unknown_names(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        _make_images().main(["--only", "nope", "--out", str(tmp_path)])
    assert exc.value.code == 2 and "unknown image(s) nope" in capsys.readouterr().err


def test_ring_allreduce_drawing_follows_the_simulator():
    n = 4
    fig = diagrams.ring_allreduce(n)
    assert len(fig.axes) == 2 * n                      # n-1 steps and the state after, per phase
    titles = [ax.get_title() for ax in fig.axes]
    assert sum("reduce-scatter step" in t for t in titles) == n - 1
    assert sum("all-gather step" in t for t in titles) == n - 1
    # the last panel: every cell of every rank holds the whole sum
    last = fig.axes[-1]
    assert [t.get_text() for t in last.texts].count("sum") == n * n
    # after the reduce-scatter each rank owns exactly one complete chunk
    after_rs = fig.axes[n - 1]
    assert [t.get_text() for t in after_rs.texts].count("sum") == n
    # each step panel: one arrow per rank, plus one more for the hop back round the ring
    for ax in fig.axes:
        if "step" in ax.get_title():
            assert len(_arrows(ax)) == n + 1
    footer = " ".join(t.get_text() for t in fig.texts)
    assert "2(4-1) \u00d7 S/4 = 3/2 S = 1.5 S" in footer
    plt.close(fig)


def test_ring_allreduce_drawing_rejects_bad_sizes():
    for bad in (1, 9, 2.0, True):
        with pytest.raises(ValueError, match="2 to 8 ranks"):
            diagrams.ring_allreduce(bad)


def test_make_images_knows_the_ring_diagram(tmp_path):
    mi = _make_images()
    assert "ring_allreduce" in mi.diagram_images()
    assert mi.main(["--only", "ring_allreduce", "--out", str(tmp_path)]) == 0
    assert open(tmp_path / "ring_allreduce.png", "rb").read(8) == b"\x89PNG\r\n\x1a\n"
