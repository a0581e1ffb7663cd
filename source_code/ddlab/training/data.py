"""Fashion-MNIST, offline first.

The real data set (Zalando Research, MIT licence): 60,000 training and 10,000 test
images of 28x28 grey pixels in 10 classes. An explicit ``path`` argument is the only place
looked at: when the four IDX files are not there, :class:`DatasetError` names that folder
(another copy elsewhere is never used instead). Without ``path``, the search order is:

1. the ``DDLAB_DATA_DIR`` environment variable,
2. the course-local cache ``<repo>/.cache/fashion-mnist`` (``DDLAB_CACHE_DIR`` overrides),
3. ``/usr/share/datasets/fashion-mnist`` (Debian/Ubuntu package ``dataset-fashion-mnist``),
4. a download from the canonical source into the cache (``ensure_dataset(download=True)``).

Files may be gzipped (``.gz``) or plain. They are verified by the SHA-256 of the
decompressed IDX bytes: Debian's ``.gz`` files carry other gzip headers than the canonical
ones, so a checksum of the ``.gz`` would reject good data.

A gzipped file that passed that check is kept decompressed beside the course cache
(:func:`decompressed_dir`), named after the ``.gz`` file's path, size and modification time;
later loads of the same ``.gz`` read that copy instead of decompressing it again, which every
worker of every launch would otherwise do at start-up. A changed or replaced ``.gz`` gets a copy
of its own; a damaged copy is dropped and the ``.gz`` read again; where the folder cannot be
written, every load decompresses.
"""
from __future__ import annotations

import gzip
import hashlib
import os
import shutil
import urllib.request
from typing import Optional

import numpy as np

from ddlab.base import files
from ddlab.base.paths import REPO_ROOT
from ddlab.base.errors import CourseError

FILES = {
    "train_images": "train-images-idx3-ubyte",
    "train_labels": "train-labels-idx1-ubyte",
    "test_images": "t10k-images-idx3-ubyte",
    "test_labels": "t10k-labels-idx1-ubyte",
}
# SHA-256 and length of the decompressed IDX files (identical in the canonical and Debian copies).
CHECKSUMS = {
    "train-images-idx3-ubyte": ("c59f468a2f672dc815687fe0f83887768d799fd8a3f3276145d20f83aa44d888", 47040016),
    "train-labels-idx1-ubyte": ("bad3541b69d912435c50bb6ba87bec294ff4f6a2e1246121d8633921760443d9", 60008),
    "t10k-images-idx3-ubyte": ("5b4141f0afbad91edebe8549f8fcffe087ea10ca49f1dbef5c9a5cd8815ce37b", 7840016),
    "t10k-labels-idx1-ubyte": ("0402a96d92fd2663957122ceb108a494c5af83dab82d92729df917d7dec38c34", 10008),
}
SHAPES = {"train_images": (60000, 28, 28), "train_labels": (60000,),
          "test_images": (10000, 28, 28), "test_labels": (10000,)}
DEBIAN_DIR = "/usr/share/datasets/fashion-mnist"
CANONICAL_URL = "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/"
CLASSES = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
           "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot")
HOW_TO_GET = ("How to get it: run `make data` in the course folder (it installs the Debian/Ubuntu "
              "package `dataset-fashion-mnist` with apt where it can, else downloads the four "
              f"files from {CANONICAL_URL}), or put the four IDX files (.gz or plain) in a folder "
              "and set DDLAB_DATA_DIR to it.")


class DatasetError(CourseError, RuntimeError):
    """Fashion-MNIST is missing or corrupt; the message says what, where, and how to fix it."""


def cache_dir() -> str:
    return os.environ.get("DDLAB_CACHE_DIR") or os.path.join(REPO_ROOT, ".cache", "fashion-mnist")


def search_dirs(path: Optional[str] = None) -> list:
    """The folders looked at, in order: only ``path`` when one is given, else the search order."""
    if path is not None:
        return [path]
    dirs = [os.environ.get("DDLAB_DATA_DIR"), cache_dir(), DEBIAN_DIR]
    out = []
    for d in dirs:
        if d and d not in out:
            out.append(d)
    return out


def _file_in(d: str, stem: str) -> Optional[str]:
    for name in (stem + ".gz", stem):
        p = os.path.join(d, name)
        if os.path.isfile(p):
            return p
    return None


def find_dataset(path: Optional[str] = None) -> Optional[str]:
    """The first folder in the search order that holds all four files, else None. With
    ``path``, that folder when it holds them, else None (no other folder is looked at)."""
    if path is not None:
        try:
            return _check_explicit_path(path)
        except DatasetError:
            return None
    for d in search_dirs():
        if all(_file_in(d, stem) for stem in FILES.values()):
            return d
    return None


def decompressed_dir() -> str:
    """The folder of the verified decompressed copies of gzipped files (beside the course cache)."""
    return cache_dir().rstrip(os.sep) + "-idx"


def _copy_of(p: str) -> Optional[str]:
    """Where the decompressed copy of the ``.gz`` file ``p`` is kept: its stem and a digest of the
    file's real path, size and modification time; None for a plain file or one that cannot be read."""
    if not p.endswith(".gz"):
        return None
    try:
        st = os.stat(p)
    except OSError:
        return None
    who = f"{os.path.realpath(p)}\0{st.st_size}\0{st.st_mtime_ns}".encode()
    stem = os.path.basename(p)[:-3]
    return os.path.join(decompressed_dir(), f"{stem}-{hashlib.sha256(who).hexdigest()[:16]}")


def _read_bytes(p: str) -> bytes:
    copy = _copy_of(p)
    try:
        if copy is not None and os.path.isfile(copy):
            with open(copy, "rb") as f:
                return f.read()
        if p.endswith(".gz"):
            with gzip.open(p, "rb") as f:
                return f.read()
        with open(p, "rb") as f:
            return f.read()
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise DatasetError(f"Fashion-MNIST file {p} cannot be read ({exc}); it is truncated or not "
                           f"gzip data. Delete it and fetch the data again. {HOW_TO_GET}") from None


def _drop_copy(p: str) -> bool:
    """Remove the kept decompressed copy of ``p``; True when there was one."""
    copy = _copy_of(p)
    if copy is None or not os.path.isfile(copy):
        return False
    try:
        os.remove(copy)
    except OSError:
        return False
    return True


def _keep_decompressed(p: str, raw: bytes) -> None:
    """Keep the verified bytes of the ``.gz`` file ``p`` decompressed (:func:`_copy_of`), replacing
    older copies of the same file name; nothing when there is one already or the folder is read-only."""
    copy = _copy_of(p)
    if copy is None or os.path.isfile(copy):
        return
    stem = os.path.basename(copy).rsplit("-", 1)[0]
    try:
        files.write_bytes(copy, raw)
        for old in os.listdir(decompressed_dir()):
            if old.rsplit("-", 1)[0] == stem and old != os.path.basename(copy) and not old.startswith("."):
                os.remove(os.path.join(decompressed_dir(), old))
    except OSError:
        pass


def parse_idx(raw: bytes, source: str = "<bytes>") -> np.ndarray:
    """Decode an IDX file of unsigned bytes (magic 0x0000080N, N = number of dimensions)."""
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] != 0x08 or not 1 <= raw[3] <= 4:
        magic = raw[:4].hex() if len(raw) >= 4 else raw.hex()
        raise DatasetError(f"{source} is not an IDX file of unsigned bytes (magic number {magic!r}, "
                           f"expected 0000080N). {HOW_TO_GET}")
    ndim = raw[3]
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise DatasetError(f"{source} is truncated inside its header. {HOW_TO_GET}")
    dims = tuple(int.from_bytes(raw[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim))
    need = header + int(np.prod(dims))
    if len(raw) != need:
        raise DatasetError(f"{source} holds {len(raw)} bytes but its header {dims} needs {need}: "
                           f"the file is truncated or padded. {HOW_TO_GET}")
    return np.frombuffer(raw, dtype=np.uint8, offset=header).reshape(dims)


def write_idx(path: str, array: np.ndarray) -> None:
    """Write a uint8 array as an IDX file (gzipped when ``path`` ends in .gz). Used by tests."""
    a = np.ascontiguousarray(array, dtype=np.uint8)
    head = bytes([0, 0, 8, a.ndim]) + b"".join(int(d).to_bytes(4, "big") for d in a.shape)
    data = head + a.tobytes()
    files.write_bytes(path, gzip.compress(data, mtime=0) if path.endswith(".gz") else data)


def _load_dir(d: str, verify: bool) -> tuple:
    arrays = {}
    for key, stem in FILES.items():
        p = _file_in(d, stem)
        raw = _read_bytes(p)
        if verify:
            digest, size = CHECKSUMS[stem]
            if (len(raw) != size or hashlib.sha256(raw).hexdigest() != digest) and _drop_copy(p):
                raw = _read_bytes(p)            # the kept copy was damaged: the .gz itself decides
            if len(raw) != size or hashlib.sha256(raw).hexdigest() != digest:
                # A wrong header is the clearer message when it applies.
                parse_idx(raw, p)
                raise DatasetError(f"Fashion-MNIST file {p} has the wrong content: {len(raw)} bytes "
                                   f"decompressed, SHA-256 {hashlib.sha256(raw).hexdigest()[:16]}..., "
                                   f"expected {size} bytes and {digest[:16]}.... Delete it and fetch "
                                   f"the data again. {HOW_TO_GET}")
        arr = parse_idx(raw, p)
        if verify and arr.shape != SHAPES[key]:
            raise DatasetError(f"{p} has shape {arr.shape}, expected {SHAPES[key]}. {HOW_TO_GET}")
        if verify:
            _keep_decompressed(p, raw)
        arrays[key] = arr
    if arrays["train_images"].shape[0] != arrays["train_labels"].shape[0] or \
            arrays["test_images"].shape[0] != arrays["test_labels"].shape[0]:
        raise DatasetError(f"Fashion-MNIST in {d}: image and label counts differ. {HOW_TO_GET}")
    return (arrays["train_images"], arrays["train_labels"], arrays["test_images"], arrays["test_labels"])


def load_fashion_mnist(path: Optional[str] = None, verify: bool = True) -> tuple:
    """Return ``(x_train, y_train, x_test, y_test)`` as uint8 arrays of shapes
    (60000,28,28), (60000,), (10000,28,28), (10000,).

    ``path`` is the folder with the four IDX files; when given, it is the only place looked
    at. Raises :class:`DatasetError` when the data is missing or corrupt (naming ``path`` when
    it was given). ``verify=False`` skips the checksums (for tests that write their own tiny
    IDX files)."""
    if path is not None:
        return _load_dir(_check_explicit_path(path), verify)
    return _load_dir(require(), verify)


def require() -> str:
    """The folder Fashion-MNIST is in (the search order, nothing read); else :class:`DatasetError`
    naming the folders looked in and how to get it. A launcher calls it before starting workers."""
    d = find_dataset()
    if d is None:
        looked = "\n  ".join(search_dirs())
        raise DatasetError(f"Fashion-MNIST not found. Looked for the four files "
                           f"({', '.join(FILES.values())}, .gz or plain) in:\n  {looked}\n{HOW_TO_GET}")
    return d


MISSING = ("Fashion-MNIST is not on this machine (run `make data`, or put the four IDX files in a folder "
           "and set DDLAB_DATA_DIR to it)")


def missing() -> Optional[str]:
    """None when Fashion-MNIST is found, else :data:`MISSING`: one line, what to do."""
    return None if find_dataset() is not None else MISSING


def where() -> str:
    """One line: the folder the data is read from, and when DDLAB_DATA_DIR names another folder
    that lacks it, that this one stands in (the checksums make every copy the same data)."""
    d = require()
    line = f"Fashion-MNIST from {d}"
    named = os.environ.get("DDLAB_DATA_DIR")
    if named and os.path.abspath(named) != os.path.abspath(d):
        line += f" (DDLAB_DATA_DIR={named} does not hold the four files, so this copy is used)"
    return line


def _check_explicit_path(path) -> str:
    """``path`` when it is a folder holding the four files; else DatasetError naming it."""
    if not isinstance(path, (str, os.PathLike)):
        raise DatasetError(f"Fashion-MNIST path {path!r} is not a folder name (got {type(path).__name__}); "
                           f"give the folder with the four IDX files, or leave path out to search the "
                           f"usual places. {HOW_TO_GET}")
    d = os.fspath(path)
    if not d.strip():
        raise DatasetError(f"Fashion-MNIST path {d!r} is empty; give the folder with the four IDX files, or "
                           f"leave path out to search the usual places. {HOW_TO_GET}")
    if not os.path.isdir(d):
        what = "is a file, not a folder" if os.path.exists(d) else "does not exist"
        raise DatasetError(f"Fashion-MNIST path {d!r} {what}; give the folder with the four IDX files "
                           f"({', '.join(FILES.values())}, .gz or plain). {HOW_TO_GET}")
    missing = [stem for stem in FILES.values() if not _file_in(d, stem)]
    if missing:
        raise DatasetError(f"Fashion-MNIST path {d!r} lacks {', '.join(m + '[.gz]' for m in missing)} "
                           f"(it needs all four IDX files, .gz or plain). {HOW_TO_GET}")
    return d


def dataset_status(path: Optional[str] = None) -> str:
    try:
        load_fashion_mnist(path)
    except DatasetError as exc:
        lines = str(exc).splitlines()
        looked = [x.strip() for x in lines[1:] if x.startswith("  ")]
        if looked:          # not found: the folders searched, and the one step that fetches it, on one line
            return (f"MISSING: Fashion-MNIST not found in {', '.join(looked)}; run `make data`, or set "
                    "DDLAB_DATA_DIR to a folder holding the four IDX files")
        return "MISSING or CORRUPT: " + " ".join(lines)
    return f"ok ({path if path is not None else find_dataset()}, checksums verified)"


def download(dest: Optional[str] = None, base_url: str = CANONICAL_URL, timeout: float = 60) -> str:
    """Download the four .gz files into ``dest`` (default: the course cache) and verify them."""
    dest = dest or cache_dir()
    os.makedirs(dest, exist_ok=True)
    for stem in FILES.values():
        target = os.path.join(dest, stem + ".gz")
        try:       # into a temporary file beside it, renamed when whole: a cut download leaves no half file
            with urllib.request.urlopen(base_url + stem + ".gz", timeout=timeout) as r, \
                    files.open_atomic(target, "wb") as f:
                shutil.copyfileobj(r, f)
        except OSError as exc:
            raise DatasetError(f"Could not download {base_url}{stem}.gz ({exc}). {HOW_TO_GET}") from None
    _load_dir(dest, verify=True)
    return dest


def ensure_dataset(download_if_missing: bool = True) -> str:
    """Make the data available (used by ``make data``); returns the folder it is in."""
    d = find_dataset()
    if d is not None:
        _load_dir(d, verify=True)
        return d
    if not download_if_missing:
        load_fashion_mnist()  # raises the full message
    return download()


def cli(argv: list) -> int:
    import argparse
    p = argparse.ArgumentParser(prog="ddlab data", description="Make Fashion-MNIST available and verify it.")
    p.add_argument("--no-download", action="store_true", help="only look, never download")
    a = p.parse_args(argv)
    try:
        d = ensure_dataset(download_if_missing=not a.no_download)
    except DatasetError as exc:
        print(f"ddlab data: {exc}")
        return 1
    print(f"Fashion-MNIST ok in {d} (decompressed SHA-256 verified for all four files)")
    return 0


# ----------------------------------------------------------------------------- sharding
def shard_indices(n: int, rank: int, world_size: int, seed: int, epoch: int = 0) -> np.ndarray:
    """The sample indices worker ``rank`` of ``world_size`` trains on in ``epoch``.

    One permutation of range(n), drawn from (seed, epoch) and identical on every rank, is
    cut into ``world_size`` disjoint, equal parts (the n % world_size leftovers are dropped
    so every rank runs the same number of steps)."""
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} outside world of {world_size}")
    perm = np.random.default_rng([seed, epoch]).permutation(n)
    per = n // world_size
    return perm[rank * per:(rank + 1) * per]


SUBSET_SEED = 20171002   # fixed: every run that trains on a subset trains on the same images


def train_subset(n: int, k: int) -> np.ndarray:
    """The indices (sorted) of a fixed random ``k`` of ``n`` training images: the same for every
    seed, every rank and every run, so runs on a subset differ only in what they vary."""
    if not 1 <= k <= n:
        raise ValueError(f"a subset of {k} images out of {n} is impossible")
    return np.sort(np.random.default_rng(SUBSET_SEED).permutation(n)[:k])
