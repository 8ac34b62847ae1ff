"""Shared fixtures. Keep small: fixtures used by one test file live in that file."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
NO_ARCHIVE = ("real CIFAR-10 not found: `initmem data --from <cifar10-jpeg.tar.gz>` puts it into data/ (or set "
              "INITMEM_TEST_ARCHIVE)")


# The slowest test files first (seconds in a CI run, docs/experiments/performance/README.md "CI time"). `make test`
# runs pytest-xdist's loadfile with --no-loadscope-reorder, which hands files to its two workers in collection order;
# by default it orders them by their number of tests, so a file of one 125 s test could start last while the other
# worker idled. Heaviest first, the many short files then fill both workers' ends (longest-processing-time first).
# how docs/findings.md and README.md name each optimiser in prose -> its `optimizer` value in the runs
PROSE_NAMES = {"SGD": "sgd", "SGD+momentum": "sgd_momentum", "Adam": "adam", "AdamW": "adamw", "Muon": "muon"}
SLOWEST = ("test_figures.py", "test_device_check.py", "test_figures_clean.py", "test_checkpoint.py",
           "test_bad_input.py", "test_loud_failures.py", "test_slurm.py", "test_sweep.py", "test_jupyterlab.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Collect the `SLOWEST` files first, in that order; the others keep theirs (a stable sort)."""
    rank = {name: i for i, name in enumerate(SLOWEST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(SLOWEST)))


def cifar10_archive_path() -> Path | None:
    """The real CIFAR-10 JPEG archive where a user installs it: the repository's `data/cifar10-jpeg.tar.gz` (what
    `initmem data` writes), else `$INITMEM_TEST_ARCHIVE`. Every real-data test finds it here."""
    from initmem.data.fetch import DATA_FOLDER, JPEG_ARCHIVE

    for p in (DATA_FOLDER / JPEG_ARCHIVE, os.environ.get("INITMEM_TEST_ARCHIVE")):
        if p and Path(p).is_file():
            return Path(p)
    return None


@dataclass
class RealCifar10:
    data: object  # initmem.data.splits.Cifar10
    archive: Path
    cache_dir: Path
    decode_s: float  # first load: read the archive, decode 60,000 JPEGs, write the cache


@pytest.fixture(scope="session")
def cifar10_real(tmp_path_factory: pytest.TempPathFactory) -> RealCifar10:
    """The real archive decoded once per test session into a session-private cache (skips when absent)."""
    archive = cifar10_archive_path()
    if archive is None:
        pytest.skip(NO_ARCHIVE)
    from initmem.data.splits import load_cifar10

    cache = tmp_path_factory.mktemp("initmem-cache")
    t0 = time.perf_counter()
    data = load_cifar10(archive, source="imagefolder", cache_dir=cache)
    return RealCifar10(data, archive, cache, time.perf_counter() - t0)


@pytest.fixture(scope="module")
def one_torch_thread():
    """One torch thread for a module: on 2 shared cores it is faster than two, and it is what the children of the
    fault-injection tests use."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


SECTIONS = ("01_optimizers", "02_long_training", "03_lr_l2", "04_batch_size", "05_depth")


@dataclass
class SmokeStudy:
    results: Path  # <tmp>/smoke: a results tree named like its profile, as `make smoke` writes it
    reports: dict  # section name -> sweep.SweepReport of the first (real) sweep


@pytest.fixture(scope="session")
def smoke_study(tmp_path_factory: pytest.TempPathFactory) -> SmokeStudy:
    """Every section's smoke profile swept once per test session through the real runner (papermill, one kernel
    per point, two at a time). The notebook, sweep and figure tests all read this one tree. Under pytest-xdist
    (`make test`) the workers share it: the first to ask sweeps it under a file lock, the others wait and read the
    reports it pickled, so the study is swept once per session, not once per worker."""
    import fcntl
    import pickle

    from initmem.study.sweep import run_sweep

    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base  # xdist: <session>/popen-gwN
    done = shared / "smoke-study.pkl"
    with open(shared / "smoke-study.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes (or the worker dies)
        if done.exists():
            return pickle.loads(done.read_bytes())
        root = shared / "smoke-study" / "smoke"
        reports = {name: run_sweep(REPO / "params" / f"{name}.yaml", profile="smoke", results=root, jobs=2,
                                   progress=False) for name in SECTIONS}
        study = SmokeStudy(root, reports)
        done.write_bytes(pickle.dumps(study))
        return study
