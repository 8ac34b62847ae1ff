#!/usr/bin/env bash
# System packages the test suite drives for real: a single-node Slurm (with accounting, which submitit needs)
# and headless Chromium for the JupyterLab test. Idempotent; needs root; skipped quietly otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "not root: skipping system packages (Slurm/Chromium tests will skip)"; exit 0; }
for f in .ci/install-slurm.sh .ci/install-browser.sh; do
    [ -x "$f" ] && "$f"
done
exit 0
