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
# ResNet-9, b = 128, the σ_w grid × SGD / SGD+momentum / Adam / AdamW / Muon (`params/01_optimizers.yaml`).
# Regenerates **T1** (test accuracy at the best-validation-loss epoch per optimiser and σ_w, with the spread,
# interpolation epoch and norm ratio, and the paper's spread beside ours), **T9** (T1's spreads under each selection
# rule), **F1** (accuracy against σ_w, the
# paper's spreads drawn beside ours), **F2** (weight norm over training, SGD beside Adam), **F3** (final against
# initial norm, with the radial-memory slope), **F9** (training and validation curves of an SGD/Adam pair) and
# **F10** (the angle from initialisation over training per optimiser and σ_w, where the runs have the instrument).
# All computation lives in `initmem.analysis` (tables and plots), the writing in `initmem.figures`; run every figure
# notebook with `initmem figures --results results/cpu --out figures`.
#
# Relative paths are relative to the repository root wherever this runs (`FigureBook`); `figures` is the committed
# set, which this notebook overwrites. A missing `results_dir` is an error, a section without runs a placeholder.

# %% tags=["parameters"]
results_dir = "results/cpu"
out_dir = "figures"

# %%
from initmem import FigureBook
from initmem.analysis import findings, instrument_plots, instrument_tables, plots, tables

s = FigureBook(results_dir, out_dir, "01_optimizers")

# %%
s.show_table("T1_optimizers", lambda: tables.optimizer_table(s.runs),
             "Test accuracy (%) at the best-validation-loss epoch by optimiser and σ_w (mean ± std over seeds when "
             "several; on all 10,000 test images where every run of the row has test_acc_full_at_best, else on the "
             "runs' test subset), spread across σ_w (pp): max − min over σ_w of those seed means, with its 95 % "
             "interval spread_pp_lo–hi: the same statistic with seeds resampled with replacement within each σ_w (all resamples "
             "enumerated when at most 2,000, else 2,000 draws from a fixed RNG; percentile interval; with 2 seeds it "
             "is crude: each σ_w's mean can only be a, b or their average); last row sgd − max(adaptive): SGD's "
             "spread minus the largest of Adam's, AdamW's and Muon's, both sides resampled independently; "
             f"the paper's spread where it reports one (paper spread: {tables.PAPER}, "
             "ResNet-9, b = 128; Muon 'about 4'), runs that interpolated and that diverged ('diverged' in a σ_w cell: "
             "its runs have no accuracy and are outside the spread), median interpolation epoch, final/initial "
             "weight-norm ratio and radial-memory slope")

# %%
s.show_table("T9_selection_rules", lambda: instrument_tables.selection_rule_table(s.runs, s.histories),
             "T1's spread across σ_w (pp) and its 95 % seed-resampled interval under each selection rule, every "
             "run's test accuracy re-read from its history at the epoch the rule picks: the lowest validation loss "
             "(T1's, so those rows are T1's), the highest validation accuracy, the last epoch; on all 10,000 test "
             "images where every run of the row has them at that epoch, else on the test subset; sgd − "
             "max(adaptive) as in T1; selected after τ_interp: how many of the selected networks had interpolated "
             "(99.5 % train accuracy) by then. Whether a verdict depends on which epoch is reported")

# %%
s.figure("F1_accuracy_vs_sigma", lambda: plots.accuracy_vs_sigma(s.runs),
         "Test accuracy against σ_w, per optimiser",
         "Test accuracy (%) at the best-validation-loss epoch against σ_w, mean ± std over seeds (as in T1: on "
         "all 10,000 test images where every run of the optimiser has them, else on the test subset), a line per "
         "optimiser with its spread across σ_w in the legend (with several seeds, T1's 95 % seed-resampled interval in brackets); " + plots.paper_note(s.runs) + ".")

# %%
s.figure("F2_weight_norm", lambda: plots.weight_norm_curves(s.runs, s.histories, optimizers=("sgd", "adam")),
         "Weight norm over training: SGD beside Adam",
         "Total weight norm ‖W‖_F over training, a line per σ_w (mean over seeds). The paper: SGD stays coupled to "
         "the initial norm, Adam meets a common scale.")

# %%
s.figure("F3_radial_memory", lambda: plots.radial_memory_plot(s.runs),
         "Final against initial weight norm",
         "Final against initial weight norm across σ_w (log-log), a line per optimiser; its slope (in the legend) is "
         "the radial memory: 1 the final norm remembers the initial, 0 it forgot.")

# %%
s.figure("F9_training_curves",
         lambda: plots.training_curves(s.runs, s.histories, sigma_w=1.0, optimizers=("sgd", "adam")),
         "Training curves of SGD and Adam",
         "Training (solid) and validation (dashed) accuracy and loss of one SGD and one Adam run at the same σ_w.")

# %%
s.figure("F10_angle_curves", lambda: instrument_plots.angle_curves(s.runs, s.histories),
         "Angle from initialisation over training",
         "Angle of the weights from their initialisation over training, a panel per optimiser and a line per σ_w "
         "(mean over seeds), one y axis.")


# %% [markdown]
# ## What we found
#
# Computed from the tables above (`initmem.analysis.findings`), with the study's verdict and what this scale cannot
# show from [docs/findings.md](../../docs/findings.md).

# %%
findings.of("01_optimizers", s.tables)
