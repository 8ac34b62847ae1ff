"""One point as a researcher reads it, from its `run_point` (or `load_runs`) rows: what the section notebooks show at
their end (`show_point`) and the sweep prints per point (`sweep_row`), every cell by `display`'s rule. A spread
between networks at chance accuracy (`at_chance`) is said to be no memory (`chance_warning`)."""

import math
from collections.abc import Sequence

import matplotlib
import pandas as pd
from matplotlib.figure import Figure

from initmem import metrics
from initmem.analysis import cells, display, plots, style, tables
from initmem.config import NUM_CLASSES
from initmem.errors import ConfigError, NoResults

RUN_TABLE_COLUMNS = ("sigma_w", "seed", "status", "test_acc_at_best", "best_epoch", "tau_interp", "repair_gap",
                     "init_weight_norm", "final_weight_norm", "norm_ratio", "T_SGD", "T_L2", "T_adapt", "wall_time_s")
RUN_TABLE_EXTRA = ("diverged_epoch", "angle_final", "Theta_final")  # where the runs have them (newer records)
CHANCE_FACTOR = 1.5  # a network whose test accuracy is at most 1.5 x chance (1 / NUM_CLASSES) has learnt ~nothing
INTERPOLATION_COLUMNS = ("arch", "sigma_w", "seed", "status", "interpolated", "tau_interp", "final_train_acc",
                         "test_acc_at_best")


def check_runs(runs: pd.DataFrame, need: Sequence[str]) -> None:
    """ConfigError unless `runs` is a DataFrame with the columns `need` (load_runs / run_point rows)."""
    if not isinstance(runs, pd.DataFrame) or (missing := set(need) - set(runs.columns)):
        raise ConfigError(f"got {type(runs).__name__} lacking columns "
                          f"{sorted(missing) if isinstance(runs, pd.DataFrame) else list(need)}: "
                          "the rows of run_point (or load_runs) are accepted")


def at_chance(runs: pd.DataFrame) -> bool:
    """Whether every network of `runs` with a test accuracy (at the selected epoch) is at chance, at most
    `CHANCE_FACTOR` / `NUM_CLASSES`: a spread between such networks is noise, not a memory of the initialisation."""
    acc = pd.to_numeric(runs["test_acc_at_best"], errors="coerce").dropna()
    return len(acc) > 0 and bool((acc <= CHANCE_FACTOR / NUM_CLASSES).all())


def chance_warning(runs: pd.DataFrame, spread_pp: float | None) -> str | None:
    """"spread 3.1 pp between networks at chance (every test accuracy <= 15 %): not a memory", where `at_chance`."""
    if spread_pp is None or not math.isfinite(spread_pp) or not at_chance(runs):
        return None
    return (f"spread {display.number(spread_pp, 'percent')} pp between networks at chance (every test accuracy "
            f"<= {100 * CHANCE_FACTOR / NUM_CLASSES:g} %): not a memory")


def run_rows(runs: pd.DataFrame) -> pd.DataFrame:
    """The numbers a reader checks first, a row per run by σ_w and seed (accuracies as fractions, as in run.json)."""
    check_runs(runs, RUN_TABLE_COLUMNS)
    cols = [*RUN_TABLE_COLUMNS, *(c for c in RUN_TABLE_EXTRA if c in runs.columns)]
    return runs[cols].sort_values(["sigma_w", "seed"]).reset_index(drop=True)


def run_table(runs: pd.DataFrame) -> pd.DataFrame:
    """`run_rows` as a person reads it (`display.display_frame`, indexed by σ_w and seed)."""
    return display.display_frame(run_rows(runs), index=2)


def interpolation_rows(runs: pd.DataFrame) -> pd.DataFrame:
    """Which runs interpolate (train accuracy >= 99.5 %), a row per run by arch, σ_w and seed;
    `failed_to_interpolate` (a diverged run too): in deep ResNets a large σ_w fails to train."""
    check_runs(runs, INTERPOLATION_COLUMNS)
    t = runs[list(INTERPOLATION_COLUMNS)].sort_values(["arch", "sigma_w", "seed"]).reset_index(drop=True)
    return t.assign(failed_to_interpolate=~t["interpolated"].eq(True))


def interpolation_table(runs: pd.DataFrame) -> pd.DataFrame:
    """`interpolation_rows` as a person reads it (`display.display_frame`, indexed by arch, σ_w and seed)."""
    return display.display_frame(interpolation_rows(runs), index=3)


def _pm(x: pd.Series, kind: str) -> str:
    """'mean ± std' of the non-missing values (`display.with_std`); '–' for none."""
    return display.with_std(*cells.mean_std(pd.to_numeric(x, errors="coerce")), kind)


def point_table(runs: pd.DataFrame) -> pd.DataFrame:
    """One point as a researcher reads it, a row per σ_w, narrow enough to show whole: 'mean ± std' over seeds of the
    test accuracy at the selected epoch, that epoch, τ_interp ('never', '(k/n)' when some seeds did), the norm
    ratio, the angle at the selected epoch and Θ_final. The numbers: `run_rows`, `metrics.point_summary`."""
    check_runs(runs, ("sigma_w", "seed", "test_acc_at_best", "tau_interp"))
    if runs.empty:
        raise NoResults("no runs")
    if "section" in runs.columns and (n := tables.configurations(runs)["config"].nunique()) > 1:
        raise ConfigError(f"point_table got the runs of {n} configurations: one point's runs (run_point's rows, or "
                          "load_runs rows of one configuration) are accepted")
    rows = []
    for s, r in runs.groupby("sigma_w", sort=True):
        acc = _pm(r["test_acc_at_best"], "fraction")
        tau = r["tau_interp"].dropna()
        when = "never" if tau.empty else _pm(tau, "count") + (f" ({len(tau)}/{len(r)})" if len(tau) < len(r) else "")
        get = (lambda c, r=r: _pm(r[c], display.column_kind(c)) if c in r.columns else "–")
        status = r["status"].value_counts() if "status" in r.columns else pd.Series({"complete": len(r)})
        status = ", ".join(f"{n} {k}" for k, n in sorted(status.items(), key=lambda kv: (kv[0] != "complete", kv[0])))
        rows.append({"σ_w": float(s), "runs": status,
                     "test acc (%)": cells.DIVERGED if acc == "–" and cells.diverged_runs(r).any() else acc,
                     "best epoch": get("best_epoch"), "τ_interp": when, "norm ratio": get("norm_ratio"),
                     "angle at best (°)": get("angle_at_best"), "Θ_final (rad)": get("Theta_final")})
    return pd.DataFrame(rows).set_index("σ_w")


def sweep_row(runs: pd.DataFrame | None, point_id: str, run_ids: list[str]) -> dict:
    """One point's line of the sweep's end-of-run table (and `initmem run`'s): runs there, accuracy per sigma_w, the
    spread, interpolated and diverged runs, the largest tau_interp and runs whose population failed."""
    r = runs[runs["run_id"].isin(run_ids)] if runs is not None and len(runs) else pd.DataFrame()
    row: dict = {"point": point_id, "runs": f"{len(r)}/{len(set(run_ids))}"}
    if len(r):
        s = metrics.point_summary(r)
        row.update({f"acc@{k:g}": round(100 * v, 1) for k, v in s["test_acc_by_sigma_w"].items()})
        row["spread_pp"] = round(s["spread_pp"], 1) if s["spread_pp"] is not None else None
        row["interpolated"] = f"{s['n_interpolated']}/{s['n_runs']}"
        if s["n_diverged"]:
            row["diverged"] = f"{s['n_diverged']}/{s['n_runs']}"
        row["max_tau_interp"] = r["tau_interp"].max()
        if s["spread_pp"] is not None and at_chance(r):
            row["warning"] = "at chance: not a memory"  # `chance_warning`
        fell = r["population_fallback"].dropna() if "population_fallback" in r.columns else pd.Series(dtype=object)
        if len(fell):
            row["population_fallback"] = f"{len(fell)}/{len(r)} one by one: {fell.iloc[0]}"
    return row


def point_figure(runs: pd.DataFrame, histories: pd.DataFrame | None = None) -> Figure:
    """One point at a glance: test accuracy against σ_w (✗ where a σ_w's runs diverged) with the spread, and the
    weight norm and the angle from initialisation over epochs per σ_w; `histories` default to the runs' own."""
    check_runs(runs, ("run_id", "sigma_w", "seed", "status", "test_acc_at_best", "interpolated"))
    if runs.empty:
        raise NoResults("no runs")
    if histories is None and "path" not in runs.columns:
        histories = pd.DataFrame(columns=["run_id", "epoch"])
    h = style.with_sigma(tables.run_histories(runs, histories), runs)
    sigmas = sorted(runs["sigma_w"].unique())
    colors = style.sigma_colors(sigmas)
    with matplotlib.rc_context(style.STYLE):
        fig, (a, b, c) = style.new_figure(ncols=3, width=8.0, height=2.6)
        acc = 100 * pd.to_numeric(runs["test_acc_at_best"], errors="coerce").groupby(runs["sigma_w"]).agg(
            ["mean", "std"])
        plots.mean_line(a, acc.index, acc["mean"], acc["std"], color="C0")
        lost = [s for s in sigmas if math.isnan(acc.loc[s, "mean"])]
        for s in lost:
            a.annotate("✗ diverged", (s, 0.03), xycoords=("data", "axes fraction"), ha="center", fontsize=6,
                       color="C3")
        style.sigma_axis(a, sigmas)
        summary = cells.point_spread(runs)[0]
        spread = "" if math.isnan(summary) else f"\nspread {summary:.1f} pp" + (
            " at chance" if at_chance(runs) else "")  # not a memory: `chance_warning`
        a.set(title="test acc. at selected epoch" + spread
              + (f" over {len(sigmas) - len(lost)}/{len(sigmas)} σ_w" if lost else ""), ylabel="test accuracy (%)")
        for ax, col, what, unit in ((b, "weight_norm", "weight norm", " ‖W‖_F"),
                                    (c, "angle", "angle from initialisation", " (°)")):
            ax.set(title=what + unit, xlabel="epoch")
            if not style.has_values(h, col):
                ax.set_axis_off()
                ax.text(0.5, 0.5, f"no {what} recorded\n(runs predate the instrument)",
                        ha="center", va="center", fontsize=7, color="0.4", transform=ax.transAxes)
                continue
            style.sigma_lines(ax, h, col, sigmas, colors)
            lo, hi = ax.get_ylim()
            if col == "weight_norm" and lo > 0 and hi / lo > 3:  # log only where the norms span a factor
                style.log_axis(ax, "y")
        style.legend(c if style.has_values(h, "angle") else b, fontsize=6)
    return fig


def summary_table(runs: pd.DataFrame) -> pd.DataFrame:
    """`metrics.point_summary` as a small two-column table a person reads (not a raw dict)."""
    s = metrics.point_summary(runs)
    c = cells.spread_cells(runs, multi=True)  # T1's definition: the spread of seed means, its seed-resampled interval
    spread = display.number(c["spread_pp"], "percent") + (
        " (one seed: no interval)" if math.isnan(c["spread_pp_lo"]) else
        f" [{display.number(c['spread_pp_lo'], 'percent')}, {display.number(c['spread_pp_hi'], 'percent')}] (95 %)")
    sig = (lambda v: "–" if v is None else f"{v:g}")
    rows = {"spread across σ_w (pp)": spread, "best σ_w": sig(s["best_sigma_w"]),
            "worst σ_w": sig(s["worst_sigma_w"]), "σ_w × seeds": f"{len(s['sigma_ws'])} × {len(s['seeds'])}",
            "runs interpolated": f"{s['n_interpolated']}/{s['n_runs']}",
            "runs diverged": f"{s['n_diverged']}/{s['n_runs']}"}
    if warning := chance_warning(runs, c["spread_pp"]):
        rows["warning"] = warning
    if s["sigma_ws_missing"]:
        rows["σ_w without accuracy"] = ", ".join(f"{v:g}" for v in s["sigma_ws_missing"])
    return pd.DataFrame({"value": rows}).rename_axis("the point")


def show_point(runs: pd.DataFrame) -> None:
    """Display the point's views in a notebook, each group under the line that says what it shows."""
    from IPython.display import Markdown, display
    for text, views in (
            ("The point as a researcher reads it: per `sigma_w` (mean ± std over seeds), the test accuracy at the "
             "selected (best-validation) epoch, the interpolation epoch, the final/initial weight-norm ratio (radial "
             "memory), how far the network turned from its initialisation (degrees) and the measured forgetting clock "
             "Θ; then test accuracy against `sigma_w`, and the weight norm and the angle from initialisation over "
             "training.", (point_table, point_figure)),
            ("One row per run: test accuracy at the best-validation epoch, the interpolation epoch, the initial and "
             "final weight norms (radial memory), the angle from initialisation and the forgetting clocks at the end "
             "of training.", (run_table,)),
            ("The point's numbers: the spread across `sigma_w` (pp), which `sigma_w` is best and worst, how many runs "
             "interpolated or diverged.", (summary_table,))):
        display(Markdown(text), *(view(runs) for view in views))
