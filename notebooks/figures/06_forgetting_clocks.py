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
# # Across sections — forgetting clocks and repair
#
# Every configuration (runs sharing everything but σ_w and seed) of every section. **F7**: its spread against
# the forgetting clocks T_SGD = Σ η²/b, T_L2 = λ Σ η and T_adapt = Σ η, taken at the end of training (they do not
# depend on σ_w; the best epoch does); zero clocks are left off the log axes and counted in a note. **F8**: its
# repair gap (validation accuracy at the end minus at the interpolation epoch).
#
# Relative `results_dir` and `out_dir` are relative to the repository root, however the notebook runs (JupyterLab,
# whose working folder is `notebooks/figures/`; papermill; `initmem figures`): `results/cpu` is the committed
# results, `figures` the committed figures, which this notebook overwrites. A `results_dir` that does not exist is
# an error; a section without runs gives 'no results' placeholders.

# %% tags=["parameters"]
results_dir = "results/cpu"
out_dir = "figures"

# %%
from initmem import plots
from initmem.figures import FigureBook

s = FigureBook(results_dir, out_dir)
s.stamp.caption()

# %%
s.figure("F7_spread_vs_clocks", lambda: plots.spread_vs_clocks(s.runs),
         "spread across σ_w against the forgetting clocks at the end of training, every configuration")

# %%
s.figure("F8_repair_gap", lambda: plots.repair_gap_bars(s.runs),
         "repair gap (val. accuracy final − at interpolation, pp) per configuration")
