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
# # Section 01 — optimisers: does the trained network remember σ_w?
#
# ResNet-9, b = 128, the σ_w grid × SGD / SGD+momentum / Adam / AdamW / Muon (`params/01_optimizers.yaml`).
# Regenerates **T1** (test accuracy at the best-validation-loss epoch per optimiser and σ_w, with the spread,
# interpolation epoch and norm ratio), **F1** (accuracy against σ_w), **F2** (weight norm over training, SGD beside
# Adam), **F3** (final against initial norm, with the radial-memory slope) and **F9** (training and validation
# curves of an SGD/Adam pair). All computation lives in `initmem.tables` and `initmem.plots`; run every figure
# notebook with `initmem figures --results results/cpu --out figures`.

# %% tags=["parameters"]
results_dir = "results/cpu"
out_dir = "figures"

# %%
from initmem import plots, tables

s = plots.Section(results_dir, out_dir, "01_optimizers")
s.stamp.caption()

# %%
s.table("T1_optimizers", lambda: tables.optimizer_table(s.runs),
        "Test accuracy (%) at the best-validation-loss epoch by optimiser and σ_w, spread across σ_w (pp; mean ± "
        "std over seeds when several), runs that interpolated, median interpolation epoch, final/initial weight-"
        "norm ratio and radial-memory slope")

# %%
s.figure("F1_accuracy_vs_sigma", lambda: plots.accuracy_vs_sigma(s.runs),
         "test accuracy at the best-validation epoch against σ_w, per optimiser")

# %%
s.figure("F2_weight_norm", lambda: plots.weight_norm_curves(s.runs, s.histories, optimizers=("sgd", "adam")),
         "total weight norm over training per σ_w, SGD beside Adam (paper: SGD stays coupled to the initial norm, "
         "Adam meets a common scale)")

# %%
s.figure("F3_radial_memory", lambda: plots.radial_memory_plot(s.runs),
         "final against initial weight norm across σ_w (log-log), slope = radial memory")

# %%
s.figure("F9_training_curves",
         lambda: plots.training_curves(s.runs, s.histories, sigma_w=1.0, optimizers=("sgd", "adam")),
         "training and validation curves of SGD and Adam at the same σ_w")
