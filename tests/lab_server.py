"""Start and stop a throwaway JupyterLab server for tests.

The server runs from this interpreter's environment (its kernelspec `python3` and the jupytext server extension
come from there) but keeps every piece of user state — config, data, runtime files, Lab settings, workspaces — in
a temporary folder, so a test neither reads nor changes the user's Jupyter setup. Lab settings written there make
`.py` files open as notebooks (jupytext's "Jupytext Notebook" viewer), render every cell (no windowing, so all
cells are in the DOM), start the kernel without asking, and turn off news and update checks (no network here).
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

LAB_SETTINGS = {
    "@jupyterlab/docmanager-extension/plugin": {"defaultViewers": {"python": "Jupytext Notebook"}},
    "@jupyterlab/notebook-extension/tracker": {"windowingMode": "none", "autoStartDefaultKernel": True},
    "@jupyterlab/apputils-extension/notification": {"fetchNews": "false", "checkForUpdates": False},
}


DOCMANAGER = "@jupyterlab/docmanager-extension/plugin"
VENV_OVERRIDES = Path(sys.prefix) / "share" / "jupyter" / "lab" / "settings" / "overrides.json"


def venv_overrides_set() -> bool:
    """True when this environment's JupyterLab opens .py files as notebooks by `make venv`'s overrides.json."""
    try:
        viewers = json.loads(VENV_OVERRIDES.read_text())["@jupyterlab/docmanager-extension:plugin"]["defaultViewers"]
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return viewers.get("python") == "Jupytext Notebook"


@dataclass
class LabServer:
    """A running server: `url` is its base (no token), `proc` its process, `log` its combined output."""

    url: str
    token: str
    root: Path
    proc: subprocess.Popen
    log: Path

    def api(self, path: str) -> dict:
        """GET `<url>/api/<path>` as JSON, authenticated with the token."""
        req = urllib.request.Request(f"{self.url}/api/{path}", headers={"Authorization": f"token {self.token}"})
        with urllib.request.urlopen(req, timeout=30) as resp:
            return json.load(resp)

    def lab_url(self, path: str = "") -> str:
        return f"{self.url}/lab/tree/{path}?token={self.token}" if path else f"{self.url}/lab?token={self.token}"

    def log_tail(self, n: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])

    def stop(self, timeout: float = 15) -> None:
        """SIGTERM (the server shuts its kernels down), then SIGKILL to its whole process group if it lingers."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
        try:  # kernels it could not shut down share its process group (start_new_session below)
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait(timeout)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_lab(root: Path, state: Path, timeout: float = 90) -> LabServer:
    """Start `jupyter lab` serving `root`, with all user state under `state`; return once `/api/status` answers.

    The kernel gets the repository on PYTHONPATH, so notebooks import the working tree's initmem."""
    dirs = {k: state / k.lower() for k in ("JUPYTER_CONFIG_DIR", "JUPYTER_DATA_DIR", "JUPYTER_RUNTIME_DIR")}
    dirs["JUPYTERLAB_SETTINGS_DIR"] = state / "lab-settings"
    dirs["JUPYTERLAB_WORKSPACES_DIR"] = state / "lab-workspaces"
    for d in dirs.values():
        d.mkdir(parents=True, exist_ok=True)
    for plugin, settings in LAB_SETTINGS.items():
        if plugin == DOCMANAGER and venv_overrides_set():  # `make venv`'s overrides.json must do it, as for a user
            continue
        f = dirs["JUPYTERLAB_SETTINGS_DIR"] / f"{plugin}.jupyterlab-settings"
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(json.dumps(settings))
    env = {**os.environ, **{k: str(v) for k, v in dirs.items()}}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.pop("JUPYTER_PATH", None)  # only this environment's kernels and extensions
    token, port = secrets.token_hex(16), free_port()
    cmd = [
        sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
        f"--ServerApp.token={token}", f"--ServerApp.root_dir={root}", "--ServerApp.port_retries=0", "--allow-root",
    ]  # fmt: skip
    log = state / "lab.log"
    with log.open("wb") as f:
        proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
    server = LabServer(f"http://127.0.0.1:{port}", token, root, proc, log)
    deadline = time.monotonic() + timeout
    while True:
        try:
            server.api("status")
            return server
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            server.stop()
            raise RuntimeError(f"jupyter lab did not answer /api/status (exit {proc.returncode}):\n{server.log_tail()}")
        time.sleep(0.25)
