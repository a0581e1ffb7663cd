"""Write a copy of a wheel whose shared libraries have no debug sections, so that a Horovod wheel
built on a GPU machine is small enough to bring back and hand to the next fresh machine:

    python3 tools/recording/slim_wheel.py BUILT.whl SLIM.whl

A wheel built as Horovod's own default, RelWithDebInfo, is mostly DWARF sections (the course's patch
builds Release, which has none, so its wheel comes through unchanged in size); ``strip
--strip-debug`` removes those and keeps every symbol, the dynamic ones included, so the library
loads and links as before. Each stripped file's line in the wheel's RECORD gets its new SHA-256
and size, as the wheel format asks. The copy is written aside and then renamed, so SLIM.whl is
either complete or absent. Exit status 0 when written, 1 with one message when it cannot be (no
``strip`` on PATH, not a wheel, a library ``strip`` refuses).
"""
from __future__ import annotations

import base64
import csv
import hashlib
import io
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "source_code"))

from ddlab.base import files  # noqa: E402


STRIP_TIMEOUT_S = 120     # strip takes well under a second on Horovod's 20 MB library


class SlimError(Exception):
    pass


def record_hash(data: bytes) -> str:
    """The RECORD form of a file's hash: sha256= and the URL-safe base64 digest without padding."""
    digest = hashlib.sha256(data).digest()
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def _strip(data: bytes, strip: str, tmp: str) -> bytes:
    path = files.write_bytes(os.path.join(tmp, "lib.so"), data)
    try:
        done = subprocess.run([strip, "--strip-debug", path], capture_output=True, text=True, timeout=STRIP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise SlimError(f"{strip} --strip-debug did not finish in {STRIP_TIMEOUT_S} s") from None
    if done.returncode != 0:
        raise SlimError(f"{strip} --strip-debug failed: {done.stderr.strip() or done.returncode}")
    with open(path, "rb") as f:
        return f.read()


def slim(src: str, dst: str, strip: str | None = None) -> dict:
    """Copy wheel ``src`` to ``dst`` with each ``.so`` stripped of its debug sections and RECORD
    updated. Returns {"stripped": [names], "before": bytes, "after": bytes} (sizes of the wheels)."""
    strip = strip or shutil.which("strip")
    if not strip:
        raise SlimError("no `strip` on PATH (binutils): the wheel is left as built")
    if not zipfile.is_zipfile(src):
        raise SlimError(f"{src} is not a wheel (not a zip archive)")
    stripped = []
    with zipfile.ZipFile(src) as zin, tempfile.TemporaryDirectory() as tmp:
        records = [n for n in zin.namelist() if n.endswith(".dist-info/RECORD")]
        if len(records) != 1:
            raise SlimError(f"{src} has {len(records)} .dist-info/RECORD files, a wheel has one")
        record_name = records[0]
        new = {}
        for info in zin.infolist():
            if info.filename.endswith(".so") or ".so." in os.path.basename(info.filename):
                new[info.filename] = _strip(zin.read(info), strip, tmp)
                stripped.append(info.filename)
        rows = list(csv.reader(io.StringIO(zin.read(record_name).decode())))
        for row in rows:
            if row and row[0] in new:
                row[1:3] = [record_hash(new[row[0]]), str(len(new[row[0]]))]
        out = io.StringIO()
        csv.writer(out, lineterminator="\n").writerows(rows)
        new[record_name] = out.getvalue().encode()
        with files.open_atomic(dst, "wb") as f, zipfile.ZipFile(f, "w", zipfile.ZIP_DEFLATED) as zout:
            for info in zin.infolist():     # a stripped library is not read from the wheel again
                data = new[info.filename] if info.filename in new else zin.read(info)
                zout.writestr(info, data, compress_type=zipfile.ZIP_DEFLATED)
    return {"stripped": stripped, "before": os.path.getsize(src), "after": os.path.getsize(dst)}


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python3 tools/recording/slim_wheel.py BUILT.whl SLIM.whl", file=sys.stderr)
        return 2
    try:
        res = slim(*argv)
    except (SlimError, OSError, zipfile.BadZipFile) as exc:
        print(f"[slim_wheel] {exc}", file=sys.stderr)
        return 1
    print(f"[slim_wheel] {len(res['stripped'])} librar{'y' if len(res['stripped']) == 1 else 'ies'} stripped: "
          f"{res['before'] / 2**20:.1f} MiB -> {res['after'] / 2**20:.1f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
