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
# # Figures of the clock experiment — does memory follow the clock, however the clock is reached?
#
# The [clock experiment](../../docs/experiments/clocks/README.md) (its predictions registered before its runs):
# **T10** each prediction, its criterion and what the runs give; **F14** the memory G = acc(σ_w 0.1) − acc(σ_w 2.5)
# against each [clock](../../docs/study.md#clocks), a colour per route, the lr route's curve f drawn; **T11** every
# reading. The lr and adaptive routes share runs of results/cpu_w025 (lr 0.01, Adam 1e-3) and results/cpu_w025_lr
# (lr 0.1). `initmem figures` runs it for figures/cpu_w025_clocks only (name it with `--notebooks` for another tree);
# paths are relative to the repository root.

# %% tags=["parameters"]
results_dir = "results/cpu_w025_clocks"
out_dir = "figures/cpu_w025_clocks"
shared_dirs = ["results/cpu_w025", "results/cpu_w025_lr"]  # trees whose runs the routes share

# %%
from functools import cache

from initmem import FigureBook
from initmem.analysis import clocks

s = FigureBook(results_dir, out_dir, also=shared_dirs, keep=clocks.clock_runs)


@cache
def readings():
    """Every configuration's G at each mark, computed once for F14 and T11."""
    return clocks.readings(s.runs, s.histories)


# %%
s.show_table("T10_clock_criteria", lambda: clocks.criteria(s.runs, s.histories),
             "The [clock experiment](docs/experiments/clocks/README.md)'s registered predictions, each with its "
             "criterion, what the committed runs give and the outcome; 'pending' until its runs decide it")

# %%
s.figure("F14_clock_experiment", lambda: clocks.figure(clocks.complete(readings())), "Memory against each forgetting clock",
         "G = acc(σ_w 0.1) − acc(σ_w 2.5) (pp; each run's median test accuracy over the 10 epochs up to the mark, "
         "mean over seeds, 95 % interval) against the [clock](docs/study.md#clocks) each route moves; open: Adam "
         "1e-3's 180-epoch run (T_adapt by time); grey: the lr route's curve f at epoch 60 ± 3 pp, the band's floor "
         "(f's lr 0.0562 point is the time route's epoch 60, the same runs); configurations with all their seeds "
         "(T11: all).")

# %%
s.show_table("T11_clock_readings", lambda: clocks.reading_table(readings()),
             "Every reading: G at each mark e (each run's median test accuracy, 2,000-image subset, over epochs "
             "e − 9 … e; mean over seeds; 95 %: seeds resampled within each σ_w, every resample enumerated; SE from "
             "the seed std), the clocks at e and the runs fitted at e (≥ 99.5 % train accuracy, 1,000-image subset)")
