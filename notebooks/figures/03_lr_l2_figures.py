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
# # Figures of section 03 — learning rate and L2: do they make SGD forget?
#
# SGD over a learning-rate × weight-decay grid (`params/03_lr_l2.yaml`): **T3** the spread across σ_w per cell,
# **F5** the same as a heatmap.
#
# `initmem figures` runs every figure notebook; paths are relative to the repository root, and `figures` is the
# committed set, which this notebook overwrites.

# %% tags=["parameters"]
results_dir = "results/cpu"
out_dir = "figures"

# %%
from initmem import FigureBook
from initmem.analysis import findings, plots, tables

s = FigureBook(results_dir, out_dir, "03_lr_l2")

# %%
t3 = s.table("T3_lr_l2", lambda: tables.lr_l2_table(s.runs),
             "SGD: [spread](docs/study.md#metrics) across σ_w (pp) by learning rate (rows) and L2 weight decay "
             "(columns); 'diverged': the row's runs that diverged, and the cells whose spread lacks a σ_w because of them")
s.show("T3_lr_l2")

# %%
s.figure("F5_spread_lr_l2", lambda: plots.spread_heatmap(s.runs, table=t3),
         "SGD's spread across σ_w over learning rate × L2",
         "T3 as a heatmap: SGD's [spread](docs/study.md#metrics) across σ_w (pp) per learning rate (rows) and L2 "
         "weight decay (columns); a blank cell has no spread.")


# %% [markdown]
# ## What we found
#
# Computed from the tables above (`initmem.analysis.findings`), with the study's verdict and what this scale cannot
# show from [docs/findings.md](../../docs/findings.md).

# %%
findings.of("03_lr_l2", s.tables)
