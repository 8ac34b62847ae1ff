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
# # Figures across sections — does forgetting follow a clock, and does training repair it?
#
# Every configuration (runs sharing everything but σ_w and seed) of every section. **F7**: its spread against
# the forgetting clocks T_SGD = Σ η²/b, T_L2 = λ Σ η and T_adapt = Σ η, taken at the end of training (they do not
# depend on σ_w; the best epoch does); zero clocks are left off the log axes and counted in a note. **F8**: its
# repair gap (validation accuracy at the end minus at the interpolation epoch).
#
# Then the *measured* forgetting, where the runs have the instruments of `initmem.engine.instruments` (runs recorded before
# them are left out): **T6** the per-step angular update of the scale-invariant (conv + BatchNorm) layers at the
# end of training against the equilibrium the theory predicts with weight decay (Wan et al. 2021 for SGD, Kosson et
# al. 2024 for AdamW), per σ_w: does the equilibrium forget the initial scale? **T7** and **F11**: does the spread
# follow the measured forgetting (the σ_w-range of the angle from initialisation at the selected epoch, and
# Θ = Σ per-step angle) across sections, where F7's clocks do not? Spearman rank correlations, the clocks' on the
# same configurations beside them.
#
# **F12** and **T8**: forgetting as it unfolds. For every configuration and every measured epoch e, the spread a
# researcher would have reported had training stopped at e (the selection restricted to epochs ≤ e), against each
# clock at e: T_SGD, T_adapt, T_L2 and the measured Θ of the configuration's slowest-turning σ_w (the smallest
# seed-mean Θ across σ_w). If memory follows one clock, every configuration's line falls onto one curve in its
# column; T8 (and each panel) measures how far they disagree at equal clock, over every configuration a clock
# reaches and over those with Θ (so that the columns compare on one set). One row per selection rule: the
# paper's lowest validation loss (the default everywhere else), the highest validation accuracy and the last
# epoch, so a conclusion that depends on the rule shows.
#
# Relative paths are relative to the repository root wherever this runs (`FigureBook`); `figures` is the committed
# set, which this notebook overwrites. A missing `results_dir` is an error, a section without runs a placeholder.

# %% tags=["parameters"]
results_dir = "results/cpu"
out_dir = "figures"

# %%
from functools import cache

from initmem import FigureBook
from initmem.analysis import findings, instrument_plots, instrument_tables, plots

s = FigureBook(results_dir, out_dir)

# %%
s.figure("F7_spread_vs_clocks", lambda: plots.spread_vs_clocks(s.runs),
         "Spread against the forgetting clocks",
         "Test-accuracy spread across σ_w (pp) of every configuration against the forgetting clocks at the end of "
         "training (colour: section, marker: configuration); a zero clock has no place on a log axis and is "
         "counted under its panel.")

# %%
s.figure("F8_repair_gap", lambda: plots.repair_gap_bars(s.runs),
         "Repair gap per configuration",
         "Repair gap: validation accuracy at the end minus at the interpolation epoch (pp), the mean over a "
         "configuration's runs that interpolated, whiskers min–max; 'never interpolated': no run did.")

# %%
s.show_table("T6_equilibrium", lambda: instrument_tables.equilibrium_table(s.runs, s.histories),
             "weight decay: the predicted equilibrium per-step angle (rad/step; SGD sqrt(2ηλ/(1+β)), Wan et al. 2021; "
             "AdamW sqrt(2ηλ(1−β1)/(1+β1)), Kosson et al. 2024; – where none is stated) against the measured one (median "
             "over conv layers of the per-step angle, mean over the last 10 % of epochs) per σ_w, their ratio, whether "
             "the measured values are independent of σ_w (spread ≤ 10 % of their mean) and T_L2 = λ Σ η (the "
             "equilibrium needs it of order 1)")

# %%
corr = s.table("T7_clock_correlations", lambda: instrument_tables.clock_correlations(s.runs),
               "Spearman rank correlation of the spread across σ_w with the measured forgetting and with F7's clocks, "
               "over the configurations that have the instruments")
s.show("T7_clock_correlations")

# %%
s.figure("F11_spread_vs_measured_clock", lambda: instrument_plots.spread_vs_measured_clock(s.runs),
         "Spread against the measured forgetting",
         "Test-accuracy spread across σ_w (pp) against the measured forgetting, every configuration with the "
         "instruments: does memory follow it where F7's clocks do not? " + instrument_tables.correlation_sentence(corr))


# %%
@cache
def unfolding():
    """F12's numbers (every configuration × measured epoch × selection rule), computed once for T8 and F12."""
    return instrument_tables.unfolding_table(s.runs, s.histories)


collapse = s.table("T8_unfolding_collapse", lambda: instrument_tables.collapse_table(unfolding()),
                   "how well F12's lines collapse onto one curve, per selection rule and clock: the std across "
                   "configurations of their mean spread in a quarter-decade clock bin (pp, averaged over the bins two "
                   "or more configurations share) and its ratio to the std of all those means (0 = one curve, 1 = "
                   "the clock says nothing about the spread), also over the configurations that have Θ only (the "
                   "same set in every column but T_L2's)")

# %%
s.figure("F12_forgetting_unfolds", lambda: instrument_plots.unfolding_figure(s.runs, table=unfolding()),
         "Forgetting as it unfolds, against each clock",
         "The spread across σ_w had training stopped at epoch e (lowest-validation-loss selection, the paper's), "
         "against each clock at e, a line per configuration: if memory follows a clock, its panel's lines fall onto "
         "one curve. " + instrument_tables.collapse_sentence(collapse))

# %%
s.figure("F13_selection_rules", lambda: instrument_plots.selection_rules_figure(table=unfolding()),
         "Does the selection rule change the unfolding?",
         "How far F12's lines disagree at equal clock (the collapse ratio of T8: 0 one curve, 1 the clock says "
         "nothing about the spread), per clock and selection rule.")


# %% [markdown]
# ## What we found
#
# Computed from the tables above (`initmem.analysis.findings`), with the study's verdict and what this scale cannot
# show from [docs/findings.md](../../docs/findings.md).

# %%
findings.of("06_forgetting_clocks", s.tables)
