"""benchmarks.bench_train's plain loop trains on what a user's loop would see: a seeded random sample of the
training images, not the first n of a source stored class by class (whose one-class batches drive the loss to 0 and
the gradients into denormals, timing a loop no user runs); and the optimiser benchmark of
docs/experiments/performance/ still runs."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import torch

from benchmarks import bench_train
from initmem.data.splits import Cifar10, make_synthetic

REPO = Path(__file__).resolve().parents[1]


def test_the_loop_samples_every_class_of_a_class_sorted_source():
    d = make_synthetic(1000, 20)
    order = torch.argsort(d.train_y, stable=True)  # as an image folder stores them: class by class
    sorted_d = Cifar10(d.train_x[order], d.train_y[order], d.test_x, d.test_y, d.classes, "sorted")
    assert len(set(sorted_d.train_y[:96].tolist())) == 1  # the first 96 images are one class
    x, y = bench_train.loop_sample(sorted_d, 96, seed=0)
    assert x.shape == (96, 3, 32, 32) and len(set(y.tolist())) == 10
    # each image keeps its label, and the sample is the same for the same seed and different for another
    for i in range(0, 96, 17):
        j = int((sorted_d.train_x == x[i]).flatten(1).all(1).nonzero()[0])
        assert sorted_d.train_y[j] == y[i]
    assert torch.equal(bench_train.loop_sample(sorted_d, 96, seed=0)[1], y)
    assert not torch.equal(bench_train.loop_sample(sorted_d, 96, seed=1)[1], y)


def _record(name: str):
    """A script of docs/experiments/performance/ as a module (its main() not run)."""
    spec = importlib.util.spec_from_file_location(name, REPO / "docs" / "experiments" / "performance" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_optimizer_benchmark_times_every_optimizer_against_sgd(capsys, tmp_path):
    """bench_optimizers.py (docs/experiments/performance/) runs on synthetic images where no CIFAR-10 is, times each
    optimiser's step and Muon's Newton-Schulz, and ends with the ratios docs/performance.md quotes."""
    bench = _record("bench_optimizers")
    bench.main(["--width", "0.125", "--batch-size", "8", "--steps", "2", "--repeats", "1", "--threads", "1",
                "--data-root", str(tmp_path / "none")])
    out = capsys.readouterr().out
    assert "using synthetic images" in out
    for name in ("sgd", "sgd_momentum", "adam", "adamw", "muon"):
        assert f"repeat 1: {name:<13}" in out
    ratios = dict(kv.split("=") for kv in out.strip().splitlines()[-1].split())
    assert "repeat 1: muon float32" in out
    assert set(ratios) == {"ratio_muon_vs_sgd", "ratio_muon_fp32_vs_sgd", "ratio_ns_bf16_vs_fp32"}
    assert all(float(v) > 0 for v in ratios.values())
