"""The cells of the study's tables, one rule each, that `tables` and `tables_forgetting` build their rows from."""

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


def sigma_cells(g: pd.DataFrame, sigmas: Iterable[float], multi: bool, value: str = "test_acc_at_best",
                 scale: float = 100.0) -> dict:
    """Per σ_w the mean over seeds of `value` × `scale` (and its std when `multi`); `DIVERGED` where its runs have
    no value because they diverged (out of the spread: shown, never silently blank)."""
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


def spread_cells(g: pd.DataFrame, multi: bool) -> dict:
    """A configuration's `spread_pp` cell (and its seed-to-seed `spread_pp_std` when `multi`)."""
    m, sd = point_spread(g)
    return {"spread_pp": m, "spread_pp_std": sd} if multi else {"spread_pp": m}


def lead_cells(g: pd.DataFrame, columns: list[str]) -> dict:
    """The leading cells of a configuration's row: its value of each label column (its label where it has none)."""
    return {c: g[c].iloc[0] if c in g.columns else g["label"].iloc[0] for c in columns}


def finish(df: pd.DataFrame, formats: dict[str, str] | None = None) -> pd.DataFrame:
    """`df` with its own display kinds (`attrs["formats"]`: pattern → kind), consulted before `COLUMN_KINDS`."""
    df.attrs["formats"] = dict(formats or {})
    return df
