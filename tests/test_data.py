"""initmem.data.splits: every source, the cache, the splits, augmentation and minibatch order."""

from __future__ import annotations

import pickle
import tarfile
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image

import initmem.data.imagefolder as imagefolder
import initmem.data.sources as D
from initmem.data.splits import (
    CIFAR10_CLASSES,
    Cifar10,
    augment_batch,
    batches,
    channel_stats,
    load_cifar10,
    make_splits,
    steps_per_epoch,
    stratified_indices,
)
from initmem.errors import ConfigError, DataError

# Deliberately not created in sorted order: labels must follow the *sorted* folder names.
FRUITS = ["kiwi", "apple", "fig", "banana", "cherry", "date", "elder", "grape", "honeydew", "jujube"]
N_TRAIN, N_TEST = 3, 2  # images per class in the generated trees


# --------------------------------------------------------------------------------------------------- helpers
def write_tree(root: Path, seed: int = 0) -> dict[str, torch.Tensor]:
    """train/<fruit>/NNNN.png and test/<fruit>/NNNN.png with random RGB pixels; returns the expected tensors."""
    rng = np.random.default_rng(seed)
    expected: dict[str, list] = {"train_x": [], "train_y": [], "test_x": [], "test_y": []}
    imgs = {(s, c): rng.integers(0, 256, (n, 32, 32, 3), dtype=np.uint8)
            for s, n in (("train", N_TRAIN), ("test", N_TEST)) for c in FRUITS}
    for (split, cls), arr in imgs.items():
        (root / split / cls).mkdir(parents=True, exist_ok=True)
        for j, a in enumerate(arr):
            Image.fromarray(a).save(root / split / cls / f"{j:04d}.png")
    for split in ("train", "test"):
        for label, cls in enumerate(sorted(FRUITS)):
            expected[f"{split}_x"].append(torch.from_numpy(imgs[split, cls]).permute(0, 3, 1, 2))
            expected[f"{split}_y"] += [label] * len(imgs[split, cls])
    return {k: torch.cat(v) if k.endswith("_x") else torch.tensor(v) for k, v in expected.items()}


def make_tar(tree: Path, out: Path, top: str | None = "cifar") -> Path:
    with tarfile.open(out, "w:gz") as tf:
        for split in ("train", "test"):
            tf.add(tree / split, arcname=f"{top}/{split}" if top else split)
    return out


def assert_matches(data: Cifar10, expected: dict[str, torch.Tensor]) -> None:
    for k, v in expected.items():
        assert torch.equal(getattr(data, k), v), k


def write_batches(root: Path, n: int = 20, label_max: int = 9) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor,
                                                                         torch.Tensor]:
    """The official python layout: root/cifar-10-batches-py/{data_batch_1..5, test_batch, batches.meta}."""
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(1)
    xs, ys = [], []
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        x = rng.integers(0, 256, (n, 3072), dtype=np.uint8)
        y = [int(v) for v in rng.integers(0, label_max + 1, n)]
        with open(folder / name, "wb") as f:
            pickle.dump({b"batch_label": name.encode(), b"labels": y, b"data": x, b"filenames": [b"x.png"] * n}, f)
        xs.append(torch.from_numpy(x).view(-1, 3, 32, 32))
        ys.append(torch.tensor(y))
    with open(folder / "batches.meta", "wb") as f:
        pickle.dump({b"label_names": [c.encode() for c in CIFAR10_CLASSES], b"num_cases_per_batch": n,
                     b"num_vis": 3072}, f)
    return torch.cat(xs[:5]), torch.cat(ys[:5]), xs[5], ys[5]


@pytest.fixture
def tree(tmp_path: Path) -> tuple[Path, dict[str, torch.Tensor]]:
    root = tmp_path / "tree"
    return root, write_tree(root)


@pytest.fixture(scope="module")
def synth() -> Cifar10:
    return load_cifar10(source="synthetic")


# ----------------------------------------------------------------------------------------------------- synthetic
def test_synthetic_shapes_balanced_deterministic(synth: Cifar10) -> None:
    assert synth.train_x.shape == (2000, 3, 32, 32) and synth.test_x.shape == (500, 3, 32, 32)
    assert synth.train_x.dtype == torch.uint8 and synth.train_y.dtype == torch.int64
    assert synth.classes == CIFAR10_CLASSES and synth.source.startswith("synthetic")
    assert torch.bincount(synth.train_y).tolist() == [200] * 10
    assert torch.bincount(synth.test_y).tolist() == [50] * 10
    again = load_cifar10(source="synthetic")
    assert torch.equal(again.train_x, synth.train_x) and torch.equal(again.test_x, synth.test_x)
    small = load_cifar10(source="synthetic", synthetic_sizes=(100, 30))
    assert len(small.train_y) == 100 and len(small.test_y) == 30
    assert not torch.equal(D.make_synthetic(100, 30, seed=1).train_x, small.train_x)
    with pytest.raises(ConfigError, match=r"synthetic data of 5 training images \(TrainConfig's n_train \+ n_val\)"):
        load_cifar10(source="synthetic", synthetic_sizes=(5, 30))


def test_synthetic_is_class_structured(synth: Cifar10) -> None:
    # A nearest-class-mean classifier must be far above chance (0.1): the images carry their class.
    x, xt = synth.train_x.float().flatten(1), synth.test_x.float().flatten(1)
    centroids = torch.stack([x[synth.train_y == c].mean(0) for c in range(10)])
    acc = (torch.cdist(xt, centroids).argmin(1) == synth.test_y).float().mean().item()
    assert acc > 0.6
    assert synth.train_x.float().std() > 20  # not a blank image per class


# --------------------------------------------------------------------------------------------------- imagefolder
def test_imagefolder_tree_roundtrips_pixels_and_sorted_labels(tree, tmp_path: Path) -> None:
    root, expected = tree
    data = load_cifar10(root, source="imagefolder", cache_dir=tmp_path / "cache")
    assert data.classes == tuple(sorted(FRUITS))
    assert data.source == f"imagefolder:{root.resolve()}"
    assert_matches(data, expected)  # PNG is lossless: exact pixels; labels follow sorted class names
    assert data.train_y[-1] == data.classes.index("kiwi") == 9


@pytest.mark.parametrize("top", ["cifar", None])
def test_imagefolder_targz_and_folder_with_one_archive(tree, tmp_path: Path, top: str | None) -> None:
    root, expected = tree
    archive = make_tar(root, tmp_path / "imgs.tar.gz", top)
    data = load_cifar10(archive, source="imagefolder", cache_dir=tmp_path / "cache")
    assert data.source == f"imagefolder-tar:{archive.resolve()}"
    assert_matches(data, expected)
    folder = tmp_path / "holder"
    folder.mkdir()
    archive.rename(folder / archive.name)
    data2 = load_cifar10(folder, source="auto", cache_dir=tmp_path / "cache2")
    assert data2.source == f"imagefolder-tar:{(folder / archive.name).resolve()}"
    assert_matches(data2, expected)


def test_grayscale_png_becomes_rgb(tree, tmp_path: Path) -> None:
    root, _ = tree
    gray = np.arange(32 * 32, dtype=np.uint8).reshape(32, 32)
    Image.fromarray(gray, mode="L").save(root / "train" / "apple" / "0000.png")
    data = load_cifar10(root, source="imagefolder", cache_dir=tmp_path / "cache")
    assert all(torch.equal(data.train_x[0, c], torch.from_numpy(gray)) for c in range(3))


def test_cache_hit_skips_decoding_and_is_identical(tree, tmp_path: Path, monkeypatch) -> None:
    root, expected = tree
    cache = tmp_path / "cache"
    first = load_cifar10(root, source="imagefolder", cache_dir=cache)
    files = list(cache.iterdir())
    assert len(files) == 1 and files[0].suffix == ".pt" and first.content_hash[:24] in files[0].name

    def no_decode(*args, **kwargs):
        raise AssertionError("decoded although the cache should have been used")

    monkeypatch.setattr(imagefolder, "_decode_into", no_decode)
    t0 = time.perf_counter()
    second = load_cifar10(root, source="imagefolder", cache_dir=cache)
    assert time.perf_counter() - t0 < 2.0
    assert_matches(second, expected)
    assert second.source == first.source and second.content_hash == first.content_hash


def test_cache_env_default(tree, tmp_path: Path, monkeypatch) -> None:
    root, _ = tree
    monkeypatch.setenv("INITMEM_CACHE", str(tmp_path / "envcache"))
    load_cifar10(root, source="imagefolder")
    assert len(list((tmp_path / "envcache").glob("cifar10-imagefolder-*.pt"))) == 1


def test_folder_cache_key_follows_file_changes(tree, tmp_path: Path) -> None:
    root, expected = tree
    cache = tmp_path / "cache"
    load_cifar10(root, source="imagefolder", cache_dir=cache)
    new = np.full((32, 32, 3), 7, dtype=np.uint8)
    path = root / "train" / "apple" / "0000.png"  # "apple" sorts first: image 0 of the train split
    Image.fromarray(new).save(path)
    data = load_cifar10(root, source="imagefolder", cache_dir=cache)
    assert torch.equal(data.train_x[0], torch.from_numpy(new).permute(2, 0, 1))
    assert torch.equal(data.train_x[1:], expected["train_x"][1:])


@pytest.mark.parametrize("damage", ["truncate", "bad_shape"])
def test_corrupt_cache_is_reported_and_rebuilt(tree, tmp_path: Path, damage: str) -> None:
    root, expected = tree
    cache = tmp_path / "cache"
    load_cifar10(root, source="imagefolder", cache_dir=cache)
    (path,) = cache.iterdir()
    if damage == "truncate":
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    else:
        d = torch.load(path, weights_only=True)
        d["train_x"] = d["train_x"][:, :, :16]
        torch.save(d, path)
    with pytest.warns(UserWarning, match="corrupt.*rebuilding"):
        data = load_cifar10(root, source="imagefolder", cache_dir=cache)
    assert_matches(data, expected)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the rebuilt cache is valid again
        assert_matches(load_cifar10(root, source="imagefolder", cache_dir=cache), expected)
    assert [p.name for p in cache.iterdir()] == [path.name]  # no temp files left behind


def test_truncated_archive_is_dataerror(tree, tmp_path: Path) -> None:
    root, _ = tree
    archive = make_tar(root, tmp_path / "imgs.tar.gz")
    archive.write_bytes(archive.read_bytes()[: archive.stat().st_size // 2])
    with pytest.raises(DataError, match="imgs.tar.gz is corrupt or truncated"):
        load_cifar10(archive, source="imagefolder", cache_dir=tmp_path / "cache")
    garbage = tmp_path / "garbage.tar.gz"
    garbage.write_bytes(b"not a gzip stream" * 100)
    with pytest.raises(DataError, match="garbage.tar.gz is corrupt"):
        load_cifar10(garbage, source="imagefolder", cache_dir=tmp_path / "cache")


def test_wrong_image_size_is_dataerror(tree, tmp_path: Path) -> None:
    root, _ = tree
    Image.fromarray(np.zeros((32, 40, 3), dtype=np.uint8)).save(root / "test" / "fig" / "0001.png")
    with pytest.raises(DataError, match=r"test/fig/0001\.png .* is 40x32"):
        load_cifar10(root, source="imagefolder", cache_dir=tmp_path / "cache")


def test_unreadable_image_is_dataerror(tree, tmp_path: Path) -> None:
    root, _ = tree
    (root / "train" / "date" / "0002.png").write_bytes(b"\x89PNG broken")
    with pytest.raises(DataError, match=r"train/date/0002\.png .* unreadable"):
        load_cifar10(root, source="imagefolder", cache_dir=tmp_path / "cache")


def test_class_mismatch_is_dataerror(tree, tmp_path: Path) -> None:
    root, _ = tree
    (root / "test" / "kiwi").rename(root / "test" / "lime")
    with pytest.raises(DataError, match="differ from test classes"):
        load_cifar10(root, source="imagefolder", cache_dir=tmp_path / "cache")
    for split in ("train", "test"):  # 9 classes on both sides: not CIFAR-10
        for p in (root / split).iterdir():
            if p.name in ("kiwi", "lime"):
                for f in p.iterdir():
                    f.unlink()
                p.rmdir()
    with pytest.raises(DataError, match="9 class folders"):
        load_cifar10(root, source="imagefolder", cache_dir=tmp_path / "cache")


# --------------------------------------------------------------------------------------------------- torchvision
def test_torchvision_layout(tmp_path: Path) -> None:
    train_x, train_y, test_x, test_y = write_batches(tmp_path)
    data = load_cifar10(tmp_path, source="torchvision")
    assert data.source == f"torchvision:{tmp_path / 'cifar-10-batches-py'}"
    assert data.classes == CIFAR10_CLASSES
    assert torch.equal(data.train_x, train_x) and torch.equal(data.train_y, train_y)
    assert torch.equal(data.test_x, test_x) and torch.equal(data.test_y, test_y)
    assert data.train_x.shape == (100, 3, 32, 32) and data.train_y.dtype == torch.int64
    assert load_cifar10(tmp_path).source == data.source  # auto finds it


def test_torchvision_bad_labels_and_missing(tmp_path: Path) -> None:
    write_batches(tmp_path / "a", label_max=12)
    with pytest.raises(DataError, match=r"labels span \[0, 1[0-2]\]"):
        load_cifar10(tmp_path / "a", source="torchvision")
    with pytest.raises(DataError, match=f"{tmp_path / 'b' / 'cifar-10-batches-py'} not found.*download=True"):
        load_cifar10(tmp_path / "b", source="torchvision")
    write_batches(tmp_path / "c")
    (tmp_path / "c" / "cifar-10-batches-py" / "data_batch_3").write_bytes(b"\x80\x04garbage")
    with pytest.raises(DataError, match="data_batch_3 is unreadable"):
        load_cifar10(tmp_path / "c", source="torchvision")


# ---------------------------------------------------------------------------------------------------------- auto
def test_auto_with_nothing_lists_tried_paths(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("INITMEM_DATA", raising=False)
    root = tmp_path / "nothing"
    with pytest.raises(DataError) as info:
        load_cifar10(root)
    msg = str(info.value)
    for tried in (root / "cifar-10-batches-py", root / "train", root / "test", root / "*.tar.gz"):
        assert str(tried) in msg
    assert "synthetic" in msg and "initmem data" in msg and "INITMEM_DATA" in msg and "\n" not in msg
    env = tmp_path / "env"
    env.mkdir()
    monkeypatch.setenv("INITMEM_DATA", str(env))
    with pytest.raises(DataError, match=str(env / "cifar-10-batches-py")):
        load_cifar10(root)


def test_auto_order_and_env(tree, tmp_path: Path, monkeypatch) -> None:
    root, expected = tree
    monkeypatch.setenv("INITMEM_DATA", str(root))
    data = load_cifar10(tmp_path / "nothing", cache_dir=tmp_path / "cache")  # falls through to $INITMEM_DATA
    assert data.source == f"imagefolder:{root.resolve()}"
    assert_matches(data, expected)
    write_batches(root)  # cifar-10-batches-py comes first in the documented order
    assert load_cifar10(root, cache_dir=tmp_path / "cache").source.startswith("torchvision:")
    two = tmp_path / "two"
    two.mkdir()
    for name in ("a.tar.gz", "b.tar.gz"):
        make_tar(root, two / name)
    with pytest.raises(DataError, match="several archives"):
        load_cifar10(two, cache_dir=tmp_path / "cache")


def test_bad_source_is_configerror() -> None:
    with pytest.raises(ConfigError, match="source='cifar'.*'synthetic'"):
        load_cifar10(source="cifar")


# ----------------------------------------------------------------------------------------------------- real data
@pytest.mark.cifar10
def test_real_archive(cifar10_real) -> None:
    data = cifar10_real.data
    assert data.train_x.shape == (50000, 3, 32, 32) and data.test_x.shape == (10000, 3, 32, 32)
    assert data.train_x.dtype == torch.uint8 and data.train_y.dtype == torch.int64
    assert data.classes == CIFAR10_CLASSES
    assert torch.bincount(data.train_y).tolist() == [5000] * 10
    assert torch.bincount(data.test_y).tolist() == [1000] * 10
    t0 = time.perf_counter()
    again = load_cifar10(cifar10_real.archive, cache_dir=cifar10_real.cache_dir)
    reload_s = time.perf_counter() - t0
    print(f"\nCIFAR-10 archive: first load {cifar10_real.decode_s:.1f} s, cached reload {reload_s:.2f} s")
    assert reload_s < 5.0
    assert torch.equal(again.train_x, data.train_x) and torch.equal(again.test_y, data.test_y)


@pytest.mark.cifar10
def test_real_splits(cifar10_real) -> None:
    s = make_splits(cifar10_real.data)
    assert (len(s.train_y), len(s.val_y), len(s.test_y)) == (45000, 5000, 10000)
    assert torch.bincount(s.val_y).tolist() == [500] * 10
    # the well-known CIFAR-10 channel means (JPEG re-encoding moves them by < 0.001)
    assert torch.allclose(s.mean, torch.tensor([0.4914, 0.4822, 0.4465]), atol=3e-3)


# -------------------------------------------------------------------------------------------------------- splits
def positions(x: torch.Tensor, s, raw: torch.Tensor) -> torch.Tensor:
    """Where each normalised image of a split sits in `raw` (uint8): undo the normalisation, match the bytes."""
    u8 = (x * (255 * s.std).view(1, -1, 1, 1) + (255 * s.mean).view(1, -1, 1, 1)).round().to(torch.uint8)
    index = {bytes(r.numpy().tobytes()): i for i, r in enumerate(raw)}
    return torch.tensor([index[bytes(r.numpy().tobytes())] for r in u8])


def test_split_stratified_disjoint_and_reproducible(synth: Cifar10) -> None:
    s = make_splits(synth, n_val=200)
    assert torch.bincount(s.val_y).tolist() == [20] * 10
    assert torch.bincount(s.train_y).tolist() == [180] * 10
    tr, va = positions(s.train_x, s, synth.train_x), positions(s.val_x, s, synth.train_x)
    assert sorted(torch.cat([tr, va]).tolist()) == list(range(2000))  # a partition of the 2,000 images
    assert torch.equal(synth.train_y[tr], s.train_y) and torch.equal(synth.train_y[va], s.val_y)
    assert torch.equal(positions(s.test_x, s, synth.test_x), torch.arange(500))
    same = make_splits(synth, n_val=200)
    for k in ("train_x", "train_y", "val_x", "val_y", "test_x", "mean", "std"):
        assert torch.equal(getattr(same, k), getattr(s, k)), k
    other = make_splits(synth, n_val=200, split_seed=1)
    assert not torch.equal(positions(other.val_x, other, synth.train_x), va)


def test_normalisation_uses_train_statistics(synth: Cifar10) -> None:
    s = make_splits(synth, n_val=200)
    assert s.train_x.dtype == torch.float32 and s.mean.shape == s.std.shape == (3,)
    assert torch.allclose(s.train_x.mean(dim=(0, 2, 3)), torch.zeros(3), atol=1e-4)
    assert torch.allclose(s.train_x.std(dim=(0, 2, 3), correction=0), torch.ones(3), atol=1e-4)
    raw = synth.train_x[positions(s.val_x, s, synth.train_x)].double() / 255  # val: the *train* split's stats
    m, sd = s.mean.double().view(1, -1, 1, 1), s.std.double().view(1, -1, 1, 1)
    assert torch.allclose(s.val_x.double(), (raw - m) / sd, atol=1e-5)
    tr = synth.train_x[positions(s.train_x, s, synth.train_x)].double() / 255
    assert torch.allclose(s.mean.double(), tr.mean(dim=(0, 2, 3)), atol=1e-6)
    mean, std = channel_stats(synth.train_x)
    assert torch.allclose(std.double(), (synth.train_x.double() / 255).std(dim=(0, 2, 3), correction=0), atol=1e-6)
    assert torch.allclose(mean.double(), (synth.train_x.double() / 255).mean(dim=(0, 2, 3)), atol=1e-6)


def test_subsets_are_stratified_and_nested(synth: Cifar10) -> None:
    full = make_splits(synth, n_val=200)
    s = make_splits(synth, n_val=200, n_train=500, n_test=100, train_eval_size=100)
    assert torch.bincount(s.train_y).tolist() == [50] * 10
    assert torch.bincount(s.test_y).tolist() == [10] * 10
    va = positions(s.val_x, s, synth.train_x)  # the validation split does not depend on n_train
    assert torch.equal(va, positions(full.val_x, full, synth.train_x))
    sub = set(positions(s.train_x, s, synth.train_x).tolist())
    assert sub <= set(positions(full.train_x, full, synth.train_x).tolist())
    idx = s.train_eval_idx
    assert idx is not None and len(idx) == 100 and torch.equal(idx, idx.unique())
    assert 0 <= int(idx.min()) and int(idx.max()) < 500
    assert torch.bincount(s.train_y[idx]).tolist() == [10] * 10
    odd = make_splits(synth, n_val=205)  # not divisible: exact total, per-class sizes differ by at most one
    counts = torch.bincount(odd.val_y)
    assert counts.sum() == 205 and set(counts.tolist()) == {20, 21}


@pytest.mark.parametrize("kwargs, match", [
    ({"n_val": 0}, r"n_val=0 .*\[10, 1990\]"),
    ({"n_val": 5}, r"n_val=5 .*\[10, 1990\]"),
    ({"n_val": 1995}, r"n_val=1995 .*1990"),
    ({"n_val": True}, r"n_val=True"),
    ({"n_val": 200, "n_train": 1801}, r"n_train=1801 .*\[10, 1800\].*n_val \+ n_train <= 2000"),
    ({"n_val": 200, "n_test": 501}, r"n_test=501 .*\[10, 500\]"),
    ({"n_val": 200, "n_test": 9}, r"n_test=9 "),
    ({"n_val": 200, "n_train": 100, "train_eval_size": 101}, r"train_eval_size=101 .*\[10, 100\]"),
    ({"n_val": 200, "split_seed": 1.5}, r"split_seed=1.5"),
    ({"n_val": 200, "device": "gpu0"}, r"device='gpu0'"),
])
def test_split_sizes_validated(synth: Cifar10, kwargs: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        make_splits(synth, **kwargs)


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is available here")
def test_cuda_device_without_cuda_is_configerror(synth: Cifar10) -> None:
    with pytest.raises(ConfigError, match="device='cuda' is invalid here: CUDA is not available"):
        make_splits(synth, n_val=200, device="cuda")


def test_stratified_indices_proportional() -> None:
    labels = torch.tensor([0] * 60 + [1] * 30 + [2] * 10)
    labels = labels[torch.randperm(100, generator=torch.Generator().manual_seed(0))]
    idx = stratified_indices(labels, 10, torch.Generator().manual_seed(3))
    assert torch.bincount(labels[idx], minlength=3).tolist() == [6, 3, 1]
    assert torch.equal(idx, idx.unique())  # sorted, no repeats
    assert torch.equal(idx, stratified_indices(labels, 10, torch.Generator().manual_seed(3)))
    assert not torch.equal(idx, stratified_indices(labels, 10, torch.Generator().manual_seed(4)))
    # quotas 3, 1.5, 0.5: floors 3, 1, 0; the one left over goes to the lowest class of the tied fractions
    assert torch.bincount(labels[stratified_indices(labels, 5, None)], minlength=3).tolist() == [3, 2, 0]
    with pytest.raises(ConfigError, match=r"n=2 .*\[3, 100\]"):
        stratified_indices(labels, 2, None)


# ---------------------------------------------------------------------------------------------------- augmentation
def candidates(x: torch.Tensor, pad: int) -> dict[tuple[int, int, bool], torch.Tensor]:
    xp = F.pad(x, (pad,) * 4)
    h, w = x.shape[-2:]
    out = {}
    for dy in range(2 * pad + 1):
        for dx in range(2 * pad + 1):
            crop = xp[..., dy : dy + h, dx : dx + w]
            out[dy - pad, dx - pad, False] = crop
            out[dy - pad, dx - pad, True] = torch.flip(crop, dims=(-1,))
    return out


def which(out: torch.Tensor, x: torch.Tensor, pad: int) -> list[tuple[int, int, bool]]:
    """For each image, the (shift y, shift x, flipped) whose crop of the zero-padded input equals the output."""
    cands = candidates(x, pad)
    found = []
    for i in range(len(x)):
        hits = [k for k, c in cands.items() if torch.equal(out[i], c[i])]
        assert len(hits) == 1, f"image {i}: {len(hits)} matching crops"
        found.append(hits[0])
    return found


def test_augment_is_a_crop_within_pad_and_a_true_flip() -> None:
    x = torch.randn(64, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    out = augment_batch(x, torch.Generator().manual_seed(1))
    assert out.shape == x.shape and out.dtype == x.dtype
    found = which(out, x, 4)  # every image is exactly one crop with |shift| <= 4, flipped or not
    assert {f for _, _, f in found} == {True, False}
    assert len({(dy, dx) for dy, dx, _ in found}) > 10
    no_flip = which(augment_batch(x, torch.Generator().manual_seed(1), flip=False), x, 4)
    assert not any(f for _, _, f in no_flip)
    flip_only = which(augment_batch(x, torch.Generator().manual_seed(1), crop_pad=0), x, 0)
    assert {f for _, _, f in flip_only} == {True, False}


def test_augment_deterministic_given_generator() -> None:
    x = torch.randn(16, 3, 32, 32)
    a = augment_batch(x, torch.Generator().manual_seed(5))
    assert torch.equal(a, augment_batch(x, torch.Generator().manual_seed(5)))
    assert not torch.equal(a, augment_batch(x, torch.Generator().manual_seed(6)))
    assert augment_batch(x, None).shape == x.shape
    with pytest.raises(ConfigError, match="crop_pad=-1"):
        augment_batch(x, None, crop_pad=-1)


# --------------------------------------------------------------------------------------------------------- batches
def test_batches_cover_every_index_once() -> None:
    got = list(batches(103, 10, torch.Generator().manual_seed(0)))
    assert [len(b) for b in got] == [10] * 10 + [3] == [10] * (steps_per_epoch(103, 10) - 1) + [3]
    assert sorted(torch.cat(got).tolist()) == list(range(103))
    assert not torch.equal(torch.cat(got), torch.arange(103))  # shuffled
    same = torch.cat(list(batches(103, 10, torch.Generator().manual_seed(0))))
    assert torch.equal(same, torch.cat(got))
    assert not torch.equal(torch.cat(list(batches(103, 10, torch.Generator().manual_seed(1)))), same)
    dropped = list(batches(103, 10, torch.Generator().manual_seed(0), drop_last=True))
    assert len(dropped) == steps_per_epoch(103, 10, drop_last=True) == 10
    assert len(set(torch.cat(dropped).tolist())) == 100
    with pytest.raises(ConfigError, match="batch_size=0"):
        batches(103, 0, None)
