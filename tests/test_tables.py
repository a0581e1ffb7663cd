"""ddlab.base.tables: one Table, aligned text in a terminal and HTML in Jupyter."""
import math

import pytest

from ddlab.base import tables
from ddlab.base.tables import Column, Table


def sample():
    return Table([("path", "text"), ("bytes", "bytes", "size"), ("busbw_gbps", "rate:GB/s", "busbw"),
                  ("speedup", "ratio")],
                 [{"path": "default", "bytes": 1 << 30, "busbw_gbps": 362.14, "speedup": 1.931},
                  {"path": "socket", "bytes": 65536, "busbw_gbps": 0.9999, "speedup": None}],
                 title="All-reduce on 2 GPUs", notes="GB/s = 10^9 B/s")


def test_text_is_aligned_with_a_rule_and_units():
    lines = str(sample()).splitlines()
    assert lines[0] == "All-reduce on 2 GPUs"
    assert lines[-1] == "GB/s = 10^9 B/s"
    body = lines[1:-1]
    assert len(body) == 4                                   # header, rule, two rows
    assert set(body[1].replace(" ", "")) == {"-"}
    assert max(len(x) for x in body) == len(body[1])        # the rule spans the widest line
    assert all(x == x.rstrip() for x in lines)
    assert body[0].split() == ["path", "size", "busbw", "speedup"]
    assert body[2].split() == ["default", "1", "GiB", "362", "GB/s", "1.93x"]
    # 0.9999 GB/s is 1 GB/s after rounding, not "1e+03 MB/s"
    assert body[3].split() == ["socket", "64", "KiB", "1", "GB/s", "n/a"]
    # text left-aligned, numbers right-aligned: the numeric columns end in the same place
    assert body[2].startswith("default ") and body[3].startswith("socket  ")
    assert body[2].endswith("1.93x") and body[3].endswith("  n/a")
    assert body[2].index("GiB") == body[3].index("KiB")


def test_columns_from_strings_lists_and_rows_as_lists():
    t = Table(["gpu", "name"], [[0, "H200"], [10, "H100 80GB HBM3"]])
    lines = t.text().splitlines()
    assert lines[0] == "gpu  name"
    assert lines[1] == "---  --------------"
    assert lines[2] == "  0  H200"                     # auto: integers right, text left
    assert lines[3] == " 10  H100 80GB HBM3"
    assert t.column("gpu") == [0, 10]
    with pytest.raises(KeyError, match="no column 'x'"):
        t.column("x")


def test_missing_values_and_missing_keys():
    t = Table([("a", "time"), ("b", "number")], [{"a": float("nan")}, {"b": 2.5}], missing="-")
    rows = t.cells()
    assert rows == [["-", "-"], ["-", "2.5"]]
    assert t.to_dict()["rows"] == [{"a": t.rows[0]["a"], "b": None}, {"a": None, "b": 2.5}]
    assert math.isnan(t.to_dict()["rows"][0]["a"])
    assert Table(["a"], [{"a": None}]).cells() == [["n/a"]]
    import numpy as np
    assert Table(["a"], [[np.float32("nan")]], missing="-").cells() == [["-"]]


def test_empty_table_still_has_a_header():
    t = Table([("x", "bytes", "message")], [])
    assert t.text().splitlines() == ["message", "-------"]
    assert "<tbody></tbody>" in t._repr_html_()


def test_html_is_a_table_escaped_and_unwrapped():
    t = Table([("name", "text"), ("n", "count")], [{"name": "<b>&x</b>", "n": 12345}],
              title="A & B", notes=["first <note>", "second"])
    h = t._repr_html_()
    assert "<table" in h and "</table>" in h and h.count("<tr>") == 2
    assert "&lt;b&gt;&amp;x&lt;/b&gt;" in h and "<b>&x" not in h
    assert "<caption" in h and "A &amp; B" in h
    assert "first &lt;note&gt;" in h and "second" in h
    assert h.count("white-space: nowrap") == 2                 # every td stays on one line
    assert h.count("<th style=\"white-space: normal; vertical-align: bottom") == 2   # a heading may break
    assert "text-align: right; font-variant-numeric: tabular-nums\">12,345</td>" in h
    assert "text-align: left\">&lt;b&gt;" in h


def test_align_override_and_custom_formatter():
    t = Table([Column("x", kind=lambda v: f"<{v}>"), ("y", "number")], [[1, 2.0]], align={"y": "left"})
    assert t.cells() == [["<1>", "2"]]
    assert t.text().splitlines()[0] == "x    y"
    assert t.text().splitlines()[2] == "<1>  2"
    h = t._repr_html_()
    assert "text-align: left\">2</td>" in h
    assert t.to_dict()["columns"][0]["kind"] == "custom"


def test_stored_units_are_converted():
    t = Table([("t", "time:us"), ("m", "bytes:MiB"), ("r", "rate:GB/s")], [[4.16, 1.5, 16.4]])
    assert t.cells() == [["4.16 us", "1.5 MiB", "16.4 GB/s"]]


def test_bad_tables_are_refused_with_a_message():
    with pytest.raises(ValueError, match="unknown column kind 'speed'"):
        Table([("a", "speed")], [])
    with pytest.raises(ValueError, match="can be stored in"):
        Table([("a", "rate:furlongs")], [])
    with pytest.raises(ValueError, match="repeated: a"):
        Table(["a", "a"], [])
    with pytest.raises(ValueError, match="row 0 has 1 values for 2 columns"):
        Table(["a", "b"], [[1]])
    with pytest.raises(ValueError, match="row 0 must be a dict"):
        Table(["a"], ["x"])
    with pytest.raises(ValueError, match="align names 'c'"):
        Table(["a"], [], align={"c": "left"})
    with pytest.raises(ValueError, match="align must be"):
        Column("a", align="centre")
    with pytest.raises(ValueError, match="at least one column"):
        Table([], [])


def test_to_dict_keeps_raw_values():
    d = sample().to_dict()
    assert d["title"] == "All-reduce on 2 GPUs"
    assert d["columns"][2] == {"key": "busbw_gbps", "label": "busbw", "kind": "rate:GB/s"}
    assert d["rows"][0]["busbw_gbps"] == 362.14
    assert d["notes"] == ["GB/s = 10^9 B/s"]


def test_show_prints_text_outside_a_kernel(capsys):
    assert not tables.in_notebook()
    tables.show(sample())
    assert capsys.readouterr().out == str(sample()) + "\n"


def test_show_displays_in_a_kernel(monkeypatch):
    shown = []
    monkeypatch.setattr(tables, "in_notebook", lambda: True)
    import IPython.display
    monkeypatch.setattr(IPython.display, "display", shown.append)
    t = sample()
    tables.show(t)
    assert shown == [t]


def test_a_list_without_headings():
    t = Table([("k", "text"), ("v", "text")], [["torch", "2.13"], ["CUDA_VISIBLE_DEVICES", None]],
              header=False, missing="not found")
    assert t.text().splitlines() == ["torch                 2.13", "CUDA_VISIBLE_DEVICES  not found"]
    assert "<thead>" not in t._repr_html_() and "not found" in t._repr_html_()


def test_prose_columns_may_wrap_in_html_and_nothing_else_does():
    t = Table([("name", "text"), ("why", "text"), ("n", "int")], [{"name": "a", "why": "a long reason " * 5, "n": 3}],
              wrap=("why",))
    html = t._repr_html_()
    cells = html.split("<td ")[1:]
    assert "white-space: nowrap" in cells[0] and "white-space: normal" in cells[1] and "nowrap" in cells[2]
    assert "max-width" in cells[1] and "\n" not in str(t).splitlines()[2]
    with pytest.raises(ValueError, match="wrap names 'reason'"):
        Table([("name", "text")], [], wrap=("reason",))


def test_select_keeps_rows_and_formats_of_a_column_subset():
    t = Table([("path", "text"), ("env", "text", "NCCL settings"), ("busbw", "rate:GB/s", "busbw"),
               ("transport", "text")],
              [{"path": "default", "env": "(defaults)", "busbw": 300.0, "transport": "P2P"},
               {"path": "shm", "env": "NCCL_P2P_LEVEL=LOC", "busbw": 28.0, "transport": "SHM"}],
              title="sweep", notes="a note", wrap=["env"])
    ran = t.select(["path", "env", "transport"], notes=None)
    got = t.select(["path", "busbw"], title=None)
    assert [c.key for c in ran.columns] == ["path", "env", "transport"] and ran.wrap == ("env",)
    assert ran.title == "sweep" and ran.notes == [] and got.title is None and got.notes == ["a note"]
    assert got.cells() == [["default", "300 GB/s"], ["shm", "28 GB/s"]] and got.wrap == ()
    assert "NCCL settings" in ran.text() and "busbw" not in ran.text() and "P2P" not in got.text()
    assert t.select(["transport", "path"]).cells()[1] == ["SHM", "shm"]          # in the order asked
    with pytest.raises(ValueError, match="no column 'spread' to select; columns: path, env, busbw, transport"):
        t.select(["path", "spread"])
    with pytest.raises(ValueError, match="at least one column"):
        t.select([])


def test_where_keeps_the_rows_a_lesson_needs_and_says_how_to_see_all():
    t = Table([("path", "text"), ("busbw", "rate:GB/s", "busbw")],
              [{"path": "default", "busbw": 300.0}, {"path": "shm", "busbw": 28.0}, {"path": "socket", "busbw": 3.0}],
              title="sweep", notes="a note", wrap=["path"])
    slow = t.where(lambda r: r["busbw"] < 100, whole="collectives.summary(sweeps)")
    assert slow.cells() == [["shm", "28 GB/s"], ["socket", "3 GB/s"]] and slow.title == "sweep" and slow.wrap == ("path",)
    assert slow.notes == ["a note", "2 of 3 rows shown; all of them: `collectives.summary(sweeps)`."]
    assert len(t) == 3 and t.notes == ["a note"]                     # the whole table is unchanged
    assert t.where(lambda r: False, title=None).notes[-1] == "0 of 3 rows shown."


# ----------------------------------------------------------------------------- long cells shortened for display
FAILURE = ("rank 1 on host gpu-node-7 died first: killed by SIGKILL (signal 9, the kernel's out-of-memory "
           "killer?) while rank 0 waited in an all-reduce")


def test_shorten_cuts_long_text_with_an_ellipsis_on_one_line():
    assert tables.shorten("short") == "short"
    cut = tables.shorten(FAILURE)
    assert len(cut) <= tables.SHORT_CHARS == 80 and cut.endswith("\u2026") and FAILURE.startswith(cut[:-1])
    assert tables.shorten("a\nb", 10) == "a b" and tables.shorten("abcdef", 4) == "abc\u2026"
    with pytest.raises(ValueError, match="limit"):
        tables.shorten("x", 1)


def test_a_shortened_cell_is_cut_on_screen_and_whole_in_the_data_and_the_html_title():
    import html
    t = Table([("path", "text"), ("error", "text")],
              [{"path": "shm", "error": tables.Shortened(FAILURE)},
               {"path": "socket", "error": tables.Shortened("rank 0 exited 1")}])
    text = str(t)
    assert tables.shorten(FAILURE) in text and FAILURE not in text and "rank 0 exited 1" in text
    assert t.column("error")[0] == FAILURE and t.to_dict()["rows"][0]["error"] == FAILURE   # stored whole
    h = t._repr_html_()
    assert f'<td title="{html.escape(FAILURE)}" ' in h and f">{html.escape(tables.shorten(FAILURE))}</td>" in h
    assert h.count("title=") == 1                      # a cell shown whole needs no title
    short = Table([("error", "text")], [{"error": tables.Shortened(FAILURE, limit=30)}])
    assert len(short.cells()[0][0]) == 30
    esc = Table([("error", "text")], [{"error": tables.Shortened('a "quoted" <b> ' + "x" * 100)}])._repr_html_()
    assert 'title="a &quot;quoted&quot; &lt;b&gt; x' in esc


def test_formatted_shows_one_column_through_a_new_format_and_keeps_the_rest():
    cols = [("model", "text"), ("path", "text", "NCCL path"), ("speedup", "ratio")]
    out = tables.formatted(cols, "path", lambda v: v.upper())
    assert out[0] == ("model", "text") and out[2] == ("speedup", "ratio")
    assert out[1][0] == "path" and out[1][2] == "NCCL path"
    t = tables.Table(out, [{"model": "cnn", "path": "shm", "speedup": 1.5}])
    assert "SHM" in str(t) and t.to_dict()["rows"][0]["path"] == "shm"      # shown changed, value kept
    assert tables.formatted([("a", "text")], "a", "int")[0] == ("a", "int", "a")


def test_a_compact_table_has_tighter_cells_and_keeps_it_when_cut_down():
    t = Table([("a", "text"), ("b", "text")], [{"a": "NV12", "b": "PIX"}], compact=True)
    assert t._repr_html_().count("padding: 0.2em 0.35em") == 4        # 2 headings, 2 cells
    assert t.select(["a"]).compact and t.where(lambda r: True).compact
    assert "padding" not in Table([("a", "text")], [{"a": 1}])._repr_html_()
