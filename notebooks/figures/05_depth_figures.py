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
# # Figures of section 05 — depth: do deep networks fail to train instead of remembering?
#
# ResNet-9/20/56/110 × {SGD, Adam} (`params/05_depth.yaml`): **T5** per architecture and σ_w whether and when
# the run interpolated and its test accuracy, **F6** the same as a map.
#
# `initmem figures` runs every figure notebook; paths are relative to the repository root, and `figures` is the
# committed set, which this notebook overwrites.

# %% tags=["parameters"]
results_dir = "results/cpu"
out_dir = "figures"

# %%
from initmem import FigureBook
from initmem.analysis import findings, plots, tables

s = FigureBook(results_dir, out_dir, "05_depth")

# %%
s.show_table("T5_depth", lambda: tables.depth_table(s.runs),
             "Test accuracy (%) / [interpolation epoch](docs/study.md#metrics) ('never': none) per architecture, "
             "optimiser and σ_w ('diverged': no accuracy, outside the spread), the runs that interpolated and that "
             "diverged, and the spread across σ_w (pp)")

# %%
s.figure("F6_depth_interpolation", lambda: plots.depth_interpolation_map(s.runs),
         "Depth: test accuracy and interpolation by architecture and σ_w",
         "Per optimiser, architecture × σ_w coloured by test accuracy (%); each cell writes its accuracy and, under "
         "it, the median epoch its seeds [interpolated](docs/study.md#metrics) at (✗: no seed interpolated).")


# %% [markdown]
# ## What we found
#
# Computed from the tables above (`initmem.analysis.findings`), with the study's verdict and what this scale cannot
# show from [docs/findings.md](../../docs/findings.md).

# %%
findings.of("05_depth", s.tables)
