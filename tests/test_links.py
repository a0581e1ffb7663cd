"""The link catalogue: figures derived from the specifications, every entry sourced."""
import pytest

from ddlab.system import links


def test_pcie_rates_follow_from_lanes_rate_and_encoding():
    # 16 lanes x GT/s x 128/130 / 8 bits
    assert links.pcie_x16_gbs(3) == pytest.approx(15.754, abs=1e-3)
    assert links.pcie_x16_gbs(4) == pytest.approx(31.508, abs=1e-3)
    assert links.pcie_x16_gbs(5) == pytest.approx(63.015, abs=1e-3)
    assert links.get("pcie4_x16").bandwidth_gbs == pytest.approx(31.508, abs=1e-3)
    assert links.pcie_x16_gbs(4, lanes=8) == pytest.approx(31.508 / 2, abs=1e-3)
    # 8b/10b up to Gen2; Gen6 in FLIT mode, 242 of every 256 bytes
    assert links.pcie_x16_gbs(1) == pytest.approx(4.0) and links.pcie_x16_gbs(2, lanes=4) == pytest.approx(2.0)
    assert links.pcie_x16_gbs(6) == pytest.approx(16 * 64 * 242 / 256 / 8)


def test_nvlink_bonded_counts():
    assert links.get("nvlink2_x1").bandwidth_gbs == 25
    assert links.get("nvlink2_x2").bandwidth_gbs == 50          # DGX-1 V100 NV2 pairs
    assert links.get("nvlink3_x12").bandwidth_gbs == 300        # A100: 600 GB/s both directions
    assert links.get("nvlink4_x18").bandwidth_gbs == 450        # H100/H200 NV18: 900 GB/s both directions
    assert links.nvlink(4, 18).links == 18
    assert "478" in links.nvlink(4, 18).note                      # 18 x 26.5625 signalling rate
    assert links.nvlink(4, 18).raw_gbs == pytest.approx(478.125)
    assert links.nvlink(2, 2).raw_gbs is None                      # no source for the others' raw rate


def test_network_rates_are_bits_over_eight():
    assert links.get("ib_hdr").bandwidth_gbs == 25
    assert links.get("ib_ndr").bandwidth_gbs == 50
    assert links.get("eth_10g").bandwidth_gbs == 1.25
    assert links.get("eth_100g").bandwidth_gbs == 12.5


def test_catalogue_covers_the_brief_and_every_entry_is_sourced():
    want = {"pcie3_x16", "pcie4_x16", "pcie5_x16", "nvlink2_x1", "nvlink2_x2", "nvlink2_x6", "nvlink3_x1",
            "nvlink3_x12", "nvlink4_x1", "nvlink4_x18", "ib_hdr", "ib_ndr", "eth_10g", "eth_100g"}
    assert want <= set(links.names())
    for t in links.LINKS.values():
        assert t.bandwidth_gbs > 0 and t.latency_us > 0
        assert len(t.bandwidth_source) > 20 and len(t.latency_source) > 20, t.key
        assert t.derivation


def test_latency_is_the_same_order_within_a_family_and_networks_differ():
    # generations raise bandwidth, not the fixed cost
    assert {links.get(k).latency_us for k in ("pcie3_x16", "pcie4_x16", "pcie5_x16")} == {4.0}
    assert links.get("eth_10g").latency_us > links.get("ib_hdr").latency_us


def test_get_by_name_and_object_and_bad_names():
    t = links.get("PCIe 4.0 x16")
    assert t.key == "pcie4_x16" and links.get(t) is t
    with pytest.raises(ValueError, match="unknown link 'pcie9'"):
        links.get("pcie9")
    with pytest.raises(ValueError, match="1 to 6 links"):
        links.nvlink(2, 7)
    with pytest.raises(ValueError, match="generation"):
        links.nvlink(9, 1)
    with pytest.raises(ValueError, match="choose 1 to 6"):
        links.pcie_x16_gbs(7)


def test_for_label_maps_topology_labels():
    assert links.for_label("NV2", nvlink_generation=2).bandwidth_gbs == 50
    assert links.for_label("NV18", nvlink_generation=4).bandwidth_gbs == 450
    assert links.for_label("SYS", pcie_generation=3).key == "pcie3_x16"
    with pytest.raises(ValueError, match="generation"):
        links.for_label("NV4")
    with pytest.raises(ValueError, match="unknown topology label"):
        links.for_label("QPI")


def test_tables_and_legend():
    text = str(links.table())
    assert "PCIe 3.0 x16" in text and "15.75" in text and "450" in text
    assert "whitepaper" in str(links.sources(["nvlink4_x18"]))
    md = links.legend_markdown(pcie_generation=3, nvlink_generation=2, nvlinks=2)
    assert md.count("\n|") >= 7                       # header, rule and six kinds
    assert "NV2: 50 GB/s" in md and "15.8 GB/s" in md and "&lt;n>" in md
    rows = links.legend_rows(4, 4, 18)
    assert [r["label"].split()[0] for r in rows] == ["NV1", "PIX", "PXB", "PHB", "NODE", "SYS"]
    with pytest.raises(ValueError):
        links.legend_rows(pcie_generation=2)


def test_link_kinds_legend_is_complete_and_cited():
    assert set(links.LINK_KINDS) == {"NVLINK", "PIX", "PXB", "PHB", "NODE", "SYS"}
    for kind, info in links.LINK_KINDS.items():
        for key in ("legend", "path", "typical_bandwidth", "typical_latency", "nccl_p2p_level", "sources"):
            assert info[key], (kind, key)
    assert "PCI-SIG" in " ".join(links.LINK_KINDS["PIX"]["sources"])
    assert links.LINK_KINDS["NODE"]["nccl_p2p_level"] == "PHB"     # NODE counts as PHB for NCCL
    gens = links.NVLINK_GENERATIONS
    for g in gens:  # per-link rate x links x 2 directions = NVIDIA's stated total
        assert g["GB_s_per_link_per_direction"] * g["links_per_gpu"] * 2 == g["total_GB_s"], g
        assert g["source"]


def test_sources_is_a_table_with_one_row_per_source():
    table = links.sources()
    rows = links.source_rows()
    assert len(table) == len(rows) == len({r["says"] for r in rows})    # each source once
    assert [c.heading for c in table.columns] == ["source", "figures it supports", "reference"]
    by_source = {r["source"]: r for r in rows}
    pcie = by_source["lukealonso/p2pmark README, 'Example Output', 'Latency'"]
    assert pcie["supports"] == "latency of PCIe 3.0 x16, PCIe 4.0 x16, PCIe 5.0 x16"
    assert pcie["reference"] == "github.com/lukealonso/p2pmark" and "4.10 us" in pcie["says"]
    nv = by_source["NVIDIA/cuda-samples issue #230, its description"]
    assert nv["supports"] == "latency of NVLink 2 (V100), NVLink 3 (A100), NVLink 4 (H100/H200)"
    assert by_source["PCI-SIG, PCI Express Base Specification Revision 3.0 (2010)"]["reference"] == "the document named (no web address)"
    html = table._repr_html_()
    assert html.count("<tr>") == len(rows) + 1 and "github.com/NVIDIA/cuda-samples/issues/230" in html
    text = str(table).splitlines()
    assert text[0] == "Sources of the link figures"
    col = text[1].index("figures it supports")                  # the second column starts at one place
    assert all(ln[col - 2:col] == "  " and ln[col] != " " for ln in text[3:3 + len(rows)])


def test_every_latency_says_what_it_measures_and_where_its_source_has_it():
    for t in links.LINKS.values():
        assert t.latency_measures, t.key
    assert "adapter alone" in links.get("ib_hdr").latency_measures
    assert "GPU to GPU" in links.get("nvlink4_x18").latency_measures
    assert "round trip" in links.get("eth_10g").latency_measures
    # the sources name the place in the document, not just the document
    assert "'Introduction'" in links.LAT_IB and "sub-600ns latency" in links.LAT_IB
    assert "P2P=Enabled Latency (P2P Writes) Matrix" in links.LAT_NVLINK and "'Example Output'" in links.LAT_PCIE
    assert "first paragraph" in links.LAT_TCP and "No figure is cited for NDR" in links.LAT_IB_NDR
    # the TCP figure is one way: half the round trip its source reports
    assert links.get("eth_10g").latency_us == links.TCP_ROUND_TRIP_US / 2 == links.get("eth_100g").latency_us
    table = links.table()
    assert table.column("measures")[0] == links.get("pcie3_x16").latency_measures and "like for like" in str(table)
    refs = {r["source"]: r["reference"] for r in links.source_rows()}
    assert refs["NVIDIA ConnectX-6 adapter cards user manual, 'Introduction', second paragraph"] == \
        "docs.nvidia.com/networking/display/ConnectX6EN/Introduction"
