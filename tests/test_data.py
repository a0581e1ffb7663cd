"""ddlab.training.data: the real Fashion-MNIST, the search order, and every way the data can be bad."""
import gzip
import os
import shutil

import numpy as np
import pytest

from ddlab.training import data

REAL_DIR = data.find_dataset()  # the real data, found before any test re-points the search


@pytest.fixture
def no_search_path(monkeypatch, tmp_path):
    """Point every search location at empty folders."""
    monkeypatch.setenv("DDLAB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("DDLAB_DATA_DIR", raising=False)
    monkeypatch.setattr(data, "DEBIAN_DIR", str(tmp_path / "debian"))
    return tmp_path


def write_tiny(d, n_train=12, n_test=4, gz=True):
    os.makedirs(d, exist_ok=True)
    rng = np.random.default_rng(0)
    ext = ".gz" if gz else ""
    data.write_idx(os.path.join(d, "train-images-idx3-ubyte" + ext), rng.integers(0, 256, (n_train, 28, 28)))
    data.write_idx(os.path.join(d, "train-labels-idx1-ubyte" + ext), np.arange(n_train) % 10)
    data.write_idx(os.path.join(d, "t10k-images-idx3-ubyte" + ext), rng.integers(0, 256, (n_test, 28, 28)))
    data.write_idx(os.path.join(d, "t10k-labels-idx1-ubyte" + ext), np.arange(n_test) % 10)


def test_real_dataset_shapes_and_class_balance():
    x, y, xt, yt = data.load_fashion_mnist()
    assert x.shape == (60000, 28, 28) and y.shape == (60000,)
    assert xt.shape == (10000, 28, 28) and yt.shape == (10000,)
    assert x.dtype == y.dtype == np.uint8
    assert np.bincount(y).tolist() == [6000] * 10
    assert np.bincount(yt).tolist() == [1000] * 10
    assert 0 < x.mean() < 255


def test_missing_data_says_where_it_looked_and_how_to_get_it(no_search_path):
    with pytest.raises(data.DatasetError) as ei:
        data.load_fashion_mnist()
    msg = str(ei.value)
    assert "not found" in msg and str(no_search_path / "cache") in msg and str(no_search_path / "debian") in msg
    assert "make data" in msg and "DDLAB_DATA_DIR" in msg


def test_search_order_path_then_env_then_cache(no_search_path, monkeypatch):
    a, b, c = (str(no_search_path / n) for n in "abc")
    write_tiny(c, n_train=3)
    monkeypatch.setenv("DDLAB_CACHE_DIR", c)
    assert data.find_dataset() == c
    write_tiny(b, n_train=2)
    monkeypatch.setenv("DDLAB_DATA_DIR", b)
    assert data.find_dataset() == b
    write_tiny(a, n_train=1, gz=False)  # plain, not gzipped, is accepted too
    assert data.find_dataset(a) == a
    assert data.load_fashion_mnist(a, verify=False)[0].shape == (1, 28, 28)


@pytest.fixture
def data_elsewhere(no_search_path, monkeypatch):
    """Valid (tiny) files in every place the search looks, so a fallback would succeed."""
    for name in ("cache", "debian", "env"):
        write_tiny(str(no_search_path / name))
    monkeypatch.setenv("DDLAB_DATA_DIR", str(no_search_path / "env"))
    assert data.find_dataset() == str(no_search_path / "env")
    return no_search_path


@pytest.mark.parametrize("what", ["empty", "blank", "missing folder", "a file", "empty folder", "three of four"])
def test_explicit_path_is_never_replaced_by_another_location(data_elsewhere, what):
    base = data_elsewhere
    if what == "empty":
        path, said = "", "is empty"
    elif what == "blank":
        path, said = "   ", "is empty"
    elif what == "missing folder":
        path, said = str(base / "no-such-folder"), "does not exist"
    elif what == "a file":
        path = str(base / "file.txt")
        open(path, "w").write("not a folder")
        said = "is a file, not a folder"
    elif what == "empty folder":
        path = str(base / "empty")
        os.makedirs(path)
        said = "lacks train-images-idx3-ubyte"
    else:
        path = str(base / "three")
        write_tiny(path)
        os.remove(os.path.join(path, "t10k-labels-idx1-ubyte.gz"))
        said = "lacks t10k-labels-idx1-ubyte"
    with pytest.raises(data.DatasetError) as ei:
        data.load_fashion_mnist(path, verify=False)
    msg = str(ei.value)
    assert repr(path) in msg and said in msg, msg
    assert "make data" in msg  # says how to get the data
    assert data.find_dataset(path) is None
    assert data.dataset_status(path).startswith("MISSING")


def test_empty_path_is_not_the_current_folder(data_elsewhere, monkeypatch):
    write_tiny(str(data_elsewhere / "here"))
    monkeypatch.chdir(data_elsewhere / "here")
    assert data.find_dataset("") is None
    with pytest.raises(data.DatasetError, match="path '' is empty"):
        data.load_fashion_mnist("", verify=False)


def test_explicit_path_that_holds_the_files_is_used(data_elsewhere):
    d = str(data_elsewhere / "mine")
    write_tiny(d, n_train=5)
    assert data.load_fashion_mnist(d, verify=False)[0].shape == (5, 28, 28)
    assert data.search_dirs(d) == [d]


def test_path_that_is_not_a_folder_name_is_reported(no_search_path):
    with pytest.raises(data.DatasetError, match="42 is not a folder name"):
        data.load_fashion_mnist(42)


def test_tiny_files_fail_checksum_verification(no_search_path):
    d = str(no_search_path / "tiny")
    write_tiny(d)
    with pytest.raises(data.DatasetError, match="wrong content"):
        data.load_fashion_mnist(d)


def test_truncated_gzip_is_reported(no_search_path):
    d = str(no_search_path / "t")
    write_tiny(d)
    p = os.path.join(d, "train-images-idx3-ubyte.gz")
    raw = open(p, "rb").read()
    open(p, "wb").write(raw[: len(raw) // 2])
    with pytest.raises(data.DatasetError, match="truncated|cannot be read"):
        data.load_fashion_mnist(d, verify=False)


def test_truncated_idx_payload_is_reported(no_search_path):
    d = str(no_search_path / "t")
    write_tiny(d)
    p = os.path.join(d, "t10k-labels-idx1-ubyte.gz")
    raw = gzip.open(p).read()
    with gzip.open(p, "wb") as f:
        f.write(raw[:-1])
    with pytest.raises(data.DatasetError, match="truncated or padded"):
        data.load_fashion_mnist(d, verify=False)


def test_wrong_magic_number_is_reported(no_search_path):
    d = str(no_search_path / "m")
    write_tiny(d)
    with gzip.open(os.path.join(d, "train-labels-idx1-ubyte.gz"), "wb") as f:
        f.write(b"PK\x03\x04" + bytes(20))
    with pytest.raises(data.DatasetError, match="magic number"):
        data.load_fashion_mnist(d, verify=False)


def test_one_wrong_byte_in_real_data_is_caught(no_search_path):
    d = str(no_search_path / "copy")
    shutil.copytree(REAL_DIR, d)
    p = os.path.join(d, "t10k-labels-idx1-ubyte.gz")
    raw = bytearray(gzip.open(p).read())
    raw[100] = (raw[100] + 1) % 10
    with gzip.open(p, "wb") as f:
        f.write(bytes(raw))
    with pytest.raises(data.DatasetError, match="wrong content.*SHA-256"):
        data.load_fashion_mnist(d)


def test_cli_reports_ok_and_missing(no_search_path, capsys, monkeypatch):
    assert data.cli(["--no-download"]) == 1
    assert "not found" in capsys.readouterr().out
    write_tiny(str(no_search_path / "cache"))
    assert data.cli(["--no-download"]) == 1  # tiny files are not the real data set
    assert "wrong content" in capsys.readouterr().out


@pytest.mark.parametrize("world", [1, 2, 3, 8])
def test_shards_are_disjoint_equal_and_cover_the_data(world):
    n = 1000
    shards = [data.shard_indices(n, r, world, seed=7) for r in range(world)]
    assert all(len(s) == n // world for s in shards)
    allidx = np.concatenate(shards)
    assert len(np.unique(allidx)) == len(allidx) == (n // world) * world
    # a new epoch reshuffles; the same epoch and seed gives the same shard
    assert not np.array_equal(data.shard_indices(n, 0, world, 7, epoch=1), shards[0]) or world == n
    assert np.array_equal(data.shard_indices(n, 0, world, 7), shards[0])


def test_shard_rejects_bad_rank():
    with pytest.raises(ValueError):
        data.shard_indices(10, 2, 2, seed=0)


def _gzipped_real_copy(folder):
    """The real four files, gzipped, in ``folder`` (copied where the real ones are gzipped)."""
    os.makedirs(folder)
    for stem in data.FILES.values():
        real = os.path.join(REAL_DIR, stem + ".gz")
        if os.path.isfile(real):
            shutil.copy(real, folder)
        else:
            with open(os.path.join(REAL_DIR, stem), "rb") as f:
                data.files.write_bytes(os.path.join(folder, stem + ".gz"), gzip.compress(f.read(), 1))


def test_a_verified_gzipped_file_is_read_from_its_decompressed_copy_until_it_changes(no_search_path, monkeypatch):
    src = str(no_search_path / "gz")
    _gzipped_real_copy(src)
    kept = no_search_path / "cache-idx"
    first = data.load_fashion_mnist(src)                      # verified: each file kept decompressed
    assert sorted(p.name.rsplit("-", 1)[0] for p in kept.iterdir()) == sorted(data.FILES.values())

    def no_gzip(*a, **k):
        raise AssertionError("decompressed again")
    with monkeypatch.context() as m:
        m.setattr(data.gzip, "open", no_gzip)
        for verify in (False, True):
            again = data.load_fashion_mnist(src, verify=verify)
            assert all(np.array_equal(a, b) for a, b in zip(first, again))
    labels = os.path.join(src, "t10k-labels-idx1-ubyte.gz")
    copy = data._copy_of(labels)
    with open(copy, "wb") as f:                               # a damaged copy: the .gz decides, and is kept again
        f.write(b"\0\0\x08\x01" + (3).to_bytes(4, "big") + b"abc")
    assert np.array_equal(data.load_fashion_mnist(src)[3], first[3])
    assert os.path.getsize(copy) == data.CHECKSUMS["t10k-labels-idx1-ubyte"][1]
    os.utime(labels, ns=(1, 1))                               # a changed .gz: a copy of its own, the old one gone
    data.load_fashion_mnist(src)
    assert not os.path.exists(copy) and os.path.isfile(data._copy_of(labels)) and len(list(kept.iterdir())) == 4


def test_unverified_or_unwritable_loads_keep_nothing_and_still_load(no_search_path, monkeypatch):
    tiny = str(no_search_path / "tiny")
    write_tiny(tiny)
    data.load_fashion_mnist(tiny, verify=False)               # unverified bytes are never kept
    assert not (no_search_path / "cache-idx").exists()
    (no_search_path / "cache-idx").write_text("a file where the folder would go")
    src = str(no_search_path / "gz")
    _gzipped_real_copy(src)
    assert data.load_fashion_mnist(src)[0].shape == (60000, 28, 28)
