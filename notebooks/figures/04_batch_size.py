# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Section 04 — batch size: larger batches slow SGD's forgetting
#
# Batch size × {SGD, Adam} (`params/04_batch_size.yaml`): **T4** the spread across σ_w by batch size, **F4** the
# same as lines.

# %% tags=["parameters"]
results_dir = "results/cpu"
out_dir = "figures"

# %%
from initmem import plots, tables

s = plots.Section(results_dir, out_dir, "04_batch_size")
s.stamp.caption()

# %%
s.table("T4_batch_size", lambda: tables.batch_size_table(s.runs),
        "Test-accuracy spread across σ_w (pp) by batch size (rows) and optimiser (columns)")

# %%
s.figure("F4_spread_vs_batch_size", lambda: plots.spread_vs_batch_size(s.runs),
         "spread across σ_w against batch size")
