"""The study's figures F1–F9: pure functions from `load_runs` / `load_histories` frames to `style.StudyFigure`s
(no pyplot). A builder raises `NoResults` with nothing to draw; build under `style.STYLE` for the study's look. A
configuration is drawn in its optimiser's look (`style.config_looks`), and a figure of many configurations is small
multiples, a row per section (`style.config_rows`)."""

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd
from matplotlib import ticker
from matplotlib.colors import Normalize
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from initmem.analysis import cells, display, style, tables
from initmem.analysis.style import legend, log_axis, new_figure, sigma_axis, sigma_colors, with_sigma
from initmem.errors import NoResults

CLOCK_NAMES = {"T_SGD": "T_SGD = Σ η² / b", "T_L2": "T_L2 = λ Σ η", "T_adapt": "T_adapt = Σ η"}  # axis titles


def accuracy_vs_sigma(runs: pd.DataFrame) -> Figure:
    """F1: test accuracy at the selected epoch against σ_w per configuration (T1's: the whole test set where every
    run of the configuration has it), our spread in the legend with T1's 95 % seed-resampled interval when seeds
    repeat ("(σ_w 2/3)" when over fewer σ_w); the paper's (`tables.paper_spread`) a dashed bracket hung from our best
    σ_w's accuracy, right of the grid."""
    confs = tables.configurations(runs)
    sigmas, multi = sorted(confs["sigma_w"].unique()), cells.multi_seed(confs)
    fig, (ax,) = new_figure(width=6.4, height=3.6)
    looks, brackets = style.config_looks(confs.drop_duplicates("config")).set_index("config"), []
    for cid, g in confs.groupby("config", sort=True):
        acc = 100 * g.groupby("sigma_w")[cells.spread_column(g)].agg(["mean", "std"])  # T1's accuracy and spread
        ours, have = cells.spread_cells(g, multi=multi), len(cells.sigmas_in_spread(g))
        label = g["label"].iloc[0] + ("" if math.isnan(ours["spread_pp"]) else ": " + display.spread(
            ours["spread_pp"], ours.get("spread_pp_lo", math.nan), ours.get("spread_pp_hi", math.nan))) + (
            f" (σ_w {have}/{len(sigmas)})" if 2 <= have < len(sigmas) else "")  # over fewer σ_w: T1's caption says
        color = mean_line(ax, acc.index, acc["mean"], acc["std"], label=label, **look_of(looks.loc[cid]))
        paper = tables.paper_spread(g.iloc[0])
        if not math.isnan(paper) and acc["mean"].notna().any():
            brackets.append((g["label"].iloc[0], paper, float(acc["mean"].max()), color))
    sigma_axis(ax, sigmas)
    for k, (name, paper, top, color) in enumerate(brackets):
        x = max(sigmas) * 1.45 ** (k + 1)
        ax.annotate("", xy=(x, top - paper), xytext=(x, top),
                    arrowprops={"arrowstyle": "|-|", "color": color, "linestyle": "--", "linewidth": 1.0,
                                "shrinkA": 0, "shrinkB": 0, "mutation_scale": 3})
        ax.annotate(f"paper: {name} {'≈ ' if name == 'muon' else ''}{paper:g} pp", (x, top - paper / 2),
                    xytext=(3, 0), textcoords="offset points", color=color, rotation=90, va="center", ha="left",
                    fontsize=6)
    ax.set_ylabel("test accuracy at best val. loss (%)")
    handles, labels = ax.get_legend_handles_labels()
    if brackets:
        ax.set_xlim(right=max(sigmas) * 1.45 ** (len(brackets) + 0.9))
        lo, hi = ax.get_ylim()
        ax.set_ylim(min(lo, min(top - paper for _, paper, top, _ in brackets) - 1), hi)
        handles.append(Line2D([], [], color="0.4", linestyle="--", linewidth=1.0))
        labels.append(f"the paper's spread\n({tables.PAPER};\nResNet-9, b = 128),\nhung from our best σ_w")
    if handles:
        title = "ours: spread across σ_w" + ("\n[95 % interval]" if multi else "")
        fig.legend(handles, labels, loc="outside right center", frameon=False, title=title, title_fontsize=7)
    return fig


def paper_note(runs: pd.DataFrame) -> str:
    """What F1 draws of the paper (`tables.paper_spread`), as its caption says it: the brackets, or why none."""
    confs = tables.configurations(runs)
    drawn = [(g["label"].iloc[0], tables.paper_spread(g.iloc[0])) for _, g in confs.groupby("config", sort=True)]
    drawn = [(name, p) for name, p in drawn if not math.isnan(p)]
    if drawn:
        return ("the paper's spread (" + ", ".join(f"{n} {p:g} pp" for n, p in drawn) + f"; {tables.PAPER}, "
                "ResNet-9 at b = 128) is the dashed bracket hung from our best σ_w, right of the grid")
    return (f"the paper ({tables.PAPER}) reports spreads only for ResNet-9 at b = 128 (SGD without L2 26.5 pp, "
            "Muon about 4 pp), none of these configurations, so none is drawn")


def mean_line(ax, x, mean, err, **kw) -> str:
    """A line of means with markers, and whiskers only where there is an error to show (one seed: none, none in the
    legend either): `err` a ± std per point, or matplotlib's 2 × n (below, above) of an interval
    (`cells.interval_err`); returns the line's colour."""
    err = np.nan_to_num(np.asarray(err, dtype=float))
    kw.setdefault("marker", "o")
    if err.any():
        return ax.errorbar(x, mean, yerr=err, capsize=2, **kw).lines[0].get_color()
    return ax.plot(x, mean, **kw)[0].get_color()


def look_of(row) -> dict:
    """The plot keywords of a `config_looks` row: its colour and marker."""
    return {"color": row["color"], "marker": row["marker"]}


def weight_norm_curves(runs: pd.DataFrame, histories: pd.DataFrame, optimizers: Sequence[str] = ("sgd", "adam")
                       ) -> Figure:
    """F2: total weight norm ‖W‖_F over training, a line per σ_w (mean over seeds), a panel per configuration of
    `optimizers`, one log scale: SGD's lines stay apart (coupled to the initial norm), Adam's meet."""
    confs = tables.configurations(runs)
    confs = confs[confs["optimizer"].isin(optimizers)]
    if confs.empty:
        raise NoResults(f"no runs of optimizer {' or '.join(optimizers)}")
    ids = sorted(confs["config"].unique(), key=lambda c: (list(optimizers).index(
        confs.loc[confs["config"] == c, "optimizer"].iloc[0]), c))
    sigmas = sorted(confs["sigma_w"].unique())
    colors = sigma_colors(sigmas)
    fig, axes = new_figure(ncols=len(ids), width=3.2 * len(ids) + 0.6, height=3.2, sharey=True)
    for ax, cid in zip(axes, ids, strict=True):
        g = confs[confs["config"] == cid]
        h = with_sigma(histories[histories["run_id"].isin(g["run_id"])], g)
        for s in sigmas:
            curve = h[h["sigma_w"] == s].groupby("epoch")["weight_norm"].mean()
            if len(curve):
                ax.plot(curve.index, curve.to_numpy(), color=colors[s], label=f"σ_w={s:g}")
        log_axis(ax, "y")
        ax.set(title=g["label"].iloc[0], xlabel="epoch")
    axes[0].set_ylabel("total weight norm ‖W‖_F")
    legend(axes[-1], loc="best")
    return fig


def radial_memory_plot(runs: pd.DataFrame) -> Figure:
    """F3: final against initial weight norm across σ_w per configuration, log-log, its `tables.radial_slope` in the
    legend (~1: the final norm remembers the initial, ~0: it forgot)."""
    confs = tables.configurations(runs)
    fig, (ax,) = new_figure(width=6.0, height=3.6)
    looks = style.config_looks(confs.drop_duplicates("config")).set_index("config")
    for cid, g in confs.groupby("config", sort=True):
        ok = g[["init_weight_norm", "final_weight_norm"]].dropna().astype(float)
        ok = ok[(ok > 0).all(axis=1)].sort_values("init_weight_norm")
        if ok.empty:
            continue
        slope = tables.radial_slope(g)
        label = g["label"].iloc[0] + ("" if math.isnan(slope) else f" (slope {slope:.2f})")
        ax.plot(ok["init_weight_norm"], ok["final_weight_norm"], label=label, **look_of(looks.loc[cid]))
    lo, hi = ax.get_xlim()
    ax.plot([lo, hi], [lo, hi], color="0.6", linestyle="--", linewidth=0.8, label="final = initial")
    log_axis(ax, "x")
    log_axis(ax, "y")
    ax.set(xlabel="initial weight norm ‖W₀‖_F", ylabel="final weight norm ‖W‖_F")
    fig.legend(*ax.get_legend_handles_labels(), loc="outside right center", frameon=False)  # clear of the data
    return fig


def spread_vs_batch_size(runs: pd.DataFrame) -> Figure:
    """F4: spread (pp) against batch size, a line per optimiser (95 % seed-resampled interval, `cells.spread_cells`)."""
    cs = tables.config_spreads(runs)
    fig, (ax,) = new_figure(width=4.6, height=3.4)
    others = [c for c in dict.fromkeys(["optimizer", *tables.label_columns(cs)])
              if c != "batch_size" and c in cs.columns]
    groups = list(cs.groupby(others, sort=False))  # a list of columns: every key is a tuple
    per = pd.Series([key[0] for key, _ in groups])  # the optimiser: its look, in shades where it has several lines
    for k, (key, g) in enumerate(groups):
        g = g.sort_values("batch_size")
        color, marker = style.optimizer_look(key[0])
        mean_line(ax, g["batch_size"], g["spread_pp"], cells.interval_err(g), marker=marker,
                  color=style.shade(color, int((per[:k] == key[0]).sum()), int((per == key[0]).sum())),
                  label=" ".join(tables.fmt_value(v) for v in key))
    sizes = sorted(cs["batch_size"].unique())
    ax.set_xscale("log", base=2)
    ax.set_xticks(sizes, [str(int(b)) for b in sizes])
    ax.minorticks_off()
    ax.set(xlabel="batch size b", ylabel="test-accuracy spread across σ_w (pp)")
    ax.set_ylim(bottom=-0.5)  # spreads are >= 0; a zero stays visible
    legend(ax)
    return fig


def spread_heatmap(runs: pd.DataFrame, table: pd.DataFrame | str | None = None) -> Figure:
    """F5: T3's grid (`table`, else `tables.lr_l2_table(runs)`) as a heatmap of its spreads with their numbers."""
    t = table if isinstance(table, pd.DataFrame) else tables.lr_l2_table(runs)
    aside = ("_std", "_lo", "_hi")  # a cell's spread and beside it its interval: only the spread is drawn
    cells = [c for c in t.columns if c.startswith("wd=") and not c.endswith(aside)]
    lead = [c for c in t.columns if c not in cells and not c.endswith(aside) and c != "diverged"]
    z = t[cells].to_numpy(dtype=float)
    fig, (ax,) = new_figure(width=1.2 * len(cells) + 2.4, height=0.45 * len(t) + 1.8)
    im = ax.imshow(z, cmap="magma_r", aspect="auto", vmin=0, vmax=max(1.0, float(np.nanmax(z)) if z.size else 1))
    narrowed = set(t.attrs.get("narrowed", ()))
    for (i, j), v in np.ndenumerate(z):
        if not math.isnan(v):
            ax.text(j, i, f"{v:.1f}" + ("*" if (i, cells[j]) in narrowed else ""), ha="center", va="center",
                    fontsize=7, color="white" if v > 0.6 * im.norm.vmax else "black")
    ax.set_xticks(range(len(cells)), [c.split("=", 1)[1] for c in cells])
    ax.set_yticks(range(len(t)), [" ".join(tables.fmt_value(v) for v in r) for r in t[lead].itertuples(index=False)])
    ax.set_xlabel("L2 weight decay λ" + ("\n* spread over fewer σ_w than run: a σ_w's runs diverged"
                                         if narrowed else ""))
    ax.set_ylabel(" ".join("learning rate η" if c == "lr" else c for c in lead))
    ax.grid(False)
    fig.colorbar(im, ax=ax, label="spread across σ_w (pp)")
    return fig


def depth_interpolation_map(runs: pd.DataFrame) -> Figure:
    """F6: per optimiser, architecture × σ_w coloured by test accuracy (%), marked with the interpolation epoch or
    ✗ where no seed interpolated (deep nets that fail to train at large σ_w)."""
    confs = tables.configurations(runs)
    archs = sorted(confs["arch"].unique(), key=lambda a: tables.order_key("arch", a))
    opts = sorted(confs["optimizer"].unique(), key=lambda o: tables.order_key("optimizer", o))
    sigmas = sorted(confs["sigma_w"].unique())
    fig, axes = new_figure(ncols=len(opts), width=0.6 * len(sigmas) * len(opts) + 1.8, height=0.5 * len(archs) + 1.5)
    norm = Normalize(100 * confs["test_acc_at_best"].min(), 100 * confs["test_acc_at_best"].max())
    for ax, opt in zip(axes, opts, strict=True):
        z = np.full((len(archs), len(sigmas)), np.nan)
        for (i, a), (j, s) in ((ia, js) for ia in enumerate(archs) for js in enumerate(sigmas)):
            r = confs[(confs["arch"] == a) & (confs["optimizer"] == opt) & (confs["sigma_w"] == s)]
            if r.empty:
                continue
            z[i, j] = 100 * r["test_acc_at_best"].astype(float).mean()
            tau = r["tau_interp"].dropna()
            acc = "–" if math.isnan(z[i, j]) else f"{z[i, j]:.1f}"
            ax.text(j, i, f"{acc}\n{'✗' if tau.empty else f'ep {tau.median():.0f}'}", ha="center", va="center",
                    fontsize=6, linespacing=1.1, color="white" if norm(z[i, j]) < 0.5 else "black")
        im = ax.imshow(z, cmap="viridis", norm=norm, aspect="auto")
        ax.set_xticks(range(len(sigmas)), [f"{s:g}" for s in sigmas])
        ax.set_yticks(range(len(archs)), archs)
        ax.set(xlabel="σ_w", title=opt)
        ax.grid(False)
    fig.colorbar(im, ax=list(axes), label="test accuracy (%)")
    return fig


def spread_vs_clocks(runs: pd.DataFrame) -> Figure:
    """F7: spread (pp) of every configuration against its clocks at the end of training (which, unlike the best
    epoch, do not depend on σ_w): a row per section, the other sections' configurations in grey behind; how many
    zero clocks a log axis leaves off is said under each column."""
    cs = style.config_looks(tables.config_spreads(runs))
    fig, axes, legends, sections = style.config_rows(cs, len(tables.CLOCKS))
    for row, section, lax in zip(axes, sections, legends, strict=True):
        mine = cs["section"] == section
        for ax, clock in zip(row, tables.CLOCKS, strict=True):
            drawn = cs[clock] > 0
            style.context_points(ax, cs[~mine & drawn], clock)
            style.config_points(ax, cs[mine & drawn], clock)
        style.config_legend(lax, row, cs[mine], section)
    for ax, clock in zip(axes[-1], tables.CLOCKS, strict=True):
        skipped = int((~(cs[clock] > 0)).sum())
        if (cs[clock] > 0).any():
            ax.set_xscale("log")
            ax.xaxis.set_minor_formatter(ticker.NullFormatter())
        ax.set_xlabel(CLOCK_NAMES[clock] + "\n(end of training)"
                      + (f"\n{skipped} configuration(s) with {clock} = 0 not shown" if skipped else ""))
    style.spread_label(fig, axes)
    return fig


def repair_gap_bars(runs: pd.DataFrame) -> Figure:
    """F8: repair gap (pp) per configuration: the mean over its runs that interpolated, whiskers min–max, a bar in
    its optimiser's colour."""
    cs = tables.config_spreads(runs)
    labels = [f"{r.section[:2]} {r.label}" for r in cs.itertuples()]
    fig, (ax,) = new_figure(width=5.8, height=0.22 * len(cs) + 1.4)
    y = np.arange(len(cs))
    mean = cs["repair_gap_pp"].to_numpy(dtype=float)
    err = np.abs(np.vstack([mean - cs["repair_gap_pp_min"].to_numpy(dtype=float),
                            cs["repair_gap_pp_max"].to_numpy(dtype=float) - mean]))
    ax.barh(y, np.nan_to_num(mean), xerr=np.nan_to_num(err), capsize=2, height=0.7,
            color=[style.optimizer_look(o)[0] for o in cs["optimizer"]], error_kw={"linewidth": 0.8})
    for yi, m in zip(y, mean, strict=True):  # a zero bar has no length: its number says it is there
        if math.isnan(m) or abs(m) < 0.05:
            ax.text(0, yi, " never interpolated" if math.isnan(m) else " 0.0", va="center", fontsize=6,
                    color="0.4" if math.isnan(m) else "black")
    ax.axvline(0, color="0.3", linewidth=0.6)
    ax.set_yticks(y, labels)
    ax.invert_yaxis()
    ax.set_xlabel("repair gap: val. acc. final − at τ_interp (pp)")
    ax.grid(axis="y", visible=False)
    if any(r.optimizer not in r.label.split() for r in cs.itertuples()):  # a label that does not name its optimiser
        names = list(dict.fromkeys(cs["optimizer"]))
        fig.legend([Patch(color=style.optimizer_look(o)[0]) for o in names], names, loc="outside right upper",
                   frameon=False, title="optimiser", title_fontsize=7)
    return fig


def training_curves(runs: pd.DataFrame, histories: pd.DataFrame, sigma_w: float = 1.0,
                    optimizers: Sequence[str] = ("sgd", "adam")) -> Figure:
    """F9: training and validation curves of one run per optimiser at the σ_w nearest `sigma_w` that all have."""
    sel = runs[runs["optimizer"].isin(optimizers)]
    ran = set(sel["sigma_w"])
    common = ran.intersection(*(set(sel.loc[sel["optimizer"] == o, "sigma_w"]) for o in optimizers)) or ran
    if not common:
        raise NoResults(f"no runs of optimizer {' or '.join(optimizers)}")
    s = min(common, key=lambda v: (abs(math.log(v / sigma_w)), v))
    fig, axes = new_figure(ncols=2, width=7.0, height=3.0)
    for opt in (o for o in optimizers if o in set(sel["optimizer"])):
        r = sel[(sel["optimizer"] == opt) & (sel["sigma_w"] == s)].sort_values(["seed", "run_id"])
        if r.empty:
            continue
        h = histories[histories["run_id"] == r["run_id"].iloc[0]].sort_values("epoch")
        for ax, col, what in ((axes[0], "train_acc", "train"), (axes[0], "val_acc", "val"),
                              (axes[1], "train_loss", "train"), (axes[1], "val_loss", "val")):
            color, marker = style.optimizer_look(opt)
            ax.plot(h["epoch"], (100 if col.endswith("acc") else 1) * h[col], color=color, marker=marker,
                    markevery=0.1, markersize=3, linestyle="-" if what == "train" else "--", label=f"{opt} {what}")
    for ax, what, unit in zip(axes, ("accuracy", "loss"), (" (%)", ""), strict=True):
        ax.set(xlabel="epoch", ylabel=what + unit, title=f"{what}, σ_w = {s:g}")
    axes[1].set_yscale("log")
    fig.legend(*axes[0].get_legend_handles_labels(), loc="outside right center", frameon=False)  # clear of the data
    return fig


def spread_vs_effective_lr(runs: pd.DataFrame) -> Figure:
    """The matched-learning-rate control: each configuration's spread (pp, 95 % seed interval) against its effective
    lr (`tables.effective_lr_table`), one marker and colour per optimiser name, filled at the selected epoch and
    hollow at the last (where every network has interpolated): memory that follows the effective lr puts both names
    on one curve; memory that follows the name keeps them apart."""
    t = tables.effective_lr_table(runs)
    fig, (ax,) = new_figure(width=4.8, height=3.0)
    for k, (name, g) in enumerate(t.groupby("optimizer", sort=False)):
        g = g.sort_values("effective_lr")
        x = g["effective_lr"] * 1.05 ** (k - 0.5)  # dodged apart (±2.5 %) so that equal effective lrs both show
        lrs = ", ".join(f"{v:g}" for v in g["lr"])  # the nominal lrs, in the legend: labels at the markers collide
        color, marker = style.optimizer_look(name)
        ax.errorbar(x, g["spread_pp"], yerr=cells.interval_err(g), marker=marker, capsize=2,
                    linestyle=":", linewidth=0.8, color=color, label=f"{name} (lr {lrs}), selected epoch")
        last = g.rename(columns=lambda c: c.removeprefix("last_") if c.startswith("last_spread") else "_" + c)
        ax.errorbar(x * 1.1, last["spread_pp"], yerr=cells.interval_err(last), marker=marker, capsize=2,
                    linestyle="none", color=color, markerfacecolor="white", label=f"{name}, last epoch")
    log_axis(ax, "x")
    ax.set_xlim(min(t["effective_lr"]) / 2, max(t["effective_lr"]) * 2)
    ax.set_ylim(bottom=0)
    ax.set_xlabel("effective learning rate (lr / (1 − β) for SGD+momentum)")
    ax.set_ylabel("test-accuracy spread across σ_w (pp)")
    legend(ax, title="optimiser", loc="lower left")
    return fig
