#!/usr/bin/env bash
# Headless Chromium for the JupyterLab end-to-end test (tests/test_jupyterlab.py, marker `browser`).
# Debian's own build: Playwright drives it through executable_path, since Playwright's browser download cannot work
# offline. fonts-dejavu-core gives the screenshots real glyphs. Idempotent; needs root; skipped quietly otherwise.
set -euo pipefail
[ "$(id -u)" = 0 ] || { echo "install-browser: not root, skipping (the browser test will skip)"; exit 0; }
need=()
for pkg in chromium fonts-dejavu-core; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need+=("$pkg")
done
[ ${#need[@]} = 0 ] && { echo "install-browser: chromium already installed"; exit 0; }
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
echo "install-browser: installed ${need[*]}"
