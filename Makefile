# initmem: every target creates .venv on first use and installs the project into it.
PYTHON  ?= $(shell command -v python3.11 2>/dev/null || command -v python3)
VENV    ?= .venv
PY      := $(VENV)/bin/python
INITMEM := $(VENV)/bin/initmem
PROFILE ?= smoke
RESULTS ?= results/cpu
OUT     ?= figures
PYTEST_ARGS ?=
LABSET  := $(VENV)/share/jupyter/lab/settings
OVERRIDES := {"@jupyterlab/docmanager-extension:plugin": {"defaultViewers": {"python": "Jupytext Notebook"}}}

.PHONY: help venv data test lint figures smoke reproduce report bench device-check gpu-prepare gpu-lease lab clean

help:  ## list the targets
	@grep -E '^[a-z-]+:.*##' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

# torch with its CUDA libraries takes about 6.2 GB in .venv: a full disk is named before pip starts, not midway
NEED_GB ?= 7
$(VENV)/.installed: pyproject.toml
	@$(PYTHON) -c "import os, shutil, sys; d = os.path.dirname(os.path.abspath('$(VENV)')); free = shutil.disk_usage(d).free / 2**30; \
	  sys.exit(0 if free >= $(NEED_GB) else f'initmem: .venv needs about $(NEED_GB) GB of disk, {free:.1f} GB is free in {d}: free some space (NEED_GB=0 skips this check)')"
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	@# JupyterLab of this venv opens the jupytext .py notebooks as notebooks (a user's own overrides.json is kept)
	mkdir -p $(LABSET)
	test -f $(LABSET)/overrides.json || echo '$(OVERRIDES)' > $(LABSET)/overrides.json
	touch $@

venv: $(VENV)/.installed  ## create .venv and install initmem with its dev tools

# FROM=path/to/cifar10-jpeg.tar.gz (or a train/+test/ folder, or cifar-10-python.tar.gz); without it: downloaded
data: venv  ## put CIFAR-10 into data/ (FROM=PATH imports a copy, else torchvision downloads it), checked by its hash
	$(INITMEM) data $(if $(FROM),--from $(FROM),--download)

test: venv  ## run the test suite (what CI runs): two pytest-xdist workers, each test file whole on one of them
	$(VENV)/bin/ruff check .
	$(PY) -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder --durations=15 $(PYTEST_ARGS)

lint: venv  ## ruff
	$(VENV)/bin/ruff check .

# Without RESULTS/OUT on the command line: every committed set (initmem.figures.artefacts.COMMITTED_SETS). RESULTS alone
# writes <RESULTS>/figures (a committed tree: its own set); a committed set from another tree is refused.
FIGURES_ARGS = $(if $(filter command line,$(origin RESULTS)),--results $(RESULTS)) \
               $(if $(filter command line,$(origin OUT)),--out $(OUT))
figures: venv  ## regenerate every table and figure from the committed results (or RESULTS=... [OUT=...])
	$(INITMEM) figures $(FIGURES_ARGS)

smoke: venv  ## the whole study at smoke scale (synthetic data, seconds per section), then its figures
	$(MAKE) reproduce PROFILE=smoke

# figures of results/<profile> go to its committed set (cpu: figures/) or beside it (results/<profile>/figures/),
# so they never overwrite the committed figures/ from other results (initmem.figures.artefacts.default_out); or OUT=...
reproduce: venv  ## every section's sweep for PROFILE=smoke|cpu|paper, then the figures
	$(INITMEM) sweep params/*.yaml --profile $(PROFILE) --results results/$(PROFILE)
	$(INITMEM) figures --results results/$(PROFILE) $(if $(filter command line,$(origin OUT)),--out $(OUT))

# Executed notebooks are never committed: `make smoke` makes some in results/smoke, what `make report` reads by default.
REPORT_RESULTS = $(if $(filter command line,$(origin RESULTS)),$(RESULTS),results/smoke)
report: venv  ## export executed notebooks of a results tree to HTML under reports/ (default RESULTS=results/smoke)
	$(INITMEM) report --results $(REPORT_RESULTS) --out reports

lab: venv  ## JupyterLab in the repository root (the .py notebooks open as notebooks; --allow-root only as root)
	$(VENV)/bin/jupyter lab $(if $(filter 0,$(shell id -u)),--allow-root)

bench: venv  ## training-speed benchmark (engine fp32 and bf16 vs DataLoader, population vs separate)
	$(PY) -m benchmarks.bench_train

# No venv needed: a GPU box with only a stock PyTorch runs it with python3 (docs/gpu/README.md).
CHECK_PY := $(if $(wildcard $(PY)),$(PY),python3)
DEVICE_CHECK_ARGS ?= --device cuda
device-check:  ## correctness and speed on this device in <= 285 s (--budget-s; DEVICE_CHECK_ARGS="--device cuda --out DIR")
	$(CHECK_PY) -m benchmarks.device_check $(DEVICE_CHECK_ARGS)

ARCHIVE ?=
gpu-prepare:  ## lay data/cifar10-jpeg.tar.gz (ARCHIVE=path) and print the device check's command and what to carry
	benchmarks/gpu_prepare.sh $(ARCHIVE)

gpu-lease: venv  ## lay the archive (ARCHIVE=path), collect the notebooks' wheels, print the lease's command and carry
	$(PY) -m benchmarks.lease_prepare $(ARCHIVE)

clean:  ## remove caches (keeps .venv and results)
	rm -rf .pytest_cache .ruff_cache reports
