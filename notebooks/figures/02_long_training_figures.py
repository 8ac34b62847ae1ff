# ---
# jupyter:
#   jupytext:
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
# # Figures of section 02 — long training: does time alone make low-learning-rate SGD forget?
#
# Low-lr SGD (and, in the cpu profile, Adam beside it) trained for a long time (`params/02_long_training.yaml`).
# **T2**: the spread across σ_w as if training had stopped at each epoch mark m, every run read at its
# lowest-validation-loss epoch among epochs 1..m (`metrics.test_at_best(history, upto=m)`); the marks are the
# profile's `epoch_marks` (a 1-2-5 series when unknown).
#
# `initmem figures` runs every figure notebook; paths are relative to the repository root, and `figures` is the
# committed set, which this notebook overwrites.

# %% tags=["parameters"]
results_dir = "results/cpu"
out_dir = "figures"

# %%
from initmem import FigureBook
from initmem.analysis import findings, tables

s = FigureBook(results_dir, out_dir, "02_long_training")

# %%
s.show_table("T2_long_training",
             lambda: tables.long_training_table(s.runs, s.histories, marks=s.param("epoch_marks")),
             "Test accuracy (%) per σ_w and [spread](docs/study.md#metrics) across σ_w (pp) as if training had stopped "
             "at each epoch mark (lowest validation loss up to it), with the [clocks](docs/study.md#clocks) T_SGD and "
             "T_adapt reached there")


# %% [markdown]
# ## What we found
#
# Computed from the tables above (`initmem.analysis.findings`), with the study's verdict and what this scale cannot
# show from [docs/findings.md](../../docs/findings.md).

# %%
findings.of("02_long_training", s.tables)
