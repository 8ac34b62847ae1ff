"""The cells of the study's tables, one rule each, that `tables` and `instrument_tables` build their rows from."""

import math
from collections.abc import Iterable, Sequence

import numpy as np
import pandas as pd

from initmem import metrics


def sigma_column(sigma_w: float) -> str:
    """The table column of one σ_w: 'sigma_w=0.5'."""
    return f"sigma_w={sigma_w:g}"


def mean_std(xs: Sequence[float]) -> tuple[float, float]:
    """Mean and sample std of the finite values of `xs` (std NaN below two values, both NaN for none)."""
    xs = [float(x) for x in xs if x is not None and not math.isnan(float(x))]
    if not xs:
        return math.nan, math.nan
    return float(np.mean(xs)), float(np.std(xs, ddof=1)) if len(xs) > 1 else math.nan


def point_spread(group: pd.DataFrame) -> tuple[float, float]:
    """(spread_pp, seed-to-seed std) of one configuration's runs (`metrics.point_summary`); NaN where it has none."""
    s = metrics.point_summary(group)
    return tuple(math.nan if s[k] is None else float(s[k]) for k in ("spread_pp", "spread_seed_std_pp"))


def multi_seed(confs: pd.DataFrame) -> bool:
    """Whether some σ_w of some configuration has several seeds: the tables then show `_std` companions."""
    return bool(confs.groupby(["config", "sigma_w"])["seed"].nunique().max() > 1)


DIVERGED = "diverged"  # the cell of a σ_w whose runs all diverged before any finite epoch: no value to show


def diverged_runs(g: pd.DataFrame) -> pd.Series:
    """Which runs of `g` diverged (status 'diverged'; none when the frame has no status)."""
    return g["status"].eq("diverged") if "status" in g.columns else pd.Series(False, index=g.index)


def diverged_count(g: pd.DataFrame) -> str:
    """'k/n': runs diverged of runs."""
    return f"{int(diverged_runs(g).sum())}/{len(g)}"


def sigma_cells(g: pd.DataFrame, sigmas: Iterable[float], multi: bool, value: str | None = None,
                 scale: float = 100.0) -> dict:
    """Per σ_w the mean over seeds of `value` × `scale` (and its std when `multi`); `DIVERGED` where its runs have
    no value because they diverged (out of the spread: shown, never silently blank). `value` defaults to the
    accuracy the configuration's spread is over (`spread_column`), so the cells subtract to `spread_cells`' spread."""
    value = value or spread_column(g)
    row = {}
    for s in sigmas:
        r = g[g["sigma_w"] == s]
        m, sd = mean_std(scale * pd.to_numeric(r[value], errors="coerce"))
        row[sigma_column(s)] = DIVERGED if math.isnan(m) and len(r) and diverged_runs(r).any() else m
        if multi:
            row[sigma_column(s) + "_std"] = sd
    return row


def sigmas_in_spread(g: pd.DataFrame) -> list[float]:
    """The σ_w of one configuration that have a test accuracy (those its spread is over)."""
    acc = pd.to_numeric(g["test_acc_at_best"], errors="coerce")
    return sorted(float(s) for s in acc.groupby(g["sigma_w"]).mean().dropna().index)


def narrowed_note(confs: pd.DataFrame, sigmas: Sequence[float]) -> str:
    """A caption's words for the configurations whose spread is over fewer of the table's σ_w than it has columns (a
    sweep under way, a σ_w not run, or one whose runs diverged): "; adam's spread over σ_w 0.1, 1 only (not 2.5)";
    '' when every spread covers every σ_w."""
    parts = []
    for _, g in confs.groupby("config", sort=True):
        have = sigmas_in_spread(g)
        if len(have) >= 2 and (left := [s for s in sigmas if s not in have]):
            parts.append(f"{g['label'].iloc[0]}'s spread over σ_w {', '.join(f'{s:g}' for s in have)} only (not "
                         f"{', '.join(f'{s:g}' for s in left)})")
    return "; " + "; ".join(parts) if parts else ""


FULL_TEST = "test_acc_full_at_best"  # the selected network on all 10,000 test images, where the runs have it
SUBSET_TEST = "test_acc_at_best"
TEST_SETS = {FULL_TEST: "all 10,000 test images", SUBSET_TEST: "the 2,000-image test subset"}  # how captions name them


def spread_column(g: pd.DataFrame) -> str:
    """The accuracy a spread is over: `FULL_TEST` where every run of `g` has it, else the subset `SUBSET_TEST`."""
    if FULL_TEST in g.columns and pd.to_numeric(g[FULL_TEST], errors="coerce").notna().all():
        return FULL_TEST
    return SUBSET_TEST


def seed_groups(g: pd.DataFrame, column: str | None = None) -> list[np.ndarray]:
    """Per σ_w (ascending) the per-seed accuracies of `column` (default `spread_column`) of one configuration."""
    acc = pd.to_numeric(g[column or spread_column(g)], errors="coerce")
    return [acc[g["sigma_w"] == s].to_numpy(dtype=float) for s in sorted(g["sigma_w"].unique())]


def spread_resamples(g: pd.DataFrame) -> np.ndarray | None:
    """`metrics.spread_resamples` of one configuration; None below two seeds in every σ_w or two σ_w with values."""
    groups = [a[~np.isnan(a)] for a in seed_groups(g)]
    if sum(len(a) > 0 for a in groups) < 2 or max(len(a) for a in groups) < 2:
        return None
    return metrics.spread_resamples(groups)[0]


def spread_cells(g: pd.DataFrame, multi: bool) -> dict:
    """A configuration's `spread_pp` (the spread over σ_w of the seed-mean accuracies, `metrics.point_summary`) and,
    when `multi`, its 95 % seed-resampled interval `spread_pp_lo`–`spread_pp_hi` of the same statistic."""
    m = point_spread(g.assign(test_acc_at_best=g[spread_column(g)]))[0]
    if not multi:
        return {"spread_pp": m}
    samples = spread_resamples(g)
    lo, hi = (math.nan, math.nan) if samples is None else metrics.interval(samples)
    return {"spread_pp": m, "spread_pp_lo": lo, "spread_pp_hi": hi}


def interval_note(table: pd.DataFrame, title: str) -> str:
    """What a table's caption says of its spreads' intervals, where its title does not: none with one seed per σ_w,
    else the 95 % seed-resampled interval (`spread_cells`); then its `attrs["narrowed_note"]` (`narrowed_note`)."""
    narrowed = table.attrs.get("narrowed_note", "")
    if "spread_pp" not in table.columns or "interval" in title:
        return narrowed
    if "spread_pp_lo" not in table.columns:
        return "; one seed per σ_w, so the spread has no seed interval" + narrowed
    return ("; spread_pp_lo–hi: the spread's 95 % interval with seeds resampled with replacement within each σ_w "
            "(metrics.spread_resamples)" + narrowed)


def interval_err(rows: pd.DataFrame) -> np.ndarray:
    """Matplotlib's asymmetric `yerr` (2 × n) of rows' `spread_pp` to `spread_pp_lo`/`_hi` (0 where there is none)."""
    m = rows["spread_pp"].to_numpy(dtype=float)
    lo = np.nan_to_num(m - rows.get("spread_pp_lo", pd.Series(np.nan, rows.index)).to_numpy(dtype=float))
    hi = np.nan_to_num(rows.get("spread_pp_hi", pd.Series(np.nan, rows.index)).to_numpy(dtype=float) - m)
    return np.vstack([np.maximum(lo, 0), np.maximum(hi, 0)])


def contrast_cells(confs: pd.DataFrame, first: str = "sgd",
                   others: Sequence[str] = ("adam", "adamw", "muon")) -> dict | None:
    """`first` − max(`others`) of the spreads (pp) with its 95 % interval, each configuration's seeds resampled
    independently (`metrics.contrast_resamples`); None unless each optimiser is exactly one multi-seed configuration
    and all their spreads are over the same σ_w."""
    by = {o: confs[confs["optimizer"] == o] for o in (first, *others)} if "optimizer" in confs.columns else {}
    if not by or any(b.empty or b["config"].nunique() != 1 for b in by.values()):
        return None
    if len({tuple(sigmas_in_spread(b)) for b in by.values()}) > 1:  # spreads over different σ_w do not compare
        return None
    samples = {o: spread_resamples(b) for o, b in by.items()}
    if any(s is None for s in samples.values()):
        return None
    centre = {o: spread_cells(b, False)["spread_pp"] for o, b in by.items()}
    lo, hi = metrics.interval(metrics.contrast_resamples(samples[first], [samples[o] for o in others]))
    return {"spread_pp": centre[first] - max(centre[o] for o in others), "spread_pp_lo": lo, "spread_pp_hi": hi}


def lead_cells(g: pd.DataFrame, columns: list[str]) -> dict:
    """The leading cells of a configuration's row: its value of each label column (its label where it has none)."""
    return {c: g[c].iloc[0] if c in g.columns else g["label"].iloc[0] for c in columns}


def finish(df: pd.DataFrame, formats: dict[str, str] | None = None) -> pd.DataFrame:
    """`df` with its own display kinds (`attrs["formats"]`: pattern → kind), consulted before `COLUMN_KINDS`."""
    df.attrs["formats"] = dict(formats or {})
    return df
