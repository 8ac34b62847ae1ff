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
# # 05 — Depth: do deep ResNets fail to train instead of remembering?
#
# Tests [finding 6](../docs/study.md#finding-6-depth). ResNet-9, ResNet-56 and ResNet-110 (He et al.'s CIFAR ResNets, option-A
# shortcuts; `arch`) trained with SGD and with Adam (`optimizer`) at every `sigma_w`. In the deep networks bad
# forgetting should show differently: at large `sigma_w` runs often fail to interpolate (never reach 99.5 % training
# accuracy) rather than interpolating to a worse solution. Besides the spread, the notebook records which runs fail
# to interpolate.
#
# The parameters cell holds what this section varies, with seconds-long smoke defaults; any other TrainConfig
# field can be added to it or given with `-p` (README, *Change a parameter and re-run*). `params/05_depth.yaml`
# holds the `smoke`, `cpu` and `paper` profiles.
# In the smoke defaults ResNet-20 at `width` 0.25, the shallowest of the family, stands in for the deep ones.

# %% tags=["parameters"]
# where and what to sweep (notebook-level)
results_dir = "results/adhoc"  # runs go to <results_dir>/<section>/<run_id>/
section = "05_depth"
sigma_ws = [0.1, 1.0, 2.5]  # the init scales the spread is taken across
seeds = [0]
population = True  # train the missing sigma_w x seed runs as one population (False: one by one)
progress = True
# what this section varies: the network's depth, for SGD and Adam
arch = "resnet20"  # resnet9 | resnet20 | resnet56 | resnet110
width = 0.25  # channel multiplier (ResNet-20's narrowest layer has 16 channels at width 1)
optimizer = "sgd"  # sgd | adam

# %%
import initmem
from initmem.analysis import point_report

runs = initmem.run_point(initmem.checked_parameters(globals()))  # a misspelt or mistyped -p is refused here, before training

# %%
initmem.show_point(runs)  # per sigma_w, the point's figure, per run, and its numbers

# %% [markdown]
# Which runs interpolate and which fail to (`failed_to_interpolate`): [finding 6](../docs/study.md#finding-6-depth) predicts failures at large
# `sigma_w` in the deep networks.

# %%
point_report.interpolation_table(runs)


# %% [markdown]
# ## What we found
#
# This point's spread, then what the committed study found for this section, computed from its runs in
# `results/cpu` (this section's headline set) (`initmem.what_we_found`), with the verdict and what this scale cannot
# show from [docs/findings.md](../docs/findings.md).

# %%
initmem.what_we_found(section, runs)
