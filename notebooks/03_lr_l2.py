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
# # 03 — Learning rate and L2: do they make SGD forget?
#
# Tests [finding 4](../docs/study.md#finding-4-regularisation-and-learning-rate-make-sgd-forget) (and
# [7](../docs/study.md#finding-7-clocks-not-epochs)). Plain SGD (`optimizer`) over a grid of `lr` × coupled L2
# (`weight_decay`), each point at every `sigma_w`. A larger lr raises `T_SGD`; L2 adds `T_L2 = λ Σ η`, which shrinks
# ‖W‖ towards a common scale ([clocks](../docs/study.md#clocks)). The paper: L2 at 1e-2 brings the spread across
# `sigma_w` to nearly zero, and a larger learning rate also erases the memory.
#
# The parameters cell holds seconds-long smoke defaults; any TrainConfig field can be added or given with `-p`
# ([docs/usage.md](../docs/usage.md#using-jupyterlab)); `params/03_lr_l2.yaml` holds the profiles.

# %% tags=["parameters"]
# where and what to sweep (notebook-level)
results_dir = "results/adhoc"  # runs go to <results_dir>/<section>/<run_id>/
section = "03_lr_l2"
sigma_ws = [0.1, 1.0, 2.5]  # the init scales the spread is taken across
seeds = [0]
population = True  # train the missing sigma_w x seed runs as one population (False: one by one)
progress = True
# what this section varies: plain SGD's learning rate and coupled L2
lr = 0.01
weight_decay = 0.0  # coupled L2 (added to the gradient)
optimizer = "sgd"

# %%
import initmem

runs = initmem.run_point(initmem.checked_parameters(globals()))  # a misspelt or mistyped -p is refused here, before training

# %%
initmem.show_point(runs)  # per sigma_w, the point's figure, per run, and its numbers


# %% [markdown]
# ## What we found
#
# This point's spread, then what the committed study found for this section, computed from its runs in
# `results/cpu` (this section's headline set) (`initmem.what_we_found`), with the verdict and what this scale cannot
# show from [docs/findings.md](../docs/findings.md).

# %%
initmem.what_we_found(section, runs)
