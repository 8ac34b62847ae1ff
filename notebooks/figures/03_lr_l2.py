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
# # Section 03 — learning rate and L2: what makes SGD forget
#
# SGD over a learning-rate × weight-decay grid (`params/03_lr_l2.yaml`): **T3** the spread across σ_w per cell,
# **F5** the same as a heatmap.
#
# Relative paths are relative to the repository root wherever this runs (`FigureBook`); `figures` is the committed
# set, which this notebook overwrites. A missing `results_dir` is an error, a section without runs a placeholder.

# %% tags=["parameters"]
results_dir = "results/cpu"
out_dir = "figures"

# %%
from initmem.analysis import display, plots, tables
from initmem import FigureBook

s = FigureBook(results_dir, out_dir, "03_lr_l2")

# %%
t3 = s.table("T3_lr_l2", lambda: tables.lr_l2_table(s.runs),
             "SGD: test-accuracy spread across σ_w (pp) by learning rate (rows) and L2 weight decay (columns); "
             "'diverged': runs of the row that diverged, and the cells whose spread lacks a σ_w because they did")
display.display_frame(t3)

# %%
s.figure("F5_spread_lr_l2", lambda: plots.spread_heatmap(s.runs, table=t3),
         "SGD spread across σ_w (pp) over learning rate × L2")
