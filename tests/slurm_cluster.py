"""A real, throw-away, single-node Slurm with job accounting, for tests/test_slurm.py.

Starts munged, mariadbd, slurmdbd, slurmctld and slurmd (in that order) with configs generated in a fresh folder,
on free TCP ports and a private munge socket, so nothing collides with a system Slurm or with another test run.
Every daemon runs in the foreground as our child process and is stopped by its PID, in reverse order.
Accounting (slurmdbd) is not optional: without `sacct`, submitit waits forever on a crashed job.
Needs root (slurmd runs jobs as their user; munged runs as user munge). See TOOLING-FACTS.md, "Slurm".
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

BINARIES = ("munged", "mungekey", "mariadbd", "mariadb-install-db", "mariadb", "slurmdbd", "slurmctld", "slurmd",
            "sbatch", "sacct", "sinfo")


def missing_binaries() -> list[str]:
    return [b for b in BINARIES if shutil.which(b) is None]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(what: str, check, timeout: float = 30.0, procs=()) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for name, p in procs:
            if p.poll() is not None:
                raise RuntimeError(f"{name} exited with {p.returncode} while waiting for {what}")
        if check():
            return
        time.sleep(0.2)
    raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}")


class SlurmCluster:
    """`with SlurmCluster() as c:` — `c.env` holds SLURM_CONF for clients (sbatch, sacct, submitit)."""

    def __init__(self, cpus: int = 2, real_memory_mb: int | None = None):
        self.host = socket.gethostname().split(".")[0]
        self.cpus, self.real_memory_mb = cpus, real_memory_mb
        self.dir = Path(tempfile.mkdtemp(prefix="initmem-slurm-"))
        self.dir.chmod(0o755)  # munged (user munge) must reach its own subfolder
        self.procs: list[tuple[str, subprocess.Popen]] = []
        self.env: dict[str, str] = {}

    # -- lifecycle ------------------------------------------------------------------------------------------
    def __enter__(self) -> SlurmCluster:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def _spawn(self, name: str, argv: list[str], **kw) -> subprocess.Popen:
        log = open(self.dir / f"{name}.out", "wb")
        p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             start_new_session=True, **kw)
        log.close()
        self.procs.append((name, p))
        return p

    def _run(self, argv: list[str], **kw) -> subprocess.CompletedProcess:
        return subprocess.run(argv, capture_output=True, text=True, env={**os.environ, **self.env}, **kw)

    def start(self) -> None:
        d = self.dir
        self._start_munge(d)
        self._start_mariadb(d)
        self._write_configs(d)
        env = {**os.environ, **self.env}  # slurmdbd finds slurmdbd.conf beside $SLURM_CONF
        self._spawn("slurmdbd", ["slurmdbd", "-D"], env=env)
        _wait("slurmdbd", lambda: self._port_open(self.dbd_port), procs=self.procs)
        self._spawn("slurmctld", ["slurmctld", "-D", "-i", "-f", str(d / "slurm.conf")], env=env)
        _wait("slurmctld", lambda: self._run(["scontrol", "ping"]).stdout.count("UP") > 0, procs=self.procs)
        self._spawn("slurmd", ["slurmd", "-D", "-f", str(d / "slurm.conf")], env=env)
        _wait("the node to be idle", lambda: self._run(["sinfo", "-h", "-o", "%t"]).stdout.strip() == "idle",
              timeout=60, procs=self.procs)

    def _steps(self) -> list[int]:
        """PIDs of slurmstepd processes of *this* cluster (they carry our SLURM_CONF): slurmd daemonises them, so
        they outlive slurmd when it stops while a job is still finishing."""
        conf, pids = f"SLURM_CONF={self.dir / 'slurm.conf'}".encode(), []
        for proc in Path("/proc").glob("[0-9]*"):
            try:
                if proc.joinpath("comm").read_text().strip() == "slurmstepd" and \
                        conf in proc.joinpath("environ").read_bytes().split(b"\0"):
                    pids.append(int(proc.name))
            except OSError:
                continue
        return pids

    def stop(self) -> None:
        """Let running jobs finish (briefly), stop every daemon we started by its PID (newest first) and any job
        step left behind by its PID, then remove the folder."""
        if self.procs and self.procs[-1][0] == "slurmd" and self.procs[-1][1].poll() is None:
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline and (self._run(["squeue", "-h"]).stdout.strip() or self._steps()):
                time.sleep(0.5)
        for _name, p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(timeout=5)
        self.procs.clear()
        for pid in self._steps():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        shutil.rmtree(self.dir, ignore_errors=True)

    def logs(self) -> str:
        """The tail of every daemon's log, for a failing test's message."""
        out = []
        for f in sorted(self.dir.glob("*.out")) + sorted(self.dir.glob("*.log")):
            out.append(f"--- {f.name}\n" + "\n".join(f.read_text(errors="replace").splitlines()[-15:]))
        return "\n".join(out)

    @staticmethod
    def _port_open(port: int) -> bool:
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", port)) == 0

    # -- daemons --------------------------------------------------------------------------------------------
    def _start_munge(self, d: Path) -> None:
        m = d / "munge"
        m.mkdir()
        m.chmod(0o711)  # munged insists that clients can reach the socket, and that only it can write here
        subprocess.run(["mungekey", "--create", "--keyfile", str(m / "munge.key")], check=True, capture_output=True)
        shutil.chown(m, "munge", "munge")
        shutil.chown(m / "munge.key", "munge", "munge")
        self.munge_socket = m / "munge.socket"
        # munged refuses to run as root; started as user munge directly (no runuser in between), so the PID we
        # hold is munged's own and stopping it leaves no orphan
        self._spawn("munged", ["munged", "-F", f"--socket={self.munge_socket}", f"--key-file={m / 'munge.key'}",
                               f"--pid-file={m / 'munged.pid'}", f"--log-file={m / 'munged.log'}",
                               f"--seed-file={m / 'munged.seed'}"], user="munge", group="munge", extra_groups=[])
        _wait("munged", lambda: self.munge_socket.exists(), procs=self.procs)

    def _start_mariadb(self, d: Path) -> None:
        db = d / "mysql"
        self.db_socket, self.db_port = d / "mysqld.sock", _free_port()
        r = subprocess.run(["mariadb-install-db", f"--datadir={db}", "--user=root", "--skip-test-db",
                            "--auth-root-authentication-method=normal"], capture_output=True, text=True)
        if r.returncode:
            raise RuntimeError(f"mariadb-install-db failed: {r.stderr[-2000:]}")
        self._spawn("mariadbd", ["mariadbd", "--no-defaults", f"--datadir={db}", f"--socket={self.db_socket}",
                                 f"--port={self.db_port}", "--bind-address=127.0.0.1", "--user=root",
                                 f"--pid-file={d / 'mysqld.pid'}", "--innodb-buffer-pool-size=32M",
                                 "--skip-name-resolve"])
        _wait("mariadbd", lambda: self.db_socket.exists() and self._port_open(self.db_port), procs=self.procs)
        sql = ("CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY 'slurm';"
               "GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1'; FLUSH PRIVILEGES;")
        r = subprocess.run(["mariadb", "--no-defaults", f"--socket={self.db_socket}", "-uroot", "-e", sql],
                           capture_output=True, text=True)
        if r.returncode:
            raise RuntimeError(f"creating the slurm database user failed: {r.stderr}")

    def _write_configs(self, d: Path) -> None:
        self.dbd_port, ctld_port, slurmd_port = _free_port(), _free_port(), _free_port()
        for sub in ("state", "spool"):
            (d / sub).mkdir()
        auth = f"AuthType=auth/munge\nAuthInfo=socket={self.munge_socket}\n"
        dbd = d / "slurmdbd.conf"
        dbd.write_text(
            auth + f"DbdAddr=127.0.0.1\nDbdHost={self.host}\nDbdPort={self.dbd_port}\nSlurmUser=root\n"
            f"PidFile={d / 'slurmdbd.pid'}\nLogFile={d / 'slurmdbd.log'}\nDebugLevel=info\n"
            "StorageType=accounting_storage/mysql\nStorageHost=127.0.0.1\n"
            f"StoragePort={self.db_port}\nStorageUser=slurm\nStoragePass=slurm\nStorageLoc=slurm_acct_db\n")
        dbd.chmod(0o600)  # slurmdbd refuses a config others can read (it holds the DB password)
        mem = self.real_memory_mb or max(1024, int(self._node_memory() * 0.8))
        (d / "slurm.conf").write_text(
            auth + f"ClusterName=initmemtest\nSlurmctldHost={self.host}(127.0.0.1)\n"
            f"SlurmctldPort={ctld_port}\nSlurmdPort={slurmd_port}\nSlurmUser=root\nSlurmdUser=root\n"
            f"StateSaveLocation={d / 'state'}\nSlurmdSpoolDir={d / 'spool'}\n"
            f"SlurmctldPidFile={d / 'slurmctld.pid'}\nSlurmdPidFile={d / 'slurmd.pid'}\n"
            f"SlurmctldLogFile={d / 'slurmctld.log'}\nSlurmdLogFile={d / 'slurmd.log'}\n"
            "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\nJobAcctGatherType=jobacct_gather/none\n"
            "SelectType=select/cons_tres\nSelectTypeParameters=CR_Core_Memory\nDefMemPerCPU=1000\n"
            f"AccountingStorageType=accounting_storage/slurmdbd\nAccountingStorageHost=127.0.0.1\n"
            f"AccountingStoragePort={self.dbd_port}\nAccountingStoragePass={self.munge_socket}\n"  # munge socket
            "MpiDefault=none\nMailProg=/bin/true\nReturnToService=2\n"
            "SchedulerType=sched/backfill\nMinJobAge=300\nInactiveLimit=0\nKillWait=5\n"
            f"NodeName={self.host} NodeAddr=127.0.0.1 CPUs={self.cpus} RealMemory={mem} State=UNKNOWN\n"
            f"PartitionName=debug Nodes={self.host} Default=YES MaxTime=INFINITE State=UP\n")
        self.env = {"SLURM_CONF": str(d / "slurm.conf")}

    @staticmethod
    def _node_memory() -> int:
        out = subprocess.run(["slurmd", "-C"], capture_output=True, text=True).stdout
        return int(next(w.split("=")[1] for w in out.split() if w.startswith("RealMemory=")))
