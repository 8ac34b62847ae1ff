#!/usr/bin/env bash
# Prepare the device check (docs/gpu/README.md): lay the CIFAR-10 archive into the git-ignored data/ folder, check
# it, and print the exact command to run on the GPU machine with what it must carry there.
#   benchmarks/gpu_prepare.sh [ARCHIVE]   (make gpu-prepare ARCHIVE=...; without ARCHIVE: data/ must hold it already)
# BUDGET=S overrides the check's --budget-s (default: device_check.py's, sized so that two runs fit 15 minutes).
set -euo pipefail
cd "$(dirname "$0")/.."
DEST=data/cifar10-jpeg.tar.gz
SHA=d1398c01889fdedbaa41b19ed8e77f6bc04894d0f43d201c4d219fda8f0a04a9  # the archive the committed results read
BUDGET=${BUDGET:-$(sed -n 's/^BUDGET_S = \([0-9.]*\).*/\1/p' benchmarks/device_check.py)}  # its default: one source
BUDGET=${BUDGET%.0}
src=${1:-}
if [ -n "$src" ]; then
  if [ ! -f "$src" ]; then
    echo "gpu_prepare.sh: ARCHIVE='$src' is not a file: the CIFAR-10 .tar.gz is accepted" >&2; exit 2
  fi
  mkdir -p data
  [ "$(realpath "$src")" = "$(realpath -m "$DEST")" ] || cp "$src" "$DEST"
fi
if [ ! -f "$DEST" ]; then
  echo "gpu_prepare.sh: $DEST is missing: give the CIFAR-10 archive (benchmarks/gpu_prepare.sh PATH.tar.gz)" >&2
  exit 2
fi
if ! git check-ignore -q "$DEST"; then
  echo "gpu_prepare.sh: $DEST is not git-ignored: data never enters git (.gitignore: data/)" >&2; exit 2
fi
got=$(sha256sum "$DEST" | cut -d' ' -f1)
[ "$got" = "$SHA" ] || echo "gpu_prepare.sh: warning: $DEST has sha256 $got, not the committed results' $SHA" >&2
echo "ready: $DEST ($(du -h "$DEST" | cut -f1), sha256 ${got:0:12}...)"
echo "on the GPU machine, in the repository root (timeout $((BUDGET + 60)) s; \$OUT: the folder that comes back):"
echo "  INITMEM_CACHE=\$(mktemp -d) python3 -m benchmarks.device_check --device cuda --archive $DEST --out \"\$OUT\" --budget-s $BUDGET"
echo "carry: $DEST"
echo "then: copy \$OUT to docs/gpu/<date>-<gpu>/ and commit it (docs/gpu/README.md, 'Feeding the planner')"
