"""The clock experiment's readings (docs/experiments/clocks/README.md, registered before its runs): the memory
G(e) = acc(σ_w 0.1) − acc(σ_w 2.5) at the end of training and at marks inside long runs (constant lr: epoch e of a long
run reads as an e-epoch run), each configuration's route, the lr route's curve f(T_SGD), and the registered criteria
with what happened. Pure functions of run records and histories."""

import itertools
import math
from collections.abc import Callable

import numpy as np
import pandas as pd

from initmem import metrics
from initmem.analysis import cells, display, tables

LOW, HIGH = 0.1, 2.5  # the two σ_w of every route
BAND_PP = 3.0  # the registered tolerance: a reading falls on f within max(BAND_PP, 2 SE)
SEEDS = 3  # the design's seeds a σ_w: a criterion reads a configuration once it has them all
MARKS = (60, 120, 180, 240, 600)  # where a long run is read (those within its length)
F_LRS = (0.01, 0.0178, 0.0316, 0.0562, 0.1)  # the lr route: f's points, each lr's G at epoch 60
TIME_LRS = (0.01, 0.0562)  # the time route: 600 and 180 epochs, each decided at its last
TREES = ("results/cpu_w025_clocks", "results/cpu_w025", "results/cpu_w025_lr")  # its runs, then the routes' shared
KEY = ("optimizer", "lr", "batch_size", "weight_decay", "epochs")


def route(c: dict | pd.Series) -> str:
    """The route a configuration belongs to: Adam → adaptive; λ > 0 → L2; b ≠ 32 → batch; > 60 epochs → time;
    else the lr route (plain SGD, b = 32, 60 epochs)."""
    if c["optimizer"] == "adam":
        return "adaptive"
    if float(c["weight_decay"] or 0) > 0:
        return "L2"
    return "batch" if int(c["batch_size"]) != 32 else "time" if int(c["epochs"]) > 60 else "lr"


def clock_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs the experiment reads: plain SGD and Adam at σ_w 0.1 and 2.5 (the trees hold others too)."""
    keep = runs["optimizer"].isin(["sgd", "adam"]) & runs["sigma_w"].isin([LOW, HIGH])
    return runs[keep].reset_index(drop=True)


def _mean_resamples(x: np.ndarray) -> np.ndarray:
    """Every mean of `x` resampled with replacement (all n^n draws: n ≤ 6 seeds here)."""
    return np.array([np.mean(c) for c in itertools.product(x, repeat=len(x))])


def gap(low: np.ndarray, high: np.ndarray) -> dict:
    """G = mean(low) − mean(high) (pp), its SE from the seed std, its 95 % interval with seeds resampled within
    each σ_w (exact enumeration), and n (the smaller seed count)."""
    g = float(np.mean(low) - np.mean(high))
    se = math.sqrt(np.var(low, ddof=1) / len(low) + np.var(high, ddof=1) / len(high)) \
        if min(len(low), len(high)) > 1 else math.nan
    lo, hi = metrics.interval(np.subtract.outer(_mean_resamples(low), _mean_resamples(high)).ravel())
    return {"G_pp": g, "se_pp": se, "G_lo": lo, "G_hi": hi, "n": int(min(len(low), len(high)))}


def readings(runs: pd.DataFrame, histories: pd.DataFrame) -> pd.DataFrame:
    """A row per configuration and mark e: its route, the clocks reached at e (mean over runs), G(e) with SE,
    interval and n (`gap`, on each run's `metrics.end_accuracy` at e, in pp), and the runs fitted at e
    (train accuracy ≥ `metrics.THRESHOLD` on the train-eval subset) as 'k/n'."""
    runs = clock_runs(runs)
    by_run = {rid: h for rid, h in histories[histories["run_id"].isin(runs["run_id"])].groupby("run_id")}
    rows = []
    for key, g in runs.groupby(list(KEY), sort=True, dropna=False):
        cfg = dict(zip(KEY, key, strict=True))
        g = g[g["run_id"].isin(by_run)]
        for e in (m for m in MARKS if m <= cfg["epochs"]):
            at = {r.run_id: by_run[r.run_id].set_index("epoch").loc[e] for r in g.itertuples()}
            acc = {s: np.array([100 * metrics.end_accuracy(by_run[r], end=e) for r in gs["run_id"]])
                   for s, gs in g.groupby("sigma_w")}
            if set(acc) != {LOW, HIGH}:
                continue
            fitted = sum(float(a["train_acc"]) >= metrics.THRESHOLD for a in at.values())
            rows.append({"route": route(cfg), **cfg, "epoch": e, **{c: float(np.mean([a[c] for a in at.values()]))
                         for c in tables.CLOCKS}, **gap(acc[LOW], acc[HIGH]), "fitted": f"{fitted}/{len(at)}"})
    return pd.DataFrame(rows)


def curve(r: pd.DataFrame) -> pd.DataFrame:
    """f's points: each `F_LRS` lr's G at epoch 60 (its 60-epoch runs where they exist, else the first 60 epochs of
    its time-route runs), ordered by T_SGD."""
    sgd = r[(r["optimizer"] == "sgd") & (r["batch_size"] == 32) & (r["weight_decay"].fillna(0) == 0)
            & (r["epoch"] == 60) & r["lr"].round(6).isin([round(x, 6) for x in F_LRS])]
    sgd = sgd.sort_values("epochs").drop_duplicates("lr")  # the 60-epoch runs first
    return sgd.sort_values("T_SGD").reset_index(drop=True)


def f_at(points: pd.DataFrame, t: float) -> tuple[float, float]:
    """f(T) and its SE: linear in log10 T between neighbouring points (SE the larger of theirs); NaN outside."""
    x = np.log10(points["T_SGD"].to_numpy())
    if len(x) < 2 or not x[0] <= math.log10(t) <= x[-1]:
        return math.nan, math.nan
    i = min(int(np.searchsorted(x, math.log10(t), side="right")) - 1, len(x) - 2)
    w = (math.log10(t) - x[i]) / (x[i + 1] - x[i])
    g, se = points["G_pp"].to_numpy(), points["se_pp"].to_numpy()
    return float((1 - w) * g[i] + w * g[i + 1]), float(max(se[i], se[i + 1]))


def band(*ses: float) -> float:
    """The registered tolerance: max(3 pp, 2 √(Σ SE²))."""
    return max(BAND_PP, 2 * math.sqrt(sum(s * s for s in ses if not math.isnan(s))))


def _one(r: pd.DataFrame, **where) -> pd.Series | None:
    m = np.ones(len(r), bool)
    for k, v in where.items():
        m &= np.isclose(r[k].astype(float), v)
    return r[m].iloc[0] if m.any() else None


def g_text(row: pd.Series | dict) -> str:
    """A reading as T10 quotes it: 'G [95 % interval]' in pp."""
    return f"{row['G_pp']:.1f} [{row['G_lo']:.1f}, {row['G_hi']:.1f}]"


def time_readings(r: pd.DataFrame) -> list[dict]:
    """The time route's readings beyond epoch 60, each against f: f(T_SGD), the band, the side of f it lies on
    and whether it has power (its own lr's G(60) differs from f(T) by more than the band)."""
    pts, out = curve(r), []
    for row in r[(r["route"] == "time") & (r["epoch"] > 60)].to_dict("records"):
        f, se_f = f_at(pts, row["T_SGD"])
        own = _one(r[r["epochs"] == row["epochs"]], lr=row["lr"], epoch=60)  # its own first 60 epochs
        b = band(row["se_pp"], se_f)
        side = "outside f" if math.isnan(f) else "on f" if abs(row["G_pp"] - f) <= b else \
            "above f" if row["G_pp"] > f else "below f"
        out.append({**row, "f": f, "band": b, "side": side,
                    "power": own is not None and not math.isnan(f) and abs(own["G_pp"] - f) > b})
    return out


def time_text(t: dict) -> str:
    """'lr 0.01 e600: 17.2 [15.1, 19.0] vs f 12.0, band 3.0, above f' (and '(no power)' where it has none)."""
    if t["side"] == "outside f":
        return f"lr {t['lr']:g} e{t['epoch']}: outside f"
    return (f"lr {t['lr']:g} e{t['epoch']}: {g_text(t)} vs f {t['f']:.1f}, band {t['band']:.1f}, {t['side']}"
            + ("" if t["power"] else " (no power)"))


def clock_time(r: pd.DataFrame) -> tuple[str, str]:
    """Prediction 1: the time route's readings beyond epoch 60 against f; decided at each configuration's last
    epoch: refuted by one above f with power, else pending until every `TIME_LRS` configuration is read."""
    parts = time_readings(r)
    ends = {t["lr"]: t for t in parts if t["epoch"] == t["epochs"]}
    powered = [t["side"] for t in ends.values() if t["power"]]
    if "above f" in powered:
        verdict = "refuted"
    elif {round(x, 6) for x in ends} != {round(x, 6) for x in TIME_LRS}:
        verdict = "pending"
    else:
        verdict = "no power" if not powered else "held" if set(powered) == {"on f"} else "not on f (below)"
    return "; ".join(map(time_text, parts)) or "pending", verdict


def finding3(r: pd.DataFrame, runs: pd.DataFrame, histories: pd.DataFrame) -> tuple[str, str]:
    """Prediction 2: the paired change G(600) − G(60) at lr 0.01, seeds paired within each σ_w."""
    g = clock_runs(runs)
    g = g[(g["optimizer"] == "sgd") & np.isclose(g["lr"], 0.01) & (g["epochs"] == 600) & (g["batch_size"] == 32)]
    h = {rid: x for rid, x in histories.groupby("run_id")}
    ch = {s: np.array([100 * (metrics.end_accuracy(h[i], end=600) - metrics.end_accuracy(h[i], end=60))
                       for i in gs["run_id"] if i in h]) for s, gs in g.groupby("sigma_w")}
    if set(ch) != {LOW, HIGH} or min(len(v) for v in ch.values()) < SEEDS:
        return "pending", "pending"
    d = gap(ch[LOW], ch[HIGH])
    word = "consistent" if abs(d["G_pp"]) <= BAND_PP else \
        "contradicted" if d["G_pp"] < -BAND_PP and d["G_hi"] < 0 else "partly"
    return f"ΔG = {display.spread(d['G_pp'], d['G_lo'], d['G_hi'])} (n = {d['n']})", word


def finding5(r: pd.DataFrame) -> tuple[str, str]:
    """Prediction 3: memory rising with b, every batch run fitted."""
    b32 = _one(r[(r["optimizer"] == "sgd") & (r["epochs"] == 60)], lr=0.01, batch_size=32, weight_decay=0, epoch=60)
    b16 = _one(r, batch_size=16, epoch=60)
    large = [_one(r, batch_size=b, epoch=120) for b in (64, 128)]
    if b32 is None or b16 is None or any(x is None for x in large):
        return "pending", "pending"
    said = f"b 16: {g_text(b16)}, b 32: {g_text(b32)}, b 64 and 128 at e120: " + \
        ", ".join(g_text(x) for x in large) + f" (n = {min(int(x['n']) for x in (b16, b32, *large))})"
    fitted = all(x["fitted"].split("/")[0] == x["fitted"].split("/")[1] for x in (b16, *large))
    if b16["G_pp"] >= b32["G_pp"] - BAND_PP or any(x["G_pp"] < b32["G_pp"] - BAND_PP for x in large):
        return said, "contradicted"
    return said, "consistent" if fitted else "partly"


def t_adapt(r: pd.DataFrame) -> tuple[str, str]:
    """Prediction 4: Adam at equal T_adapt by time (lr 1e-3, 180 epochs) and by lr (3e-3, 60) within the band of
    each other, and lr 1e-3's reading at epoch 120 between them ± its band."""
    adam = r[r["optimizer"] == "adam"]
    by_time, by_lr = _one(adam, lr=1e-3, epoch=180), _one(adam, lr=3e-3, epoch=60)
    mid = _one(adam, lr=1e-3, epoch=120)
    if by_time is None or by_lr is None or mid is None:
        return "pending", "pending"
    b, b_mid = band(by_time["se_pp"], by_lr["se_pp"]), band(mid["se_pp"])
    lo, hi = sorted((by_time["G_pp"], by_lr["G_pp"]))
    held = hi - lo <= b and lo - b_mid <= mid["G_pp"] <= hi + b_mid
    return (f"by time (1e-3, e180) {g_text(by_time)} vs by lr (3e-3, e60) {g_text(by_lr)}, band {b:.1f}; "
            f"e120 {g_text(mid)} (n = {min(int(by_time['n']), int(by_lr['n']))})"), "held" if held else "refuted"


def t_l2(r: pd.DataFrame) -> tuple[str, str]:
    """Prediction 5: G at T_L2 ≈ 11 within 3 pp + 2 SE of zero, and G at T_L2 ≈ 1.1 between it and λ = 0's."""
    big, small = _one(r, weight_decay=0.3, epoch=60), _one(r, weight_decay=0.03, epoch=60)
    if big is None or small is None:
        return "pending", "pending"
    held = big["G_pp"] <= BAND_PP + 2 * big["se_pp"]
    return (f"λ 0.03: {g_text(small)} ({small['fitted']} fitted), λ 0.3: {g_text(big)} ({big['fitted']} fitted; "
            f"n = {min(int(small['n']), int(big['n']))})"), "held" if held else "refuted"


PREDICTIONS: dict[str, tuple[str, Callable]] = {
    "1. the clock, time route": ("time-route readings with power fall on f(T_SGD) within max(3 pp, 2 SE)",
                                 clock_time),
    "2. finding 3": ("ΔG(600 − 60 epochs) at lr 0.01 within ±3 pp", None),
    "3. finding 5": ("all fitted; b 16 < b 32 − 3 pp; b 64, 128 ≥ b 32 − 3 pp", finding5),
    "4. T_adapt": ("Adam 1e-3 × 180 epochs within the band of 3e-3 × 60", t_adapt),
    "5. T_L2": ("G at T_L2 ≈ 11 ≤ 3 pp + 2 SE", t_l2),
}


def reading_table(r: pd.DataFrame) -> pd.DataFrame:
    """`readings` as a table shows them: G, SE and the interval in pp, named for a reader."""
    names = {"G_pp": "G (pp)", "se_pp": "SE (pp)", "G_lo": "95 % low", "G_hi": "95 % high"}
    shown = r.drop(columns=["weight_decay"]).rename(columns=names)
    return cells.finish(shown, dict.fromkeys(names.values(), "percent"))


def complete(r: pd.DataFrame) -> pd.DataFrame:
    """The readings of configurations with all their seeds (`SEEDS` at each σ_w): what a criterion may read."""
    return r[r["n"] >= SEEDS] if len(r) else r


def criteria(runs: pd.DataFrame, histories: pd.DataFrame) -> pd.DataFrame:
    """The registered predictions, each with its criterion, what the runs give and the outcome ('pending' until
    its runs are committed: a configuration counts once it has `SEEDS` seeds at each σ_w)."""
    r = complete(readings(runs, histories))
    rows = []
    for name, (criterion, fn) in PREDICTIONS.items():
        got, outcome = finding3(r, runs, histories) if fn is None else fn(r) if len(r) else ("pending", "pending")
        rows.append({"prediction": name, "criterion": criterion, "reading": got, "outcome": outcome})
    return pd.DataFrame(rows)


ROUTE_STYLE = {"lr": ("C0", "o"), "time": ("C1", "s"), "batch": ("C2", "^"), "adaptive": ("C3", "D"),
               "L2": ("C4", "v")}
PANELS = (("T_SGD", ("lr", "time", "batch")), ("T_adapt", ("adaptive",)), ("T_L2", ("L2",)))


def figure(r: pd.DataFrame):
    """Memory G against each clock on a log axis: a panel per clock, a colour and marker per route, every reading
    with its 95 % interval (the adaptive route's long run open), f (the lr route's curve) drawn with its ±3 pp band in
    the T_SGD panel."""
    from matplotlib.ticker import LogLocator

    from initmem.analysis.style import log_axis, message_figure, new_figure
    if r.empty:
        return message_figure("no clock-experiment readings yet")
    fig, axes = new_figure(3, 1, width=8.6, height=2.8, sharey=True)
    for ax, (clock, routes) in zip(axes, PANELS, strict=True):
        for name in routes:
            g = r[(r["route"] == name) & (r[clock] > 0)]
            color, marker = ROUTE_STYLE[name]
            by_time = (g["epochs"] > 60) & (name == "adaptive")  # prediction 4's long run, drawn open
            for part, label, face in ((g[~by_time], f"{name} route", color), (g[by_time], f"{name}, by time", "white")):
                if len(part):
                    ax.errorbar(part[clock], part["G_pp"], yerr=[part["G_pp"] - part["G_lo"], part["G_hi"] -
                                part["G_pp"]], fmt=marker, color=color, mfc=face, ms=4, capsize=2, lw=0.8, label=label)
        if clock == "T_SGD" and len(pts := curve(r)) >= 2:
            ax.plot(pts["T_SGD"], pts["G_pp"], color="0.3", lw=1, zorder=0, label="f (lr route, epoch 60)")
            ax.fill_between(pts["T_SGD"], pts["G_pp"] - BAND_PP, pts["G_pp"] + BAND_PP, color="0.85", zorder=-1)
        if clock == "T_L2" and (base := _one(r[r["route"] == "lr"], lr=0.01, epoch=60)) is not None:
            ax.axhline(base["G_pp"], color="0.5", ls="--", lw=0.8, label="λ = 0 (lr 0.01)")
        log_axis(ax, "x")
        if clock == "T_SGD":  # ~3 decades in a third of the width: a tick a decade
            ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0,)))
        ax.set_xlabel(clock)
        ax.axhline(0, color="0.6", lw=0.5)
    axes[0].set_ylabel("G = acc(σ_w 0.1) − acc(σ_w 2.5) (pp)")
    labelled = {lab: h for ax in axes for h, lab in zip(*ax.get_legend_handles_labels(), strict=True)}
    fig.legend(labelled.values(), labelled.keys(), loc="outside right center", frameon=False)  # off the data
    return fig
