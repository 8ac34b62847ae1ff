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
# Every configuration (runs sharing all but σ_w and seed) of every section, against the
# [clocks](../../docs/study.md#clocks) and the measured forgetting ([instruments](../../docs/study.md#metrics)):
# **F7** the spread against the clocks at the end of training; **F8** the repair gap; **T6** the per-step angle against
# the weight-decay equilibrium; **T7**, **F11** the spread against the measured forgetting; **T8**, **F12** the spread
# had training stopped at each epoch against each clock (one curve if memory follows it); **F13** whether the
# selection rule changes that. F7, F11 and F12 are small multiples: a row per section, the others in grey behind.
#
# `initmem figures` runs every figure notebook; paths are relative to the repository root (`figures`: committed).

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
         "[Spread](docs/study.md#metrics) across σ_w (pp) of every configuration against the [clocks](docs/study.md"
         "#clocks) at the end of training, a row per section, the others in grey; colour and marker: the optimiser, "
         "points on one spot set a marker apart. How many zero clocks a log axis leaves off is said under it.")

# %%
s.figure("F8_repair_gap", lambda: plots.repair_gap_bars(s.runs),
         "Repair gap per configuration",
         "[Repair gap](docs/study.md#metrics): validation accuracy at the end minus at the interpolation epoch (pp), "
         "the mean over a configuration's runs that interpolated, whiskers min–max; 'never interpolated': no run did.")

# %%
s.show_table("T6_equilibrium", lambda: instrument_tables.equilibrium_table(s.runs, s.histories),
             "With weight decay: the predicted equilibrium per-step angle (rad/step; SGD sqrt(2ηλ/(1+β)), Wan et al. "
             "2021; AdamW sqrt(2ηλ(1−β1)/(1+β1)), Kosson et al. 2024; – none stated) against the [measured](docs/study"
             ".md#metrics) one per σ_w, their ratio, whether the measured ones agree across σ_w (within 10 % of their "
             "mean) and T_L2 = λ Σ η (of order 1 at equilibrium)")

# %%
corr = s.table("T7_clock_correlations", lambda: instrument_tables.clock_correlations(s.runs),
               "Spearman rank correlation of the spread across σ_w with the [measured forgetting](docs/study.md"
               "#metrics) and with F7's clocks, over the configurations that have the instruments")
s.show("T7_clock_correlations")

# %%
s.figure("F11_spread_vs_measured_clock", lambda: instrument_plots.spread_vs_measured_clock(s.runs),
         "Spread against the measured forgetting",
         "Spread across σ_w (pp) against the [measured forgetting](docs/study.md#metrics), a row per section as in "
         "F7: does memory follow it where F7's clocks do not? " + instrument_tables.correlation_sentence(corr))


# %%
@cache
def unfolding():
    """F12's numbers (every configuration × measured epoch × selection rule), computed once for T8 and F12."""
    return instrument_tables.unfolding_table(s.runs, s.histories)


s.table("T8_unfolding_collapse", lambda: instrument_tables.collapse_table(unfolding()),
        "How far F12's lines disagree at equal clock, per selection rule and clock: the std across configurations of "
        "their mean spread in a quarter-decade clock bin (pp, over bins two or more share), its ratio to the std of "
        "all those means (0: one curve, 1: the clock says nothing), and that ratio over Θ's configurations")

# %%
s.figure("F12_forgetting_unfolds", lambda: instrument_plots.unfolding_figure(s.runs, table=unfolding()),
         "Forgetting as it unfolds, against each clock",
         "The spread across σ_w had training stopped at epoch e (lowest-validation-loss selection, the paper's) "
         "against each [clock](docs/study.md#clocks) at e, a row per section, the others in grey: if memory follows "
         "a clock, its column's lines fall onto one curve; each column's title gives T8's collapse ratio.")

# %%
s.figure("F13_selection_rules", lambda: instrument_plots.selection_rules_figure(table=unfolding()),
         "Does the selection rule change the unfolding?",
         "How far F12's lines disagree at equal clock (T8's collapse ratio: 0 one curve, 1 the clock says nothing "
         "about the spread), per clock and [selection rule](docs/study.md#metrics).")


# %% [markdown]
# ## What we found
#
# Computed from the tables above (`initmem.analysis.findings`), with the study's verdict and what this scale cannot
# show from [docs/findings.md](../../docs/findings.md).

# %%
findings.of("06_forgetting_clocks", s.tables)
