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
# Tests [finding 6](../docs/study.md#finding-6-depth). ResNet-9 and He et al.'s CIFAR ResNets (`arch`) trained with
# SGD and with Adam (`optimizer`) at every `sigma_w`. Deep networks should fail differently: at large `sigma_w` runs
# often never reach 99.5 % training accuracy rather than interpolating to a worse solution, so beside the spread the
# notebook records which runs interpolate.
#
# The parameters cell holds seconds-long smoke defaults (ResNet-20 at `width` 0.25 stands in for the deep ones); any
# TrainConfig field can be added or given with `-p` ([docs/usage.md](../docs/usage.md#using-jupyterlab));
# `params/05_depth.yaml` holds the profiles.

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
