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
# **T2** gives the test-accuracy spread across σ_w as if training had stopped at each epoch mark m: every run's
# accuracy is read at its best-validation-loss epoch among epochs 1..m (`metrics.test_at_best(history, upto=m)`).
# The marks are the section's `epoch_marks` in the params profile the results came from (a 1-2-5 series when unknown).
#
# Relative paths are relative to the repository root wherever this runs (`FigureBook`); `figures` is the committed
# set, which this notebook overwrites. A missing `results_dir` is an error, a section without runs a placeholder.

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
             "Long training: test accuracy (%) per σ_w and spread across σ_w (pp) at the best-validation epoch up to "
             "each epoch mark, with the clocks T_SGD and T_adapt reached there")


# %% [markdown]
# ## What we found
#
# Computed from the tables above (`initmem.analysis.findings`), with the study's verdict and what this scale cannot
# show from [docs/findings.md](../../docs/findings.md).

# %%
findings.of("02_long_training", s.tables)
