"""The study's metrics, each computable from a run's history (one row per epoch; epoch 0 = at initialisation).
Epochs are 1-based: in a per-epoch sequence, element i is epoch i + 1. Accuracies are fractions in [0, 1].

Holds τ_interp, the selection rules (`SELECTION_RULES`), the spread and its seed-resampled interval, the end-of-
training reading, the clocks, collapses, radial memory, `summarize_history` and `point_summary`. Torch-free."""

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from initmem.errors import ConfigError

SUMMARY_KEYS = ("best_epoch", "test_acc_at_best", "val_loss_at_best", "val_acc_at_best", "tau_interp", "interpolated",
                "repair_gap", "init_weight_norm", "final_weight_norm", "norm_ratio", "final_train_acc",
                "final_test_acc", "T_SGD", "T_L2", "T_adapt", "diverged_epoch", "epochs_run", "steps", "wall_time_s")
EXTRA_CLOCKS = ("T_SGD_eff", "T_L2_eff", "T_adapt_eff")  # with DIAGNOSTIC_KEYS, added later: None where unrecorded
DIAGNOSTIC_KEYS = ("angle_at_best", "angle_final", "Theta_final", *EXTRA_CLOCKS, "test_acc_full_at_best")
FULL_TEST_COLUMNS = ("test_loss_full", "test_acc_full")  # TrainConfig.full_test's: at the epochs `selectable` marks
WHOLE_TRAIN_COLUMN = "train_acc_full"  # TrainConfig.exact_tau's: the whole train split where a subset could hide tau
THRESHOLD = 0.995  # train accuracy at which a network has interpolated (tau_interp), docs/study.md


def _floats(name: str, values) -> np.ndarray:
    a = np.asarray(values, dtype=float).ravel()
    if a.size == 0:
        raise ConfigError(f"{name} is empty: a non-empty sequence of numbers is accepted")
    return a


def interpolation_epoch(train_acc: Sequence[float], threshold: float = THRESHOLD) -> int | None:
    """tau_interp = min{i + 1 : train_acc[i] >= threshold} (1-based epoch), None if never reached (NaN never)."""
    hit = np.flatnonzero(np.asarray(train_acc, dtype=float) >= threshold)
    return int(hit[0]) + 1 if hit.size else None


COLLAPSE_DROP = 0.2  # a fall in train accuracy that counts as a fitted network's collapse (docs/findings.md)


def collapse_epoch(train_acc: Sequence[float], tau_interp: int | None, drop: float = COLLAPSE_DROP) -> int | None:
    """The first epoch at or after `tau_interp` whose train accuracy is `drop` or more below its best since then (a
    fitted network losing its fit: Adam's late loss spikes); None if it never did, or never interpolated."""
    if tau_interp is None or pd.isna(tau_interp):
        return None
    after = np.asarray(train_acc, dtype=float)[int(tau_interp) - 1:]
    hit = np.flatnonzero(after <= np.fmax.accumulate(after) - drop)
    return int(tau_interp) + int(hit[0]) if hit.size else None


def tau_accuracies(history: pd.DataFrame) -> np.ndarray:
    """The train accuracies tau_interp reads: `WHOLE_TRAIN_COLUMN` where the history holds one (exact_tau measures it
    wherever the whole split can have reached the threshold, so it decides alone), else train_acc."""
    if WHOLE_TRAIN_COLUMN in history.columns and history[WHOLE_TRAIN_COLUMN].notna().any():
        return history[WHOLE_TRAIN_COLUMN].to_numpy(dtype=float)
    return history["train_acc"].to_numpy(dtype=float)


def subset_bound(n_train: int, n_eval: int, threshold: float = THRESHOLD) -> float:
    """The lowest accuracy of an `n_eval`-image subset of the `n_train`-image split at which the whole split can be at
    `threshold` (its at most (1 - threshold) * n_train errors all in the subset)."""
    return 1.0 - (1.0 - threshold) * n_train / n_eval


# Which epoch a researcher reports: name -> (the column read, what it picks); "last" needs a finite val_loss there.
SELECTION_RULES = {"val_loss": ("val_loss", "lowest validation loss"),
                   "val_acc": ("val_acc", "highest validation accuracy"),
                   "last": ("val_loss", "last epoch")}
DEFAULT_RULE = "val_loss"


def check_rule(rule: str) -> str:
    """`rule` when it names a selection rule (`SELECTION_RULES`), else ConfigError."""
    if rule not in SELECTION_RULES:
        raise ConfigError(f"rule={rule!r} is invalid: one of {', '.join(map(repr, SELECTION_RULES))} is accepted")
    return rule


def best_epoch(val_loss: Sequence[float], rule: str = DEFAULT_RULE) -> int:
    """The 1-based position `rule` selects in a per-epoch sequence of its column (`val_loss` holds the validation
    accuracies for "val_acc"), NaN ignored, the first on ties; ConfigError when no value is usable."""
    a = _floats(SELECTION_RULES[check_rule(rule)][0], val_loss)
    if np.isnan(a).all():
        raise ConfigError(f"{SELECTION_RULES[rule][0]} has no non-NaN value: at least one is needed to select an epoch")
    if rule == "last":
        return int(np.flatnonzero(~np.isnan(a))[-1]) + 1
    return int(np.nanargmax(a) if rule == "val_acc" else np.nanargmin(a)) + 1


def _trained(history: pd.DataFrame, upto: int | None = None) -> pd.DataFrame:
    h = history[history["epoch"] >= 1]
    return (h if upto is None else h[h["epoch"] <= upto]).sort_values("epoch")


def _rule_values(h: pd.DataFrame, rule: str) -> np.ndarray:
    """The column `rule` reads, NaN where it cannot count (other rules than the default: a non-finite val_loss)."""
    values = h[SELECTION_RULES[check_rule(rule)][0]].to_numpy(dtype=float)
    return values if rule == DEFAULT_RULE else np.where(np.isfinite(h["val_loss"].to_numpy(dtype=float)), values,
                                                        np.nan)


def _column(history: pd.DataFrame, column: str) -> str:
    if column not in history.columns:
        raise ConfigError(f"column={column!r} is invalid: the history has no such column; one of its test columns "
                          f"({', '.join(c for c in ('test_acc', *FULL_TEST_COLUMNS) if c in history.columns)}) is "
                          "accepted (test_acc_full needs a run trained with full_test)")
    return column


def _selected_row(history: pd.DataFrame, upto: int | None, rule: str) -> pd.Series:
    """The row (epoch >= 1, and <= upto if given) that `rule` selects (`best_epoch`); the rules but the default skip
    rows whose val_loss is not finite (a diverged epoch's accuracy is a broken network's)."""
    h = _trained(history, upto)
    return h.iloc[best_epoch(_rule_values(h, rule), rule) - 1]


def selected_epoch(history: pd.DataFrame, upto: int | None = None, rule: str = DEFAULT_RULE) -> int:
    """The epoch `rule` selects (`_selected_row`)."""
    return int(_selected_row(history, upto, rule)["epoch"])


def test_at_best(history: pd.DataFrame, upto: int | None = None, rule: str = DEFAULT_RULE,
                 column: str = "test_acc") -> float:
    """`column` (test_acc; test_acc_full: the whole test set) at the epoch `rule` selects (`_selected_row`)."""
    return float(_selected_row(history, upto, rule)[_column(history, column)])


test_at_best.__test__ = False  # a metric, not a test: stops pytest collecting it where a test module imports it


def test_at_best_by_epoch(history: pd.DataFrame, rule: str = DEFAULT_RULE, column: str = "test_acc") -> pd.Series:
    """`test_at_best(history, upto=e, rule=rule, column=column)` at every measured epoch e >= 1 (NaN where none is
    usable; with test_acc_full, also where the "last" rule picks an epoch before the run's last)."""
    h = _trained(history)
    values = _rule_values(h, rule)
    test = h[_column(history, column)].to_numpy(dtype=float)
    out = [float(test[best_epoch(values[:i + 1], rule) - 1]) if not np.isnan(values[:i + 1]).all() else math.nan
           for i in range(len(values))]
    return pd.Series(out, index=h["epoch"].to_numpy(), name=f"test_acc_{rule}", dtype=float)


test_at_best_by_epoch.__test__ = False


def _new_best(values: np.ndarray, larger: bool) -> np.ndarray:
    """Per position, whether it holds the first occurrence of a new best among the non-NaN values so far."""
    out, best = np.zeros(len(values), dtype=bool), None
    for i, v in enumerate(values):
        if not np.isnan(v) and (best is None or (v > best if larger else v < best)):
            out[i], best = True, v
    return out


def selectable(history: pd.DataFrame, final: bool = True, threshold: float = THRESHOLD) -> np.ndarray:
    """Per row of `history` (epoch order), whether a selection rule can pick it, reading only the rows up to it (so a
    run can decide online, and a resumed one decides the same): a new lowest val_loss or highest val_acc
    (`SELECTION_RULES`, first on ties, epochs >= 1), the last row if `final` (the "last" rule; when its val_loss is
    not finite that rule picks an earlier row, not marked), and from tau_interp on (`interpolation_epoch`) a new
    lowest val_loss among those epochs. Epoch 0, which no rule picks, is marked: the initialisation's reference."""
    h = history.sort_values("epoch")
    trained = (h["epoch"] >= 1).to_numpy()
    t = h[trained]
    vl, va = _rule_values(t, DEFAULT_RULE), _rule_values(t, "val_acc")
    pick = _new_best(vl, larger=False) | _new_best(va, larger=True)
    tau = interpolation_epoch(tau_accuracies(t), threshold)
    if tau is not None:
        pick[tau - 1:] |= _new_best(vl[tau - 1:], larger=False)
    if final and len(pick):
        pick[-1] = True
    out = np.ones(len(h), dtype=bool)
    out[trained] = pick
    return out


END_WINDOW = 10  # epochs: the end-of-training reading, a median over them, is robust to one collapsed epoch


def end_accuracy(history: pd.DataFrame, end: int | None = None, window: int = END_WINDOW, column: str = "test_acc"
                 ) -> float:
    """The end-of-training reading: median `column` over epochs end − window + 1 … end (default: the last), or NaN."""
    h = _trained(history)
    end = (int(h["epoch"].max()) if len(h) else 0) if end is None else end
    x = pd.to_numeric(h.loc[(h["epoch"] > end - window) & (h["epoch"] <= end), column], errors="coerce").dropna()
    return float(np.median(x)) if len(x) else math.nan


def spread(values: Sequence[float]) -> float:
    """max - min of the non-NaN values, x 100 (pp) when all are in [0, 1]; ConfigError when there is none."""
    a = _floats("spread values", values)
    a = a[~np.isnan(a)]
    if a.size == 0:
        raise ConfigError("spread values are all NaN: at least one number is needed")
    d = float(a.max() - a.min())
    return 100.0 * d if ((a >= 0) & (a <= 1)).all() else d


def _last_finite(h: pd.DataFrame) -> pd.Series:
    """The last row whose losses are all finite (a diverged run's final row is chance-level noise)."""
    cols = [c for c in ("train_loss", "val_loss", "test_loss") if c in h.columns]
    ok = np.isfinite(h[cols].to_numpy(dtype=float)).all(axis=1) if cols else np.ones(len(h), bool)
    return h[ok].iloc[-1] if ok.any() else h.iloc[-1]


def repair_gap(history: pd.DataFrame, threshold: float = THRESHOLD) -> float | None:
    """val_acc(last finite epoch) - val_acc(tau_interp), as a fraction; None if the run never interpolated."""
    h = _trained(history)
    tau = interpolation_epoch(tau_accuracies(h), threshold)
    return None if tau is None else float(_last_finite(h)["val_acc"] - h["val_acc"].iloc[tau - 1])


def radial_memory(initial_norms: Sequence[float], final_norms: Sequence[float]) -> float:
    """Least-squares slope of log(final) on log(initial) norms: ~1 the final norm remembers the initial, ~0 forgot."""
    x, y = _floats("initial_norms", initial_norms), _floats("final_norms", final_norms)
    if x.shape != y.shape or x.size < 2 or not (x > 0).all() or not (y > 0).all() or np.ptp(x) == 0:
        raise ConfigError(f"radial_memory got initial_norms={x.tolist()}, final_norms={y.tolist()}: two equal-length "
                          "sequences of finite positive norms with >= 2 distinct initial values are accepted")
    lx, ly = np.log(x), np.log(y)
    lx = lx - lx.mean()
    return float((lx * (ly - ly.mean())).sum() / (lx * lx).sum())


def lr_scale(optimizer: str, momentum: float) -> float:
    """lr -> the effective step of the momentum-aware clocks: 1 / (1 - beta) for heavy-ball SGD, else 1 (an average)."""
    return 1.0 / (1.0 - momentum) if optimizer == "sgd_momentum" else 1.0


def forgetting_clocks(lrs: Sequence[float], batch_size: int, l2: float = 0.0) -> dict[str, float]:
    """The clocks of docs/study.md over steps of (scheduled) lr eta_k: T_SGD = sum eta_k^2 / batch_size,
    T_L2 = l2 * sum eta_k, T_adapt = sum eta_k (momentum not folded in: `lr_scale`; Muon's lr, not its AdamW's)."""
    acc = ClockAccumulator(batch_size, l2)  # validates batch_size and l2
    lrs = [float(lr) for lr in lrs]
    s1 = math.fsum(lrs)
    return {"T_SGD": math.fsum(lr * lr for lr in lrs) / acc.batch_size, "T_L2": acc.l2 * s1, "T_adapt": s1}


class ClockAccumulator:
    """The forgetting clocks, one `update(lr)` a step: Neumaier sums in Python floats, exact over 10^6+ steps."""

    def __init__(self, batch_size: int, l2: float = 0.0, scale: float = 1.0):
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ConfigError(f"batch_size={batch_size!r} is invalid: a positive integer is accepted")
        if isinstance(l2, bool) or not isinstance(l2, (int, float)) or not math.isfinite(l2) or l2 < 0:
            raise ConfigError(f"l2={l2!r} is invalid: a finite real >= 0 is accepted")
        self.batch_size, self.l2, self.scale = batch_size, float(l2), float(scale)
        self.steps, self._s1, self._c1, self._s2, self._c2 = 0, 0.0, 0.0, 0.0, 0.0

    def update(self, lr: float) -> None:
        lr = float(lr)
        self.steps += 1
        self._s1, self._c1 = _neumaier(self._s1, self._c1, lr)
        self._s2, self._c2 = _neumaier(self._s2, self._c2, lr * lr)

    def totals(self) -> dict[str, float]:
        s1, s2, c = self._s1 + self._c1, self._s2 + self._c2, self.scale
        return {"T_SGD": s2 / self.batch_size, "T_L2": self.l2 * s1, "T_adapt": s1,
                "T_SGD_eff": c * c * s2 / self.batch_size, "T_L2_eff": c * self.l2 * s1, "T_adapt_eff": c * s1}

    def state_dict(self) -> dict:
        return {"batch_size": self.batch_size, "l2": self.l2, "scale": self.scale, "steps": self.steps,
                "sums": [self._s1, self._c1, self._s2, self._c2]}

    def load_state_dict(self, state: dict) -> None:
        theirs = {"batch_size": state.get("batch_size"), "l2": state.get("l2"), "scale": state.get("scale", 1.0)}
        mine = {"batch_size": self.batch_size, "l2": self.l2, "scale": self.scale}
        if theirs != mine:
            raise ConfigError("clock state " + ", ".join(f"{k}={v!r}" for k, v in theirs.items()) + " is invalid "
                              "here: " + ", ".join(f"{k}={v!r}" for k, v in mine.items()) + " is accepted")
        self.steps = int(state["steps"])
        self._s1, self._c1, self._s2, self._c2 = map(float, state["sums"])


def _neumaier(s: float, c: float, x: float) -> tuple[float, float]:
    t = s + x
    c += (s - t) + x if abs(s) >= abs(x) else (x - t) + s
    return t, c


def _num(x) -> float | None:
    """A finite Python float, or None (NaN/inf/missing are not valid JSON numbers)."""
    return None if x is None or not math.isfinite(x := float(x)) else x


def summarize_history(history: pd.DataFrame, threshold: float = THRESHOLD) -> dict:
    """The run's summary (SUMMARY_KEYS, DIAGNOSTIC_KEYS): the best epoch (default rule) and tau_interp over epochs >= 1,
    the diagnostics at the best and last finite epochs (None without their column), finals from the last row,
    diverged_epoch the first non-finite train_loss. Python int/float/bool/None; a non-finite float is None."""
    h = history.sort_values("epoch")
    trained, last = _trained(h), h.iloc[-1]
    init = h[h["epoch"] == 0]
    vl = trained["val_loss"].to_numpy(dtype=float)
    best = None if np.isnan(vl).all() else best_epoch(vl) - 1  # NaN loss: a diverged run still gets a summary
    at_best = (lambda col: None) if best is None else (lambda col: _num(trained[col].iloc[best]))
    tau = interpolation_epoch(tau_accuracies(trained), threshold)
    bad = trained[~np.isfinite(trained["train_loss"].to_numpy(dtype=float))]
    w0 = _num(init["weight_norm"].iloc[0]) if len(init) else None
    w1 = _num(last["weight_norm"])
    return {
        "best_epoch": None if best is None else int(trained["epoch"].iloc[best]),
        **{f"{c}_at_best": at_best(c) for c in ("test_acc", "val_loss", "val_acc")},
        "tau_interp": None if tau is None else int(trained["epoch"].iloc[tau - 1]),
        "interpolated": tau is not None,
        "repair_gap": None if tau is None else repair_gap(h, threshold),
        "init_weight_norm": w0,
        "final_weight_norm": w1,
        "norm_ratio": _num(w1 / w0) if w0 and w1 is not None else None,
        **{f"final_{c}": _num(last[c]) for c in ("train_acc", "test_acc")},
        **{c: _num(last[c]) for c in ("T_SGD", "T_L2", "T_adapt")},
        "diverged_epoch": int(bad["epoch"].iloc[0]) if len(bad) else None,
        "epochs_run": int(h["epoch"].max()),
        "steps": int(last["step"]),
        "wall_time_s": _num(last["wall_time"]),
        "angle_at_best": at_best("angle") if "angle" in h else None,
        **{k: _num(_last_finite(trained if len(trained) else h)[c]) if c in h else None
           for k, c in (("angle_final", "angle"), ("Theta_final", "Theta"), *((c, c) for c in EXTRA_CLOCKS))},
        "test_acc_full_at_best": at_best("test_acc_full") if "test_acc_full" in h else None,
    }


def point_summary(df: pd.DataFrame) -> dict:
    """The point's numbers from its `point.run_point` rows: the spread of the per-sigma_w mean test accuracy (pp), its
    std over seeds, best and worst sigma_w, counts; a sigma_w without accuracy is listed in `sigma_ws_missing`. The
    spread needs two sigma_w with accuracy (None below: one sigma_w is no spread, as in a sweep still under way)."""
    need = {"sigma_w", "seed", "status", "test_acc_at_best", "interpolated"}
    missing = sorted(need - set(df.columns)) if isinstance(df, pd.DataFrame) else sorted(need)
    if missing:
        raise ConfigError(f"point_summary got rows missing the columns {missing}: the rows of run_point (or "
                          "load_runs) are accepted")
    acc = pd.to_numeric(df["test_acc_at_best"], errors="coerce")
    by_sigma = acc.groupby(df["sigma_w"]).mean().dropna()
    per_seed = [spread(g) for _, g in acc.groupby(df["seed"]) if g.notna().sum() >= 2]
    return {
        "n_runs": len(df),
        "sigma_ws": sorted(df["sigma_w"].unique().tolist()),
        "seeds": sorted(df["seed"].unique().tolist()),
        "spread_pp": spread(by_sigma.to_numpy()) if len(by_sigma) >= 2 else None,
        "spread_seed_std_pp": float(np.std(per_seed, ddof=1)) if len(per_seed) > 1 else None,
        "best_sigma_w": float(by_sigma.idxmax()) if len(by_sigma) else None,
        "worst_sigma_w": float(by_sigma.idxmin()) if len(by_sigma) else None,
        "test_acc_by_sigma_w": {float(k): float(v) for k, v in by_sigma.items()},
        "sigma_ws_missing": sorted(float(x) for x in set(df["sigma_w"]) - set(by_sigma.index)),
        "diverged_sigma_ws": sorted(float(x) for x in df.loc[df["status"] == "diverged", "sigma_w"].unique()),
        "n_interpolated": int(df["interpolated"].eq(True).sum()),
        **{f"n_{status}": int((df["status"] == status).sum()) for status in ("diverged", "complete")},
    }


BOOT_RESAMPLES = 100_000  # bootstrap draws where exact enumeration would be larger: end points stable to ~0.02 pp
BOOT_SEED = 0  # fixed, so every table built from the same runs is byte-identical
INTERVAL_LEVEL = 0.95


def _resample_means(values: np.ndarray, n: int, rng: np.random.Generator | None) -> np.ndarray:
    """Means of resamples (with replacement) of one σ_w's seed values: all n^n index tuples when `rng` is None (each
    equally likely: the exact bootstrap distribution), else `n` random ones."""
    k = len(values)
    if rng is None:
        idx = np.array(np.meshgrid(*[np.arange(k)] * k, indexing="ij")).reshape(k, -1).T
    else:
        idx = rng.integers(0, k, size=(n, k))
    return values[idx].mean(axis=1)


def spread_resamples(groups: Sequence[Sequence[float]], n_boot: int = BOOT_RESAMPLES,
                     seed: int = BOOT_SEED) -> tuple[np.ndarray, str]:
    """The seed-resampled distribution of `spread` over σ_w of the seed-mean accuracies (`groups`: one list of per-seed
    accuracies per σ_w, NaN dropped). Seeds are resampled with replacement within each σ_w; exact enumeration of all
    resamples when there are at most `n_boot` of them, else `n_boot` draws from a fixed RNG.
    Returns (spreads, method)."""
    vals = [a[~np.isnan(a)] for a in (np.asarray(g, dtype=float) for g in groups)]
    vals = [v for v in vals if len(v)]
    if len(vals) < 2:
        raise ConfigError(f"spread_resamples got {len(vals)} σ_w with values: at least 2 are accepted")
    exact = math.prod(len(v) ** len(v) for v in vals) <= n_boot
    rng = None if exact else np.random.default_rng(seed)
    means = [_resample_means(v, n_boot, rng) for v in vals]
    if exact:  # every combination of the σ_w's resamples: the cartesian product
        grids = np.meshgrid(*means, indexing="ij")
        means = [g.ravel() for g in grids]
    stacked = np.vstack(means)
    return 100.0 * (stacked.max(axis=0) - stacked.min(axis=0)), "exact" if exact else f"bootstrap {n_boot}"


def interval(samples: np.ndarray, level: float = INTERVAL_LEVEL) -> tuple[float, float]:
    """The percentile interval of `samples` at `level` (0.95: the 2.5th and 97.5th percentiles)."""
    a = _floats("interval samples", samples)
    if not 0 < level < 1:
        raise ConfigError(f"level={level!r} is invalid: a number in (0, 1) is accepted")
    q = 100 * (1 - level) / 2
    return float(np.percentile(a, q)), float(np.percentile(a, 100 - q))


def contrast_resamples(first: np.ndarray, others: Sequence[np.ndarray], n_boot: int = BOOT_RESAMPLES,
                       seed: int = BOOT_SEED) -> np.ndarray:
    """Resampled `first − max(others)` (pp): each configuration's resampled spreads (`spread_resamples`) drawn
    independently (configurations are separate runs), `n_boot` draws from a fixed RNG."""
    if not others:
        raise ConfigError("contrast_resamples got no other configurations: at least one is accepted")
    rng = np.random.default_rng(seed)
    pick = [np.asarray(s)[rng.integers(0, len(s), n_boot)] for s in (first, *others)]
    return pick[0] - np.max(np.vstack(pick[1:]), axis=0)
