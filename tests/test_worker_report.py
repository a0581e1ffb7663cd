"""Workers' reports to their parent: one JSON object a line, written whole, read back from a
launch's output whatever else is there."""
import json
import os
import subprocess
import sys

import pytest

from ddlab.base import worker_report
from ddlab.base.errors import CourseError
from ddlab.base.paths import SOURCE_DIR


def test_a_report_is_one_line_of_json_with_the_fixed_fields_first():
    line = worker_report.encode("smoke", rank=1, check="ddp-step", ok=True, note="two\nlines")
    assert "\n" not in line and line.startswith('{"ddlab": "report/1", "rank": 1, "kind": "smoke"')
    assert json.loads(line) == {"ddlab": "report/1", "rank": 1, "kind": "smoke", "check": "ddp-step", "ok": True,
                                "note": "two\nlines"}


@pytest.mark.parametrize("kind, rank, payload, match", [
    ("", 0, {}, "kind"), (None, 0, {}, "kind"), ("x", -1, {}, "rank"), ("x", True, {}, "rank"),
    ("x", "0", {}, "rank"), ("x", 0, {"ddlab": "y"}, "format field"),
])
def test_encode_refuses_what_would_not_read_back(kind, rank, payload, match):
    with pytest.raises(ValueError, match=match):
        worker_report.encode(kind, rank=rank, **payload)


def test_emit_writes_the_line_and_returns_it(capsys):
    print("before", end="")          # unflushed text is written first, and the report on its own line after it
    line = worker_report.emit("result", rank=0, samples=10)
    out = capsys.readouterr().out
    assert out == "before" + line + "\n"
    assert worker_report.parse(out) == [json.loads(line)]


def test_emit_writes_to_the_file_descriptor_in_one_piece(tmp_path):
    """A worker's standard output is a pipe: the report goes to its descriptor after what was printed."""
    code = ("from ddlab.base import worker_report\n"
            "print('progress line')\n"
            "worker_report.emit('smoke', rank=3, ok=False, values=list(range(5)))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env=dict(os.environ, PYTHONPATH=SOURCE_DIR)).stdout
    assert out.splitlines()[0] == "progress line"
    assert worker_report.parse(out) == [{"ddlab": "report/1", "rank": 3, "kind": "smoke", "ok": False,
                                         "values": [0, 1, 2, 3, 4]}]


def test_parse_reads_interleaved_ranks_among_other_output_in_order():
    r0 = worker_report.encode("result", rank=0, samples=5)
    r1 = worker_report.encode("result", rank=1, samples=6)
    s1 = worker_report.encode("smoke", rank=1, ok=True)
    text = "\n".join([
        "W1125 torchrun: setting OMP_NUM_THREADS",
        "[1,1]<stdout>:" + r1,                           # horovodrun's prefix
        "node:123:456 [0] NCCL INFO Channel 00 : 0[0] -> 1[1] via P2P/IPC",
        "test accuracy 0.3" + r0,                         # another rank's print without its newline yet
        "[rank1]:" + s1,                                  # torchrun --tee's prefix
        'a line that mentions {"ddlab" but is no report',
        "",
    ])
    got = worker_report.parse(text)
    assert [(r["rank"], r["kind"]) for r in got] == [(1, "result"), (0, "result"), (1, "smoke")]
    assert [r["samples"] for r in worker_report.parse(text, kind="result")] == [6, 5]
    assert {rank: [r["kind"] for r in rs] for rank, rs in worker_report.by_rank(got).items()} == \
        {0: ["result"], 1: ["result", "smoke"]}
    assert list(worker_report.by_rank(got)) == [0, 1]


def test_parse_of_output_without_reports_is_empty():
    assert worker_report.parse("") == [] and worker_report.parse(None) == []
    assert worker_report.parse("step 10/100 | loss 0.5\nTraceback (most recent call last):\n") == []


@pytest.mark.parametrize("bad, why", [
    ('{"ddlab": "report/1", "rank": 0, "kind": "smoke", "ok": tr', "not a valid report"),     # cut off
    ('{"ddlab": "report/9", "rank": 0, "kind": "smoke"}', "'report/9'"),                      # unknown version
    ('{"ddlab": "report/1", "rank": "0", "kind": "smoke"}', "rank"),
    ('{"ddlab": "report/1", "rank": 0, "kind": ""}', "kind"),
    ('{"kind": "x", "ddlab": "report/1", "rank": 0}', "does not start with"),                 # not written by emit
])
def test_a_malformed_report_line_raises_one_message_naming_the_line(bad, why):
    good = worker_report.encode("smoke", rank=1, ok=True)
    text = f"some output\n{good}\n[1,0]<stdout>:{bad}\nmore output\n"
    with pytest.raises(worker_report.WorkerReportError, match=why) as ei:
        worker_report.parse(text)
    assert isinstance(ei.value, CourseError)
    assert str(ei.value).startswith("line 3 of the workers' output is not a valid report")
    assert bad in str(ei.value)
    # where the run failed anyway, the good reports are still read and the broken line passed over
    assert worker_report.parse(text, strict=False) == [json.loads(good)]


def test_a_long_malformed_line_is_named_shortened():
    bad = '{"ddlab": "report/1", "rank": 0, "kind": "x", "v": "' + "a" * 1000
    with pytest.raises(worker_report.WorkerReportError) as ei:
        worker_report.parse(bad)
    assert len(str(ei.value)) < 500 and str(ei.value).endswith("...")
