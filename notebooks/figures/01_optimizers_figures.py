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
# # Figures of section 01 — optimisers: does the trained network remember σ_w?
#
# The σ_w grid × SGD, SGD+momentum, Adam, AdamW and Muon, each at its default (`params/01_optimizers.yaml`; the
# stamp printed below names the profile). **T1**: test accuracy per optimiser and σ_w with the spread; **T9**: the
# spreads under each selection rule; **F1**: accuracy against σ_w beside the paper's spreads; **F2**: the weight norm
# over training; **F3**: final against initial norm; **F9**: training curves; **F10**: the angle from initialisation.
# Every quantity is defined in [docs/study.md](../../docs/study.md#metrics).
#
# `initmem figures` runs every figure notebook; paths are relative to the repository root, and `figures` is the
# committed set, which this notebook overwrites.

# %% tags=["parameters"]
results_dir = "results/cpu"
out_dir = "figures"

# %%
from initmem import FigureBook
from initmem.analysis import findings, instrument_plots, instrument_tables, plots, tables

s = FigureBook(results_dir, out_dir, "01_optimizers")

# %%
s.show_table("T1_optimizers", lambda: tables.optimizer_table(s.runs),
             "Test accuracy (%) at the lowest-validation-loss epoch per optimiser and σ_w (mean ± std over seeds; all "
             "10,000 test images where every run has them), the [spread](docs/study.md#metrics) (pp) with its 95 % "
             "seed-resampled interval, the same at the end of training (`metrics.end_accuracy`: last 10 epochs' median, "
             f"test subset), sgd − max(adaptive), the paper's spread ({tables.PAPER}), interpolation, norm ratios")

# %%
s.show_table("T9_selection_rules", lambda: instrument_tables.selection_rule_table(s.runs, s.histories),
             "T1's spread (pp) and its 95 % interval under each [selection rule](docs/study.md#metrics) (lowest "
             "validation loss, T1's; highest validation accuracy; last epoch), every run re-read at the epoch the rule "
             "picks, and how many selected networks had interpolated by then: does a verdict depend on the epoch?")

# %%
s.figure("F1_accuracy_vs_sigma", lambda: plots.accuracy_vs_sigma(s.runs),
         "Test accuracy against σ_w, per optimiser",
         "T1's accuracy against σ_w (mean ± std over seeds), a line per optimiser, its [spread](docs/study.md#metrics) "
         "and 95 % interval in the legend; " + plots.paper_note(s.runs) + ".")

# %%
s.figure("F2_weight_norm", lambda: plots.weight_norm_curves(s.runs, s.histories, optimizers=("sgd", "adam")),
         "Weight norm over training: SGD beside Adam",
         "Total [weight norm](docs/study.md#metrics) ‖W‖_F over training, a line per σ_w (mean over seeds). The "
         "paper: SGD stays coupled to the initial norm, Adam meets a common scale.")

# %%
s.figure("F3_radial_memory", lambda: plots.radial_memory_plot(s.runs),
         "Final against initial weight norm",
         "Final against initial weight norm across σ_w (log-log), a line per optimiser; the slope in the legend is the "
         "[radial memory](docs/study.md#metrics): 1 the final norm remembers the initial, 0 it forgot.")

# %%
s.figure("F9_training_curves",
         lambda: plots.training_curves(s.runs, s.histories, sigma_w=1.0, optimizers=("sgd", "adam")),
         "Training curves of SGD and Adam",
         "Training (solid) and validation (dashed) accuracy and loss of one SGD and one Adam run at the same σ_w.")

# %%
s.figure("F10_angle_curves", lambda: instrument_plots.angle_curves(s.runs, s.histories),
         "Angle from initialisation over training",
         "[Angle](docs/study.md#metrics) of the weights from their initialisation over training, a panel per "
         "optimiser and a line per σ_w (mean over seeds), one y axis.")


# %% [markdown]
# ## What we found
#
# Computed from the tables above (`initmem.analysis.findings`), with the study's verdict and what this scale cannot
# show from [docs/findings.md](../../docs/findings.md).

# %%
findings.of("01_optimizers", s.tables)
