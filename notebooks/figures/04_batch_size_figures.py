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
# # Figures of section 04 — batch size: do larger batches slow SGD's forgetting?
#
# Batch size × {SGD, Adam} (`params/04_batch_size.yaml`): **T4** the spread across σ_w by batch size, **F4** the
# same as lines.
#
# `initmem figures` runs every figure notebook; paths are relative to the repository root, and `figures` is the
# committed set, which this notebook overwrites.

# %% tags=["parameters"]
results_dir = "results/cpu"
out_dir = "figures"

# %%
from initmem import FigureBook
from initmem.analysis import findings, plots, tables

s = FigureBook(results_dir, out_dir, "04_batch_size")

# %%
s.show_table("T4_batch_size", lambda: tables.batch_size_table(s.runs),
             "[Spread](docs/study.md#metrics) across σ_w (pp) by batch size (rows) and optimiser (columns); 'diverged': "
             "the row's runs that diverged, and the cells whose spread lacks a σ_w because of them")

# %%
s.figure("F4_spread_vs_batch_size", lambda: plots.spread_vs_batch_size(s.runs),
         "Spread across σ_w against batch size",
         "[Spread](docs/study.md#metrics) across σ_w (pp) against batch size, a line per optimiser (whiskers: the "
         "95 % seed-resampled interval, where seeds repeat).")


# %% [markdown]
# ## What we found
#
# Computed from the tables above (`initmem.analysis.findings`), with the study's verdict and what this scale cannot
# show from [docs/findings.md](../../docs/findings.md).

# %%
findings.of("04_batch_size", s.tables)
