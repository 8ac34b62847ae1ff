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
# # 02 — Long training: does time alone make SGD forget?
#
# Tests [finding 3](../docs/study.md#finding-3-time-alone-is-not-enough) and the epoch side of
# [7](../docs/study.md#finding-7-clocks-not-epochs). Low-lr plain SGD (`optimizer`, `lr`) trains for many `epochs` at
# every `sigma_w` (the `cpu` profile adds Adam for as many steps); the **spread** across `sigma_w` is read as if
# training had stopped at each of the `epoch_marks`. The paper finds it unchanged from 200 to 5,000 epochs while
# `T_SGD = (1/b) Σ η²` stays tiny ([clocks](../docs/study.md#clocks)). Long runs want `checkpoint_every`.
#
# The parameters cell holds seconds-long smoke defaults; any TrainConfig field can be added or given with `-p`
# ([docs/usage.md](../docs/usage.md#using-jupyterlab)); `params/02_long_training.yaml` holds the profiles.

# %% tags=["parameters"]
# where and what to sweep (notebook-level)
results_dir = "results/adhoc"  # runs go to <results_dir>/<section>/<run_id>/
section = "02_long_training"
sigma_ws = [0.1, 1.0, 2.5]  # the init scales the spread is taken across
seeds = [0]
population = True  # train the missing sigma_w x seed runs as one population (False: one by one)
progress = True
# what this section varies: how long low-lr SGD trains, and the epochs the spread is read at
epochs = 3
epoch_marks = [1, 2, 3]  # the spread is reported as if training stopped at each
checkpoint_every = 0  # epochs between checkpoints (0: none); long runs want them: a killed run resumes
optimizer = "sgd"
lr = None  # None: the optimiser's default (docs/study.md) (sgd: 0.01)

# %%
import initmem
from initmem.analysis import display, tables

runs = initmem.run_point(initmem.checked_parameters(globals()))  # a misspelt or mistyped -p is refused here, before training

# %%
initmem.show_point(runs)  # per sigma_w, the point's figure, per run, and its numbers

# %% [markdown]
# The spread at each epoch mark: [finding 3](../docs/study.md#finding-3-time-alone-is-not-enough) predicts it stays flat as training goes on, while `T_SGD` grows.

# %%
display.display_frame(tables.long_training_table(runs, marks=epoch_marks))  # T2, as figures/ writes it


# %% [markdown]
# ## What we found
#
# This point's spread, then what the committed study found for this section, computed from its runs in
# `results/cpu` (this section's headline set) (`initmem.what_we_found`), with the verdict and what this scale cannot
# show from [docs/findings.md](../docs/findings.md).

# %%
initmem.what_we_found(section, runs)
