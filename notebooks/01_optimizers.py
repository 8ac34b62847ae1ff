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
# Tests findings [1](../docs/study.md#finding-1-sgd-remembers), [2](../docs/study.md#finding-2-adaptive-methods-forget)
# and the clock side of [7](../docs/study.md#finding-7-clocks-not-epochs). One `optimizer` (`sgd`, `sgd_momentum`,
# `adam`, `adamw` or `muon`, at its default `lr`, `momentum` and `weight_decay`) is trained at every `sigma_w`; the
# **spread** is the best minus the worst test accuracy across `sigma_w`, each at its lowest-validation-loss epoch
# ([metrics](../docs/study.md#metrics)). The paper reports 26.5 pp for low-lr SGD and about 4 pp for Muon.
#
# The parameters cell holds seconds-long smoke defaults; any TrainConfig field can be added or given with `-p`
# ([docs/usage.md](../docs/usage.md#using-jupyterlab)); `params/01_optimizers.yaml` holds the profiles.

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
