"""The figures of the forgetting instruments (`initmem.forgetting`), like `initmem.plots` (whose style and helpers
they use): pure functions from `results.load_runs` / `load_histories` frames to matplotlib Figures (`StudyFigure`).
Runs recorded before the instruments have no `angle` columns and None diagnostics: they are left out, and a figure
with nothing left raises `NoResults`.

- F10 `angle_curves`: the angle from initialisation over training, per configuration and σ_w.
- F11 `spread_vs_measured_clock`: the spread against the measured forgetting, every configuration of every section.
"""

from __future__ import annotations

import math

import pandas as pd
from matplotlib.figure import Figure

from initmem import plot_style, plots, tables, tables_forgetting
from initmem.errors import NoResults

__all__ = ["angle_curves", "spread_vs_measured_clock"]


# --- F10 ---------------------------------------------------------------------------------------------------
def angle_curves(runs: pd.DataFrame, histories: pd.DataFrame, max_cols: int = 5) -> Figure:
    """F10: total angle from initialisation (`angle`, degrees: all conv and linear weights as one vector) against
    epoch, one panel per configuration that has the instrument (runs recorded before it are left out), one line per
    σ_w (mean over seeds), a shared y axis: how far each initial scale's weights turn, where SGD's large σ_w barely
    move and the adaptive optimisers turn every σ_w far."""
    confs = tables.configurations(runs)
    h = histories[histories["run_id"].isin(confs["run_id"])]
    ids = [cid for cid, g in confs.groupby("config", sort=True)
           if plot_style.has_values(h[h["run_id"].isin(g["run_id"])], "angle")]
    if not ids:
        raise NoResults("no run with the angle-from-initialisation instrument (runs recorded before it have none)")
    sigmas = sorted(confs["sigma_w"].unique())
    colors = plot_style.sigma_colors(sigmas)
    ncols = min(len(ids), max_cols)
    nrows = math.ceil(len(ids) / ncols)
    fig, axes = plot_style.new_figure(ncols=ncols, nrows=nrows, width=2.3 * ncols + 0.9, height=2.3 * nrows + 0.5,
                                 sharey=True)
    for ax, cid in zip(axes, ids, strict=False):
        g = confs[confs["config"] == cid]
        plot_style.sigma_lines(ax, plot_style.with_sigma(h[h["run_id"].isin(g["run_id"])], g), "angle", sigmas, colors)
        ax.set_title(g["label"].iloc[0] if confs["section"].nunique() == 1 else f"{g['section'].iloc[0][:2]} "
                     f"{g['label'].iloc[0]}")
        ax.set_xlabel("epoch")
    for ax in axes[len(ids):]:
        ax.set_axis_off()
    for ax in axes[::ncols]:
        ax.set_ylabel("angle from initialisation (°)")
    axes[0].set_ylim(bottom=0)
    handles = {lab: h for ax in axes for h, lab in zip(*ax.get_legend_handles_labels(), strict=True)}
    order = [f"σ_w={s:g}" for s in sigmas if f"σ_w={s:g}" in handles]
    fig.legend([handles[k] for k in order], order, loc="outside right center", frameon=False)
    return fig


# --- F11 ---------------------------------------------------------------------------------------------------
def spread_vs_measured_clock(runs: pd.DataFrame) -> Figure:
    """F11: spread (pp) of every configuration of every section that has the forgetting instruments against the
    *measured* forgetting: the σ_w-range of the angle from initialisation at the selected epoch (max − min over σ_w
    of the seed-mean `angle_at_best`, degrees) and Θ_final (the cumulative per-step angle, radians; median over the
    configuration's runs, log axis). Colour = section, marker = configuration within its section, as in F7; each
    panel states the Spearman rank correlation of its points (`tables_forgetting.clock_correlations` has it beside
    F7's clocks on the same configurations)."""
    cs = plots.with_markers(tables.config_spreads(runs))
    cs = cs[cs[list(tables_forgetting.MEASURED)].notna().any(axis=1)]
    if cs.empty:
        raise NoResults("no configuration with the forgetting instruments (angle, Theta: runs recorded before them "
                        "have none)")
    fig, axes = plot_style.new_figure(ncols=2, width=7.6, height=0.12 * len(cs) + 1.6 if len(cs) > 18 else 3.4,
                                      sharey=True)
    xlabels = {"angle_range_deg": "σ_w-range of the angle from initialisation\nat the selected epoch (°)",
               "Theta_final": "Θ_final = Σ per-step angle (rad, end of training)"}
    for ax, x in zip(axes, xlabels, strict=True):
        ok = cs[cs[x].notna() & cs["spread_pp"].notna()]
        for r in ok.itertuples():
            ax.errorbar(getattr(r, x), r.spread_pp, yerr=0 if math.isnan(r.spread_pp_std) else r.spread_pp_std,
                        fmt=r.marker, capsize=2, color=plot_style.SECTION_COLORS.get(r.section[:2], "C7"),
                        markersize=5.5,
                        markeredgecolor="white", markeredgewidth=0.4, label=plots.config_label(r))
        if x == "Theta_final" and len(ok) and (ok[x] > 0).all():
            plot_style.log_axis(ax, "x")
        rho = tables_forgetting.spearman(ok[x], ok["spread_pp"])
        ax.set_title(f"Spearman ρ = {'–' if math.isnan(rho) else f'{rho:+.2f}'.replace('-', '−')} (n = {len(ok)})")
        left = len(cs) - len(ok)
        ax.set_xlabel(xlabels[x] + (f"\n{left} configuration(s) without it not shown" if left else ""))
    axes[0].set_ylabel("test-accuracy spread across σ_w (pp)")
    axes[0].set_ylim(bottom=-0.5)
    handles = {lab: h for ax in axes for h, lab in zip(*ax.get_legend_handles_labels(), strict=True)}
    if handles:
        plots.config_legend(fig, handles, cs, loc="outside right center")
    return fig
