#!/usr/bin/env bash
# Install a single-node Slurm with accounting (slurmdbd on MariaDB) for tests/test_slurm.py.
# Idempotent; a no-op where the packages are already there, and skipped quietly where we are not root
# (the test then skips with a reason). The daemons are started and stopped by the test itself.
set -euo pipefail
pkgs=(slurm-wlm munge slurmdbd mariadb-server)
if command -v sbatch >/dev/null && command -v slurmdbd >/dev/null && command -v munged >/dev/null \
    && command -v mariadbd >/dev/null; then
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "install-slurm: not root, skipping (tests marked slurm will skip)" >&2
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
# No systemd here: policy-rc.d stops the packages' postinst scripts from trying to start services.
if [ ! -e /usr/sbin/policy-rc.d ]; then
  printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
  trap 'rm -f /usr/sbin/policy-rc.d' EXIT
fi
apt-get update -qq || true
apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null
