"""The forgetting instruments' tables (T6–T8, F12's numbers), built like `tables`; runs recorded before the instruments
are skipped, a table with nothing left raises `NoResults`. The F11/F12 captions' numbers: `*_sentence`."""

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from initmem import metrics
from initmem.analysis import cells, display, tables
from initmem.errors import ConfigError, NoResults

HEAD = "head"  # the classifier layer (`models`: `model.head`): no BatchNorm after it, so not scale-invariant
# the measured forgetting of a configuration (`tables.config_spreads` columns) and how captions name them
MEASURED = {"angle_range_deg": "σ_w-range of the angle at the selected epoch", "Theta_final": "Θ_final"}
UNFOLD_CLOCKS = ("T_SGD", "T_adapt", "T_L2", "Theta_slowest")  # F12's x axes, in panel order


def equilibrium_angle(optimizer: str, lr: float, weight_decay: float, momentum: float = 0.0,
                      betas: Sequence[float] = (0.9, 0.999)) -> float | None:
    """The per-step angle (radians) of a scale-invariant weight (conv + BatchNorm) at the equilibrium of weight decay
    and gradient, as the literature states it: SGD with coupled L2 λ and heavy-ball β (0 for `sgd`)
    sqrt(2ηλ / (1 + β)) (spherical motion dynamics, Wan et al., NeurIPS 2021); AdamW with decoupled λ (torch's
    W ← (1 − ηλ) W) sqrt(2ηλ (1 − β1) / (1 + β1)) (rotational equilibrium, Kosson et al., ICML 2024). None without
    weight decay (no equilibrium), for Adam's coupled L2 (no closed form) and Muon. It is reached after ~1 / (2ηλ)
    steps: a run with T_L2 = λ Σ η well below 1 has not."""
    for name, v in (("lr", lr), ("weight_decay", weight_decay), ("momentum", momentum)):
        if isinstance(v, bool) or not isinstance(v, (int, float, np.number)) or not math.isfinite(v) or v < 0:
            raise ConfigError(f"{name}={v!r} is invalid: a finite real >= 0 is accepted")
    if momentum >= 1:
        raise ConfigError(f"momentum={momentum!r} is invalid: a real in [0, 1) is accepted")
    if not weight_decay or not lr:
        return None
    if optimizer in ("sgd", "sgd_momentum"):  # heavy-ball beta: sgd_momentum's momentum
        return math.sqrt(2 * lr * weight_decay / (1 + (float(momentum) if optimizer == "sgd_momentum" else 0.0)))
    if optimizer == "adamw":
        return math.sqrt(2 * lr * weight_decay * (1 - float(betas[0])) / (1 + float(betas[0])))
    return None


def step_angle_at_end(history: pd.DataFrame, tail: float = 0.1) -> float:
    """A run's measured per-step angle (rad) at the end: the median over its layers but the head of each epoch's, mean
    over the last `tail` fraction of the epochs with a value (at least the last one); NaN without the instruments."""
    cols = [c for c in history.columns if c.startswith("step_angle:") and c != f"step_angle:{HEAD}"]
    if not cols:
        return math.nan
    h = history[history["epoch"] >= 1].sort_values("epoch")
    per_epoch = h[cols].apply(pd.to_numeric, errors="coerce").median(axis=1, skipna=True).dropna()
    if per_epoch.empty:
        return math.nan
    k = max(1, math.ceil(tail * len(per_epoch) - 1e-9))
    return float(per_epoch.iloc[-k:].mean())


def equilibrium_table(runs: pd.DataFrame, histories: pd.DataFrame | None = None, tail: float = 0.1,
                      tolerance: float = 0.1) -> pd.DataFrame:
    """T6: per weight-decay configuration with the instruments, the `predicted` equilibrium angle against the measured
    `step_angle_at_end` per σ_w, their ratio, `sigma_rel_spread` ((max − min) / mean over σ_w), `independent_of_sigma`
    (<= `tolerance`: the equilibrium forgets the initial scale) and T_L2 (it must be of order 1)."""
    confs = tables.configurations(runs)
    h = tables.run_histories(confs, histories)
    measured = {rid: step_angle_at_end(hh, tail) for rid, hh in h.groupby("run_id")} if len(h) else {}
    confs = confs.assign(step_angle_end=confs["run_id"].map(measured).astype(float))
    wd = pd.to_numeric(confs["weight_decay"], errors="coerce").fillna(0) > 0
    has = confs[wd].groupby("config")["step_angle_end"].transform(lambda x: x.notna().any())
    confs = confs[wd][has.astype(bool)]
    if confs.empty:
        raise NoResults("no weight-decay configuration with the per-step angle instruments (runs recorded before "
                        "them have none)")
    lead, sigmas = tables.label_columns(confs), sorted(confs["sigma_w"].unique())
    rows = []
    for _, g in confs.groupby("config", sort=True):
        first = g.iloc[0]
        betas = first["betas"] if "betas" in g.columns and isinstance(first["betas"], (tuple, list)) else (0.9, 0.999)
        momentum = float(first["momentum"]) if "momentum" in g.columns and pd.notna(first["momentum"]) else 0.0
        pred = equilibrium_angle(str(first["optimizer"]), float(first["lr"]), float(first["weight_decay"]),
                                 momentum, betas)
        by = g.groupby("sigma_w")["step_angle_end"].mean().dropna()
        ratio = by / pred if pred else pd.Series(dtype=float)
        rel = float((by.max() - by.min()) / by.mean()) if len(by) >= 2 and by.mean() > 0 else math.nan
        rows.append({**cells.lead_cells(g, lead),
                     "predicted": math.nan if pred is None else pred,
                     **cells.sigma_cells(g, sigmas, False, "step_angle_end", scale=1.0),
                     "ratio_min": float(ratio.min()), "ratio_max": float(ratio.max()), "sigma_rel_spread": rel,
                     "independent_of_sigma": "–" if math.isnan(rel) else ("yes" if rel <= tolerance else "no"),
                     "T_L2": tables.run_median(g, "T_L2")})
    return cells.finish(pd.DataFrame(rows), {"predicted": "fine", "sigma_w=*": "fine", "ratio_*": "fine",
                                                   "sigma_rel_spread": "decimal2"})


def spearman(x: pd.Series, y: pd.Series) -> float:
    """Spearman's rank correlation (average ranks for ties); NaN with fewer than 3 pairs or a constant side."""
    rx, ry = x.rank(method="average").to_numpy(float), y.rank(method="average").to_numpy(float)
    if len(rx) < 3 or np.ptp(rx) == 0 or np.ptp(ry) == 0:
        return math.nan
    return float(np.corrcoef(rx, ry)[0, 1])


def instrumented(cs: pd.DataFrame) -> pd.DataFrame:
    """The `config_spreads` rows with a measured forgetting (`MEASURED`); NoResults when none has."""
    cs = cs[cs[list(MEASURED)].notna().any(axis=1)]
    if cs.empty:
        raise NoResults("no configuration with the forgetting instruments (angle, Theta: runs recorded before them "
                        "have none)")
    return cs


def clock_correlations(runs: pd.DataFrame) -> pd.DataFrame:
    """T7: over the configurations with the instruments, the Spearman ρ of the spread with each measured forgetting
    (`MEASURED`) and, on the same configurations, with F7's clocks (`_eff` ones where recorded): a row per x."""
    cs = tables.config_spreads(runs)
    cs = instrumented(cs[cs["spread_pp"].notna()])
    rows = []
    for x in [*MEASURED, *tables.CLOCKS, *tables.EFF_CLOCKS]:
        ok = cs[cs[x].notna()] if x in cs.columns else cs.iloc[:0]
        if x in tables.EFF_CLOCKS and ok.empty:
            continue
        rows.append({"x": x, "kind": "measured" if x in MEASURED else "clock", "n_configs": len(ok),
                     "n_sections": ok["section"].nunique(), "spearman": spearman(ok[x], ok["spread_pp"])})
    return cells.finish(pd.DataFrame(rows), {"spearman": "signed"})


def signed(v: float) -> str:
    """A correlation as captions show it: '+0.83', '−0.40', '–' when undefined."""
    return display.number(v, "signed").replace("-", "−")


def correlation_sentence(corr: pd.DataFrame | str) -> str:
    """F11's caption from `clock_correlations`: 'Spearman ρ of the spread with: … +0.83, Θ_final −0.40 (measured) vs
    T_SGD −0.10, … (clocks); n = 12 configuration(s) of 3 section(s)'; '' for a placeholder message."""
    if not isinstance(corr, pd.DataFrame) or corr.empty:
        return ""

    def part(kind: str) -> str:  # the study's clocks only: the `_eff` variants are in the table
        return ", ".join(f"{MEASURED.get(r.x, r.x)} {signed(r.spearman)}" for r in corr[corr["kind"] == kind]
                         .itertuples() if r.x not in tables.EFF_CLOCKS)

    n, k = (int(x) for x in corr.loc[corr["kind"] == "measured", ["n_configs", "n_sections"]].max())
    return (f"Spearman ρ of the spread with: {part('measured')} (measured) vs {part('clock')} (clocks); "
            f"n = {n} configuration(s) of {k} section(s)")


def unfolding_table(runs: pd.DataFrame, histories: pd.DataFrame | None = None,
                    rules: Sequence[str] = tuple(metrics.SELECTION_RULES)) -> pd.DataFrame:
    """F12's numbers: per configuration, measured epoch e >= 1 and selection rule, `metrics.point_summary`'s spread
    had training stopped at e (a diverged run keeps its last selection; `n_sigma_in_spread` of `n_sigma`) and the
    clocks at e (mean over the runs), with `Theta_slowest`: the smallest over σ_w of the seed-mean Θ (a spread can
    vanish only once every σ_w has turned)."""
    rules = [metrics.check_rule(r) for r in rules]
    confs = tables.configurations(runs)
    h = tables.run_histories(confs, histories, trained=True)
    # one run id can be in two sections (the same config run by both): a history is its section's and run id's
    key = ["section", "run_id"] if "section" in h.columns else ["run_id"]
    h = h[[c for c in (*key, "epoch", "val_loss", "val_acc", "test_acc", "T_SGD", "T_L2", "T_adapt", "Theta")
           if c in h.columns]]  # what is read: selecting on a narrow frame is several times faster
    by_run = {k: hh.sort_values("epoch") for k, hh in h.groupby(key)}
    frames = []
    for cid, g in confs.groupby("config", sort=True):
        g = g[[k in by_run for k in g[key].itertuples(index=False, name=None)]]
        if g.empty:
            continue
        hs = [by_run[k] for k in g[key].itertuples(index=False, name=None)]  # the runs' histories, in g's order
        epochs = sorted(set().union(*(hh["epoch"] for hh in hs)))
        clocks = {c: _at_epochs(hs, c, epochs) for c in ("T_SGD", "T_L2", "T_adapt", "Theta")}
        theta = clocks.pop("Theta").groupby(g["sigma_w"].to_numpy()).mean().min(axis=0)
        base = {"section": g["section"].iloc[0], "config": cid, "label": g["label"].iloc[0],
                "n_sigma": g["sigma_w"].nunique(), **{c: v.mean(axis=0).to_numpy() for c, v in clocks.items()},
                "Theta_slowest": theta.to_numpy()}
        for rule in rules:
            acc = pd.DataFrame([metrics.test_at_best_by_epoch(hh, rule).reindex(epochs, method="ffill") for hh in hs],
                               columns=epochs)
            frames.append(pd.DataFrame({**base, "rule": rule, "epoch": epochs, **_spreads(acc, g)}))
    out = pd.concat(frames, ignore_index=True)
    cols = ["section", "config", "label", "rule", "epoch", "spread_pp", "spread_pp_lo", "spread_pp_hi",
            "n_sigma_in_spread", "n_sigma", "T_SGD", "T_L2", "T_adapt", "Theta_slowest"]
    return cells.finish(out[cols], {"T_*": "clock", "Theta_slowest": "clock"})


def _at_epochs(hs: list[pd.DataFrame], column: str, epochs: list[int]) -> pd.DataFrame:
    """runs × epochs: each history's `column` at each epoch it was measured at (NaN elsewhere, or without it)."""
    rows = []
    for h in hs:
        values = pd.to_numeric(h[column], errors="coerce").to_numpy(float) if column in h.columns else math.nan
        rows.append(pd.Series(values, index=h["epoch"].to_numpy()).reindex(epochs).to_numpy())
    return pd.DataFrame(rows, columns=epochs)


def _spreads(acc: pd.DataFrame, g: pd.DataFrame) -> dict:
    """For each epoch (column) of `acc` (runs × epochs), T1's spread (`metrics.point_summary`: over σ_w of the seed
    means), its 95 % seed-resampled interval (`metrics.spread_resamples`; NaN below two seeds) and its σ_w count."""
    sigma = g["sigma_w"].to_numpy()
    by_sigma = acc.groupby(sigma).mean()
    lo, hi = np.full(acc.shape[1], math.nan), np.full(acc.shape[1], math.nan)
    values = acc.to_numpy(float)  # numpy, not .loc per epoch and σ_w: F12's table has thousands of cells
    rows = [values[sigma == s] for s in np.unique(sigma)]
    for i in range(values.shape[1]):
        groups = [r[~np.isnan(r[:, i]), i] for r in rows]
        if sum(len(a) > 0 for a in groups) >= 2 and max(len(a) for a in groups) >= 2:
            lo[i], hi[i] = metrics.interval(metrics.spread_resamples(groups)[0])
    return {"spread_pp": 100 * (by_sigma.max(axis=0) - by_sigma.min(axis=0)).to_numpy(), "spread_pp_lo": lo,
            "spread_pp_hi": hi, "n_sigma_in_spread": by_sigma.notna().sum(axis=0).to_numpy()}


def collapse_table(unfold: pd.DataFrame, per_decade: int = 4) -> pd.DataFrame:
    """T8, how well F12's lines fall onto one curve: per rule and clock, over the log-clock bins (`per_decade` a
    decade) two or more configurations share, the std across configurations of their mean spread (`dispersion_pp`)
    and its ratio to the std of all those means (`collapse_ratio`: ~0 one curve, ~1 the clock says nothing);
    `ratio_theta_configs` over the configurations with Θ (one set in every column but T_L2's). NaN: no shared bin."""
    with_theta = unfold.loc[unfold["Theta_slowest"] > 0, "config"].unique()
    rows = []
    for rule in dict.fromkeys(unfold["rule"]):
        t = unfold[unfold["rule"] == rule]
        for clock in UNFOLD_CLOCKS:
            ok = t[(t[clock] > 0) & t["spread_pp"].notna()]
            n_bins, per_bin, disp, ratio = _collapse(ok, clock, per_decade)
            rows.append({"rule": rule, "clock": clock, "n_configs": ok["config"].nunique(), "n_bins": n_bins,
                         "configs_per_bin": per_bin, "dispersion_pp": disp, "collapse_ratio": ratio,
                         "ratio_theta_configs": _collapse(ok[ok["config"].isin(with_theta)], clock, per_decade)[3]})
    return cells.finish(pd.DataFrame(rows), {"configs_per_bin": "general", "dispersion_pp": "percent",
                                                   "collapse_ratio": "decimal2", "ratio_theta_configs": "decimal2"})


def _collapse(ok: pd.DataFrame, clock: str, per_decade: int) -> tuple[int, float, float, float]:
    """(shared bins, configurations per shared bin, dispersion pp, ratio) of `collapse_table` for rows `ok`."""
    if ok.empty:
        return 0, math.nan, math.nan, math.nan
    bins = np.floor(np.log10(ok[clock].to_numpy(float)) * per_decade)
    means = ok.groupby([bins, ok["config"].to_numpy()])["spread_pp"].mean()
    shared = means.groupby(level=0).filter(lambda x: len(x) >= 2)
    if shared.empty:
        return 0, math.nan, math.nan, math.nan
    per_bin = shared.groupby(level=0)
    disp, total = float(per_bin.std(ddof=1).mean()), float(shared.std(ddof=1))
    return per_bin.ngroups, float(per_bin.size().mean()), disp, disp / total if total else math.nan


def collapse_sentence(collapse: pd.DataFrame | str, rule: str = metrics.DEFAULT_RULE) -> str:
    """F12's caption from `collapse_table`: 'collapse ratio under … selection (…; 23 configurations): T_SGD 0.91 (0.53
    on Θ's 11), …, T_L2 0.70 (5 configuration(s)), Θ 0.69 (11 configuration(s))'; '' for a placeholder message."""
    if not isinstance(collapse, pd.DataFrame) or collapse.empty:
        return ""
    c = collapse[collapse["rule"] == rule]
    n = int(c["n_configs"].max())
    k = int(c.loc[c["clock"] == "Theta_slowest", "n_configs"].max())
    parts = []
    for r in c.itertuples():
        part = f"{'Θ' if r.clock == 'Theta_slowest' else r.clock} {display.number(r.collapse_ratio, 'decimal2')}"
        if r.n_configs < n:
            part += f" ({r.n_configs} configuration(s))"
        elif 0 < k < n and r.clock != "T_L2":
            part += f" ({display.number(r.ratio_theta_configs, 'decimal2')} on Θ's {k})"
        parts.append(part)
    return (f"collapse ratio under {metrics.SELECTION_RULES[rule][1]} selection (0 = one curve, 1 = the clock says "
            f"nothing; {n} configurations): " + ", ".join(parts))


def spike_table(runs: pd.DataFrame, histories: pd.DataFrame, drop: float = metrics.COLLAPSE_DROP) -> pd.DataFrame:
    """Late collapses per configuration (Adam's loss spikes, docs/findings.md): its seeds, how many runs lose their fit
    after τ_interp (`metrics.collapse_epoch`: train accuracy `drop` or more below its best since), at which epochs,
    how many are selected at or after their collapse, and the spread with its interval at the selected and the last
    epoch (`tables.rule_spreads`, each on the accuracy every run has: `tables.common_accuracy`, `last_accuracy`)."""
    common, last = tables.common_accuracy(runs), tables.last_accuracy(runs, histories)
    confs = tables.configurations(runs.assign(**{tables.LAST_TEST: last.to_numpy()}))
    lead = list(dict.fromkeys(c for s in confs["section"].unique() for c in confs.attrs["label_columns"][s]))
    by_run = {rid: h[h["epoch"] >= 1].sort_values("epoch") for rid, h in histories.groupby("run_id")}
    rows = []
    for _, g in confs.groupby("config", sort=True):
        hit = [(e, int(r.best_epoch)) for r in g.itertuples()
               if (e := metrics.collapse_epoch(by_run[r.run_id]["train_acc"], r.tau_interp, drop)) is not None]
        rows.append({**{c: g[c].iloc[0] for c in lead}, "seeds": int(g["seed"].nunique()),
                     "collapsed": f"{len(hit)}/{len(g)}",
                     "collapse_epochs": ", ".join(str(e) for e, _ in sorted(hit)) or "–",
                     "selected_after_collapse": f"{sum(b >= e for e, b in hit)}/{len(g)}",
                     **tables.rule_spreads(g, common)})
    out = cells.finish(pd.DataFrame(rows))
    out.attrs.update(accuracy=common, last_accuracy=last.attrs["accuracy"])
    return out


def selection_rule_table(runs: pd.DataFrame, histories: pd.DataFrame | None = None,
                         rules: Sequence[str] = tuple(metrics.SELECTION_RULES)) -> pd.DataFrame:
    """T1's spreads under each selection rule (`metrics.SELECTION_RULES`): per configuration, and SGD − max(adaptive)
    where T1 has that row, the spread (pp) and its 95 % seed-resampled interval with every run's accuracy re-read from
    its history at the epoch the rule picks (all 10,000 test images where every run has them there, as T1), and how
    many of the selected networks had interpolated (`selected_after_tau`: selected at or after τ_interp, 'k/n'). Does
    a verdict depend on which epoch is reported? A rule's rows equal T1's for the rule the runs were summarised with."""
    h = tables.run_histories(runs, histories, "selection_rule_table: ", trained=True)
    by_run = {rid: hh.sort_values("epoch") for rid, hh in h.groupby("run_id")}
    have = runs[runs["run_id"].isin(by_run)]
    frames = []
    for rule in [metrics.check_rule(r) for r in rules]:
        sel = have.assign(**{column: [metrics.test_at_best(by_run[rid], rule=rule, column=test)
                                      if test in by_run[rid].columns else math.nan for rid in have["run_id"]]
                             for column, test in ((cells.SUBSET_TEST, "test_acc"), (cells.FULL_TEST, "test_acc_full"))})
        t = tables.optimizer_table(sel)
        lead = list(t.columns[:next(i for i, c in enumerate(t.columns) if c.startswith("sigma_w="))])
        spread = [c for c in ("spread_pp", "spread_pp_lo", "spread_pp_hi") if c in t.columns]  # one seed: no interval
        confs = tables.configurations(sel.assign(selected=[metrics.selected_epoch(by_run[rid], rule=rule)
                                                           for rid in sel["run_id"]]))
        after = {k: f"{int((g['selected'] >= pd.to_numeric(g['tau_interp'], errors='coerce')).sum())}/{len(g)}"
                 for k, g in confs.groupby(lead, sort=False)}
        # (a run that never interpolated has τ_interp None or NaN: never "after")
        frames.append(t[[*lead, *spread]].assign(rule=metrics.SELECTION_RULES[rule][1], selected_after_tau=[
            after.get(k, "–") for k in t[lead].itertuples(index=False, name=None)]))
    out = pd.concat(frames, ignore_index=True)  # rule by rule; shown configuration by configuration, in T1's order
    first = {k: i for i, k in enumerate(dict.fromkeys(frames[0][lead].itertuples(index=False, name=None)))}
    out = out.iloc[sorted(range(len(out)), key=lambda i: first[tuple(out.loc[i, lead])])].reset_index(drop=True)
    return cells.finish(out[[*lead, "rule", *spread, "selected_after_tau"]])
