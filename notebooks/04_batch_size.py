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
# # 04 — Batch size: do larger batches slow forgetting?
#
# Tests [finding 5](../docs/study.md#finding-5-batch-size) (and [7](../docs/study.md#finding-7-clocks-not-epochs)).
# SGD and Adam (`optimizer`, at its default `lr`) at several `batch_size`s, each at every `sigma_w`, for the same
# epochs: a larger batch takes fewer steps and a smaller `T_SGD = (1/b) Σ η²` ([clocks](../docs/study.md#clocks)),
# so SGD's spread across `sigma_w` should grow with b; Adam runs on `T_adapt = Σ η` and should stay near a small one.
#
# The parameters cell holds seconds-long smoke defaults; any TrainConfig field can be added or given with `-p`
# ([docs/usage.md](../docs/usage.md#using-jupyterlab)); `params/04_batch_size.yaml` holds the profiles.

# %% tags=["parameters"]
# where and what to sweep (notebook-level)
results_dir = "results/adhoc"  # runs go to <results_dir>/<section>/<run_id>/
section = "04_batch_size"
sigma_ws = [0.1, 1.0, 2.5]  # the init scales the spread is taken across
seeds = [0]
population = True  # train the missing sigma_w x seed runs as one population (False: one by one)
progress = True
# what this section varies: the batch size, for SGD and Adam at their default learning rates
batch_size = 128
optimizer = "sgd"  # sgd | adam
lr = None  # None: the optimiser's default (docs/study.md)

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
