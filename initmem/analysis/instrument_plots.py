"""The forgetting instruments' figures F10–F13, built like `plots` (F11 and F12 as small multiples, a row per
section); runs recorded before the instruments are left out, and a figure with nothing left raises `NoResults`."""

import math

import pandas as pd
from matplotlib import ticker
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from initmem import metrics
from initmem.analysis import instrument_tables, plots, style, tables
from initmem.errors import NoResults

CLOCK_NAMES = {**plots.CLOCK_NAMES, "Theta_slowest": "Θ = Σ per-step angle (rad)\nof the slowest-turning σ_w"}


def angle_curves(runs: pd.DataFrame, histories: pd.DataFrame, max_cols: int = 3) -> Figure:
    """F10: the angle from initialisation (°) over epochs, a panel per configuration with the instrument, a line per
    σ_w, one y axis: SGD's large σ_w barely turn, the adaptive optimisers turn every σ_w far."""
    confs = tables.configurations(runs)
    h = histories[histories["run_id"].isin(confs["run_id"])]
    ids = [cid for cid, g in confs.groupby("config", sort=True)
           if style.has_values(h[h["run_id"].isin(g["run_id"])], "angle")]
    if not ids:
        raise NoResults("no run with the angle-from-initialisation instrument (runs recorded before it have none)")
    sigmas = sorted(confs["sigma_w"].unique())
    colors = style.sigma_colors(sigmas)
    ncols = min(len(ids), max_cols)
    nrows = math.ceil((len(ids) + (len(ids) > ncols)) / ncols)  # several rows: the legend takes a free panel's place
    fig, axes = style.new_figure(ncols=ncols, nrows=nrows, width=2.3 * ncols + 0.4, height=2.0 * nrows + 0.6,
                                 sharey=True)
    for ax, cid in zip(axes, ids, strict=False):
        g = confs[confs["config"] == cid]
        style.sigma_lines(ax, style.with_sigma(h[h["run_id"].isin(g["run_id"])], g), "angle", sigmas, colors)
        ax.set(title=g["label"].iloc[0] if confs["section"].nunique() == 1 else f"{g['section'].iloc[0][:2]} "
               f"{g['label'].iloc[0]}", xlabel="epoch")
    for ax in axes[len(ids):]:
        ax.set_axis_off()
    for ax in axes[::ncols]:
        ax.set_ylabel("angle from initialisation (°)")
    axes[0].set_ylim(bottom=0)
    handles = {lab: h for ax in axes for h, lab in zip(*ax.get_legend_handles_labels(), strict=True)}
    order = [f"σ_w={s:g}" for s in sigmas if f"σ_w={s:g}" in handles]
    if len(axes) > len(ids):
        axes[-1].legend([handles[k] for k in order], order, loc="center", frameon=False)
    else:
        fig.legend([handles[k] for k in order], order, loc="outside right center", frameon=False)
    return fig


def spread_vs_measured_clock(runs: pd.DataFrame) -> Figure:
    """F11: spread (pp) of every configuration with the instruments against the *measured* forgetting (`MEASURED`),
    a row per section as in F7, each column titled with its Spearman ρ over every row (T7 has it beside F7's
    clocks)."""
    cs = instrument_tables.instrumented(style.config_looks(tables.config_spreads(runs)))
    xlabels = {"angle_range_deg": "σ_w-range of the angle from init.\nat the selected epoch (°)",
               "Theta_final": "Θ_final = Σ per-step angle\n(rad, end of training)"}
    fig, axes, legends, sections = style.config_rows(cs, len(xlabels))
    for row, section, lax in zip(axes, sections, legends, strict=True):
        mine = cs["section"] == section
        for ax, x in zip(row, xlabels, strict=True):
            ok = cs[x].notna() & cs["spread_pp"].notna()
            style.context_points(ax, cs[~mine & ok], x)
            style.config_points(ax, cs[mine & ok], x, log=x == "Theta_final")
        style.config_legend(lax, row, cs[mine], section)
    for top, bottom, x in zip(axes[0], axes[-1], xlabels, strict=True):
        ok = cs[cs[x].notna() & cs["spread_pp"].notna()]
        if x == "Theta_final" and len(ok) and (ok[x] > 0).all():
            style.log_axis(bottom, "x")
        top.set_title(f"Spearman ρ = {instrument_tables.signed(instrument_tables.spearman(ok[x], ok['spread_pp']))}"
                      f" (n = {len(ok)})")
        left = len(cs) - len(ok)
        bottom.set_xlabel(xlabels[x] + (f"\n{left} configuration(s) without it not shown" if left else ""))
    style.spread_label(fig, axes)
    return fig


def unfolding_figure(runs: pd.DataFrame, histories: pd.DataFrame | None = None,
                     table: pd.DataFrame | None = None, rule: str = metrics.DEFAULT_RULE) -> Figure:
    """F12: forgetting as it unfolds under one selection `rule` (the paper's by default): a column per clock, a row
    per section, each configuration a line of (clock at e, spread had training stopped at e) from `unfolding_table`
    (or `table`), the other sections' lines in grey behind. If memory follows a clock, its column's lines fall onto
    one curve; each column's title states how far they disagree (T8). The other rules are F13's."""
    t = instrument_tables.unfolding_table(runs, histories) if table is None else table
    t = t[t["rule"] == rule]
    if t.empty:
        raise NoResults(f"no unfolding of selection rule {rule}")
    cs = style.config_looks(tables.config_spreads(runs))
    cs = cs[cs["config"].isin(t["config"])]
    collapse = instrument_tables.collapse_table(t).set_index(["rule", "clock"])
    clocks = instrument_tables.UNFOLD_CLOCKS
    fig, axes, legends, sections = style.config_rows(cs, len(clocks))
    for row, section, lax in zip(axes, sections, legends, strict=True):
        for ax, clock in zip(row, clocks, strict=True):
            _unfold_panel(ax, t, cs, clock, section)
        style.config_legend(lax, row, cs[cs["section"] == section], section)
    n = t["config"].nunique()
    for top, bottom, clock in zip(axes[0], axes[-1], clocks, strict=True):
        top.set_title(f"{UNFOLD_TITLES.get(clock, clock)}\n{_collapse_text(collapse.loc[(rule, clock)])}",
                      fontsize=7)
        left = n - t.loc[t[clock] > 0, "config"].nunique()
        why = "T_L2 = 0: no L2" if clock == "T_L2" else "no instrument"
        bottom.set_xlabel(f"{'Θ' if clock == 'Theta_slowest' else clock} at e"
                          + (f"\n{left} not shown\n({why})" if left else ""))
    style.spread_label(fig, axes)
    return fig


UNFOLD_TITLES = {"T_SGD": "T_SGD = Σ η² / b", "T_adapt": "T_adapt = Σ η", "T_L2": "T_L2 = λ Σ η",
                 "Theta_slowest": "Θ of the slowest-turning σ_w"}


def selection_rules_figure(runs: pd.DataFrame | None = None, histories: pd.DataFrame | None = None,
                           table: pd.DataFrame | None = None) -> Figure:
    """F13: T8's collapse ratio per clock (groups) and selection rule (bars): does F12's verdict depend on the rule
    that picks the reported epoch? 0: the lines are one curve, 1: the clock says nothing about the spread."""
    t = instrument_tables.unfolding_table(runs, histories) if table is None else table
    c = instrument_tables.collapse_table(t)
    rules, clocks = list(dict.fromkeys(c["rule"])), instrument_tables.UNFOLD_CLOCKS
    if not rules:
        raise NoResults("no unfolding to compare selection rules on")
    fig, (ax,) = style.new_figure(width=6.4, height=3.0)
    width = 0.8 / len(rules)
    for k, rule in enumerate(rules):
        ratio = c[c["rule"] == rule].set_index("clock")["collapse_ratio"].reindex(clocks).to_numpy(dtype=float)
        x = [j + (k - (len(rules) - 1) / 2) * width for j in range(len(clocks))]
        label = metrics.SELECTION_RULES[rule][1] + (" (paper)" if rule == metrics.DEFAULT_RULE else "")
        ax.bar(x, [0 if math.isnan(v) else v for v in ratio], width * 0.9, color=f"C{k}", label=label)
        for xi, v in zip(x, ratio, strict=True):
            ax.text(xi, 0 if math.isnan(v) else v, "–" if math.isnan(v) else f"{v:.2f}", ha="center",
                    va="bottom", fontsize=6)
    ax.set_xticks(range(len(clocks)), [UNFOLD_TITLES.get(k, k) for k in clocks])
    ax.set_ylabel("collapse ratio (0: one curve)")
    top = max(1.0, *(v for v in c["collapse_ratio"] if not math.isnan(v)))  # a ratio can pass 1 (worse than none)
    ax.set_ylim(0, top * 1.18)  # headroom for the value labels and, above them, the one-row legend
    ax.grid(axis="x", visible=False)
    style.legend(ax, loc="upper left", ncols=len(rules), fontsize=6)
    return fig


def _unfold_panel(ax, t: pd.DataFrame, cs: pd.DataFrame, clock: str, section: str) -> None:
    """One section × clock panel: a line per configuration of `section` with a positive clock (epoch order), the
    other sections' lines in grey behind."""
    ok = t[(t[clock] > 0) & t["spread_pp"].notna()]
    looks = cs.set_index("config")
    for cid, g in ok.groupby("config", sort=True):
        g = g.sort_values("epoch")
        if g["section"].iloc[0] != section:
            ax.plot(g[clock].to_numpy(), g["spread_pp"].to_numpy(), color=style.CONTEXT_COLOR, lw=0.5, zorder=1)
            continue
        r = next(looks.loc[[cid]].reset_index().itertuples())
        ax.plot(g[clock].to_numpy(), g["spread_pp"].to_numpy(), color=r.color, marker=r.marker, markevery=0.25,
                markersize=3, lw=0.8, zorder=3, label=style.config_label(r, section=False))
    if len(ok):
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(ticker.NullFormatter())


def _collapse_text(collapse: pd.Series) -> str:
    """A column's collapse (T8) under its title: the disagreement at equal clock and its ratio (and the ratio over
    the configurations with Θ, where it differs)."""
    if math.isnan(collapse["dispersion_pp"]):
        return "no clock bin shared\nby two configurations"
    text = f"±{collapse['dispersion_pp']:.1f} pp, ratio {collapse['collapse_ratio']:.2f}"
    if abs(collapse["ratio_theta_configs"] - collapse["collapse_ratio"]) > 1e-9:  # False for NaN: nothing to add
        text += f"\nwith Θ only: {collapse['ratio_theta_configs']:.2f}"
    return text


def spike_curves(runs: pd.DataFrame, histories: pd.DataFrame, drop: float = metrics.COLLAPSE_DROP) -> Figure:
    """Train accuracy (eval mode) of every run over epochs, a panel per configuration (at most four a row), a line per
    run coloured by σ_w, × where it collapses after τ_interp (`metrics.collapse_epoch`) and ● at its selected epoch:
    whether a late spike comes, when, and whether selection reads the network after it."""
    confs = tables.configurations(runs)
    sigmas = sorted(confs["sigma_w"].unique())
    colors = style.sigma_colors(sigmas)
    ids = sorted(confs["config"].unique())
    nrows = math.ceil(len(ids) / 4)  # at most four panels a row: a notebook's width
    ncols = math.ceil(len(ids) / nrows)
    panel = max(2.3, 0.1 * confs["label"].str.len().max())  # inches: a title as long as 'adam eps=1e-08 amsgrad=False'
    fig, axes = style.new_figure(ncols=ncols, nrows=nrows, width=panel * ncols + 0.9, height=2.4 * nrows, sharey=True)
    for ax in axes[len(ids):]:
        ax.remove()
    collapsed = False
    for ax, cid in zip(axes, ids, strict=False):
        g = confs[confs["config"] == cid]
        for r in g.sort_values(["sigma_w", "seed"]).itertuples():
            h = histories[(histories["run_id"] == r.run_id) & (histories["epoch"] >= 1)].sort_values("epoch")
            acc = pd.Series(100 * h["train_acc"].to_numpy(float), index=h["epoch"].to_numpy())
            ax.plot(acc.index, acc.to_numpy(), color=colors[r.sigma_w], linewidth=0.9)
            if (e := metrics.collapse_epoch(h["train_acc"], r.tau_interp, drop)) is not None:
                ax.plot(e, acc[e], "x", color="0.15", markersize=6, markeredgewidth=1.4)
                collapsed = True
            ax.plot(r.best_epoch, acc[int(r.best_epoch)], "o", color=colors[r.sigma_w], markeredgecolor="0.15",
                    markersize=4)
        ax.set(title=g["label"].iloc[0], xlabel="epoch")
    for ax in axes[::ncols]:
        ax.set_ylabel("train accuracy, eval mode (%)")
    cross = Line2D([], [], marker="x", color="0.15", linestyle="none", markeredgewidth=1.4, label="collapse")
    proxies = [Line2D([], [], color=colors[s], label=f"σ_w={s:g}") for s in sigmas] + [cross] * collapsed + [
        Line2D([], [], marker="o", color="0.6", markeredgecolor="0.15", linestyle="none", label="selected epoch")]
    fig.legend(handles=proxies, loc="outside right center", frameon=False)
    return fig
