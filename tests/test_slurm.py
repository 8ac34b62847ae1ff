"""The Slurm executor against a real single-node Slurm (with accounting) that the test starts and stops itself.

Needs root and the Debian packages of `.ci/install-slurm.sh`; skips with the reason where they are absent.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import faults
import nbformat
import pytest
from slurm_cluster import SlurmCluster, missing_binaries

from initmem.store.folders import RunFolders
from initmem.study.sweep import load_section, point_configs, run_sweep

pytestmark = pytest.mark.slurm
REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def cluster(request):
    if missing := missing_binaries():
        pytest.skip(f"needs Slurm, munge and MariaDB binaries {missing} (install with .ci/install-slurm.sh)")
    if os.geteuid() != 0:
        pytest.skip("needs root: slurmd runs jobs as their user and munged runs as user munge")
    c = SlurmCluster(cpus=2)
    request.addfinalizer(c.stop)  # every daemon stopped by its PID, also when start-up or a test fails
    try:
        c.start()
    except RuntimeError as exc:
        pytest.fail(f"could not start Slurm: {exc}\n{c.logs()}")
    return c


def test_slurm_sweep_runs_every_point_as_an_array_task(cluster, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SLURM_CONF", cluster.env["SLURM_CONF"])
    # two points that train, and two that fail inside their notebook (imagefolder data from a corrupt archive: no
    # known hash, so the sweep's preflight cannot tell; missing data would stop the sweep before any point)
    (tmp_path / "bad.tar.gz").write_bytes(b"not a gzip file")
    params = faults.mini_project(
        tmp_path, "01_optimizers.py",
        fixed=dict(width=0.0625, epochs=1, batch_size=32, n_train=64, n_val=32, n_test=32, sigma_ws=[0.5, 2.0],
                   data_root=str(tmp_path / "bad.tar.gz"), device="cpu"),
        grid=dict(data=["synthetic", "imagefolder"], optimizer=["sgd", "adam"]))
    out = tmp_path / "results"
    section = load_section(params)
    points = section.points("smoke", out)
    good = [p for p in points if p.grid["data"] == "synthetic"]
    slurm = {"time": 10, "cpus_per_task": 1, "mem_gb": 1}
    report = run_sweep(params, profile="smoke", results=out, executor="slurm", slurm=slurm, progress=False)
    status = {p.point_id: p for p in report.points}
    for p in points:
        assert status[p.point_id].status == ("ran" if p in good else "failed"), status[p.point_id].message
    assert report.exit_code == 1
    failed = [r for r in report.points if r.status == "failed"]
    assert all("DataError" in r.message and "t.py" in r.message for r in failed)
    # the jobs wrote into the same results tree as a local sweep would
    for p in good:
        configs = point_configs(section.effective(p))
        assert len(configs) == 2 and all(RunFolders(out, "t").run(c).is_complete() for c in configs)
        nb = nbformat.read(out / "t" / "notebooks" / f"{p.point_id}.ipynb", as_version=4)
        assert nb.metadata.papermill.parameters["optimizer"] == p.grid["optimizer"]
    folders = list((out / ".submitit").glob("t-*"))
    assert len(folders) == 1 and list(folders[0].glob("*_log.out"))
    assert "submitted 4 Slurm array task(s)" in capsys.readouterr().out
    # accounting saw one array of 4 tasks, each finished (a failed notebook is a completed job with a report);
    # submitit reads the result file, which a task writes a moment before Slurm records it as completed
    deadline = time.monotonic() + 30
    while True:
        acct = subprocess.run(["sacct", "-n", "-X", "-o", "JobID,State", "--parsable2"], capture_output=True,
                              text=True, env={**os.environ, **cluster.env}, check=True).stdout.split()
        if all(line.endswith("|COMPLETED") for line in acct) or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert sorted(acct) == ["1_0|COMPLETED", "1_1|COMPLETED", "1_2|COMPLETED", "1_3|COMPLETED"], acct
    # a second sweep submits only the failed points again, nothing for the complete ones
    again = run_sweep(params, profile="smoke", results=out, executor="slurm", slurm=slurm, progress=False,
                      dry_run=True)
    assert sorted(r.status for r in again.points) == ["skipped", "skipped", "would-run", "would-run"]
