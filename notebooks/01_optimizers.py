# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     notebook_metadata_filter: -jupytext.text_representation.jupytext_version
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 01 — Optimisers: does SGD remember σ_w, and do adaptive methods forget it?
#
# Tests [findings 1](../docs/study.md#finding-1-sgd-remembers) and [2](../docs/study.md#finding-2-adaptive-methods-forget) (and the clock side of [7](../docs/study.md#finding-7-clocks-not-epochs)). ResNet-9 at batch size 128 is trained at
# every `sigma_w` of the grid, once per `optimizer` (`sgd`, `sgd_momentum`, `adam`, `adamw`, `muon`, each at its
# default (docs/study.md) `lr`, `momentum` and `weight_decay`); everything else is held fixed. For one optimiser (one sweep
# point) the **spread** is the best minus the worst test accuracy across `sigma_w`, each read at the epoch with the
# lowest validation loss. The paper reports 26.5 pp for low-lr SGD (every run interpolating) and about 4 pp for
# Muon; the final weight norm should stay coupled to the initial one under SGD (`norm_ratio` varies with `sigma_w`)
# and converge to a common scale under the adaptive methods.
#
# The parameters cell holds what this section varies, with seconds-long smoke defaults; any other TrainConfig
# field can be added to it or given with `-p` (README, *Change a parameter and re-run*). `params/01_optimizers.yaml`
# holds the `smoke`, `cpu` and `paper` profiles.

# %% tags=["parameters"]
# where and what to sweep (notebook-level)
results_dir = "results/adhoc"  # runs go to <results_dir>/<section>/<run_id>/
section = "01_optimizers"
sigma_ws = [0.1, 1.0, 2.5]  # the init scales the spread is taken across
seeds = [0]
population = True  # train the missing sigma_w x seed runs as one population (False: one by one)
progress = True
# what this section varies: the optimiser, at its default hyper-parameters (docs/study.md) (None: the optimiser's default)
optimizer = "sgd"  # sgd | sgd_momentum | adam | adamw | muon
lr = None
momentum = None
weight_decay = None

# %%
import initmem

runs = initmem.run_point(initmem.checked_parameters(globals()))  # a misspelt or mistyped -p is refused here, before training

# %%
initmem.show_point(runs)  # per sigma_w, the point's figure, per run, and its numbers


# %% [markdown]
# ## What we found
#
# This point's spread, then what the committed study found for this section, computed from its runs in
# `results/cpu_w025` (the 5-seed grid, this section's headline set) (`initmem.what_we_found`), with the verdict and what this scale cannot
# show from [docs/findings.md](../docs/findings.md).

# %%
initmem.what_we_found(section, runs)
