"""What a section found, in a notebook's closing "What we found" cell: one sentence whose every number is computed
from a table the section's figure notebook writes (T1-T5, T7, T8), the table's key numbers as a small table, the
verdict of the study's finding it tests (`verdicts.VERDICTS`, with the set it is read from), and a link to
docs/findings.md. Pure functions of the tables."""

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from initmem.analysis import display, verdicts
from initmem.analysis.tables import CONTRAST

ROOT = Path(__file__).resolve().parents[2]
FINDINGS_LINK = "docs/findings.md"
SECTION_FINDINGS = {"01_optimizers": (1, 2), "02_long_training": (3,), "03_lr_l2": (4,), "04_batch_size": (5,),
                    "05_depth": (6,), "06_forgetting_clocks": (7,)}


@dataclass(frozen=True)
class Found:
    """A section's result: `sentence` (computed), `numbers` (the table rows it rests on) and `findings` (the
    study's finding numbers it tests); shown in a notebook as Markdown."""

    section: str
    sentence: str
    numbers: pd.DataFrame = field(repr=False)
    up: int = 1  # folders from the notebook to the repository root: the link's ../ (notebooks/figures/: 2)

    @property
    def findings(self) -> tuple[int, ...]:
        return SECTION_FINDINGS.get(self.section, ())

    def at(self, up: int) -> "Found":
        """The same result shown by a notebook `up` folders below the repository root (its link adjusted)."""
        return dataclasses.replace(self, up=up)

    def markdown(self) -> str:
        found = [verdicts.VERDICTS[n] for n in self.findings]
        link = f"[{FINDINGS_LINK}]({'../' * self.up}{FINDINGS_LINK})"
        lines = ["**What we found.** " + self.sentence, ""]
        if len(self.numbers):
            headers, rows = display.display_rows(self.numbers)
            lines += [display.markdown_table(headers, rows), ""]
        lines.append("Verdict (" + "; ".join(f"{v.line()}, read from `{v.source}`" for v in found)
                     + f") and what it cannot show: {link}." if found else f"What it cannot show: {link}.")
        return "\n".join(lines)

    _repr_markdown_ = markdown


def _spread(row: pd.Series, col: str = "spread_pp") -> str:
    """`row[col]` with its 95 % seed-resampled interval `col_lo`–`col_hi` where the table has one (`display.spread`)."""
    return display.spread(float(row[col]), row.get(f"{col}_lo", math.nan), row.get(f"{col}_hi", math.nan))


def optimizers(t1: pd.DataFrame) -> Found:
    """Section 01 from T1: SGD's spread against the other optimisers'."""
    t = t1.set_index("optimizer").drop(index=CONTRAST, errors="ignore")  # the contrast row is not an optimiser
    sgd = float(t.at["sgd", "spread_pp"]) if "sgd" in t.index else math.nan
    others = t.drop(index="sgd", errors="ignore")["spread_pp"].astype(float).dropna()
    if math.isnan(sgd) or others.empty:
        sentence = "too few optimisers with a spread to compare SGD with the others."
    else:
        low, high = others.idxmin(), others.idxmax()
        rank = "the largest" if sgd > others.max() else f"below {high}'s {_spread(t.loc[high])}"
        sentence = (f"plain SGD's test-accuracy spread across σ_w is {_spread(t.loc['sgd'])}, {rank}; the other "
                    f"optimisers' range from {_spread(t.loc[low])} ({low}) to {_spread(t.loc[high])} ({high}), "
                    f"{others.min() / sgd:.0%}–{others.max() / sgd:.0%} of SGD's"
                    + (" (95 % seed-resampled intervals)." if "spread_pp_lo" in t else "."))
    return Found("01_optimizers", sentence, _rows(t1, ["optimizer", "spread_pp", "spread_pp_lo", "spread_pp_hi",
                                                       "paper_spread_pp", "radial_slope"]))


def long_training(t2: pd.DataFrame) -> Found:
    """Section 02 from T2: the spread at the first and the last epoch mark, per optimiser."""
    parts, rows = [], []
    for opt, g in t2.groupby("optimizer", sort=False):
        g = g.sort_values("epoch")
        first, last = g.iloc[0], g.iloc[-1]
        rows += [first, last]
        parts.append(f"{opt}'s spread is {_spread(first)} at epoch {int(first['epoch'])} and "
                     f"{_spread(last)} at epoch {int(last['epoch'])}")
    sentence = ("; ".join(parts) + ": training " + ("longer did not remove the spread." if all(
        r["spread_pp"] > 1 for r in rows[1::2]) else "longer brought a spread to ~0.")) if parts else "no marks."
    return Found("02_long_training", sentence, _rows(pd.DataFrame(rows), ["optimizer", "epoch", "spread_pp",
                                                                           "T_SGD", "T_adapt"]))


def lr_l2(t3: pd.DataFrame) -> Found:
    """Section 03 from T3: SGD's spread at the smallest and at the largest learning rate × weight decay."""
    cells = [c for c in t3.columns if c.startswith("wd=") and not c.endswith(("_std", "_lo", "_hi"))]
    lo, hi = t3.iloc[0], t3.iloc[-1]
    a, b = float(lo[cells[0]]), float(hi[cells[-1]])
    sentence = (f"SGD's spread falls from {_spread(lo, cells[0])} (lr {lo['lr']:g}, {cells[0]}) to "
                f"{_spread(hi, cells[-1])} "
                f"(lr {hi['lr']:g}, {cells[-1]}): a larger learning rate and more L2 make SGD forget"
                + ("." if b < a else ", but here it does not fall."))
    return Found("03_lr_l2", sentence, _rows(t3, ["lr", *cells]))


def batch_size(t4: pd.DataFrame) -> Found:
    """Section 04 from T4: where SGD's spread peaks over batch size, and Adam's range."""
    t = t4.set_index("batch_size")
    parts = []
    for opt in (c for c in ("sgd", "adam") if c in t):
        s = t[opt].astype(float).dropna()
        if len(s):
            parts.append(f"{opt}'s spread is largest at b = {int(s.idxmax())} ({_spread(t.loc[s.idxmax()], opt)}) "
                         f"and smallest at b = {int(s.idxmin())} ({_spread(t.loc[s.idxmin()], opt)})")
    sentence = "; ".join(parts) + "." if parts else "no spread to compare."
    cols = [c for c in ("batch_size", "sgd", "adam") if c in t4]
    return Found("04_batch_size", sentence, _rows(t4, cols))


def _rows(table: pd.DataFrame, cols: list[str]) -> pd.DataFrame:
    """`table`'s `cols` (and their `_std` companions), its display formats kept."""
    keep = [c for col in cols for c in (col, col + "_std") if c in table.columns]
    out = table[keep].reset_index(drop=True)
    out.attrs = dict(table.attrs)
    return out


def depth(t5: pd.DataFrame) -> Found:
    """Section 05 from T5: per architecture and optimiser, how many runs interpolated."""
    parts = [f"{r.arch} {r.optimizer} {r.interpolated}" for r in t5.itertuples()]
    failed = [f"{r.arch} {r.optimizer}" for r in t5.itertuples()
              if str(r.interpolated).split("/")[0] != str(r.interpolated).split("/")[-1]]
    sentence = ("runs that interpolated: " + ", ".join(parts) + "; "
                + (f"{', '.join(failed)} failed to fit some σ_w." if failed else "every run fitted its data."))
    return Found("05_depth", sentence, _rows(t5, ["arch", "optimizer", "interpolated", "spread_pp"]))


CLOCK_WORDS = {"Theta_slowest": "Θ of the slowest-turning σ_w"}


def forgetting_clocks(t7: pd.DataFrame, t8: pd.DataFrame, rule: str = "val_loss") -> Found:
    """Sections together from T7 and T8: the strongest rank correlation with the spread, and the clock whose
    unfolding lines collapse best under `rule`."""
    best = t7.loc[t7["spearman"].abs().idxmax()] if t7["spearman"].notna().any() else None
    c = t8[t8["rule"] == rule].dropna(subset=["collapse_ratio"])
    tight = c.loc[c["collapse_ratio"].idxmin()] if len(c) else None
    parts = []
    if best is not None:
        parts.append(f"the spread's strongest rank correlation is with {best['x']} (Spearman ρ "
                     f"{display.number(best['spearman'], 'signed')} over {int(best['n_configs'])} configurations)")
    if tight is not None:
        parts.append(f"its unfolding collapses best against {CLOCK_WORDS.get(tight['clock'], tight['clock'])} (ratio "
                     f"{display.number(tight['collapse_ratio'], 'decimal2')}; 0 is one curve, 1 no relation)")
    sentence = "; ".join(parts) + "." if parts else "no configuration with the instruments."
    numbers = c[["clock", "n_configs", "collapse_ratio"]].reset_index(drop=True).rename(
        columns={"collapse_ratio": "collapse ratio"})
    numbers["clock"] = numbers["clock"].map(lambda k: CLOCK_WORDS.get(k, k))
    numbers.attrs["formats"] = {"collapse ratio": "decimal2"}
    return Found("06_forgetting_clocks", sentence, numbers)


BUILDERS = {"01_optimizers": (optimizers, ("T1_optimizers",)),
            "02_long_training": (long_training, ("T2_long_training",)), "03_lr_l2": (lr_l2, ("T3_lr_l2",)),
            "04_batch_size": (batch_size, ("T4_batch_size",)), "05_depth": (depth, ("T5_depth",)),
            "06_forgetting_clocks": (forgetting_clocks, ("T7_clock_correlations", "T8_unfolding_collapse"))}


def of(section: str, tables: dict, up: int = 2) -> Found:
    """What `section` found, from its figure notebook's `tables` (name -> DataFrame, or a placeholder message: then
    the message); `up`: the notebook's depth below the repository root (figure notebooks: 2)."""
    if section not in BUILDERS:  # a section of the user's own (not one of the study's): nothing committed to quote
        return Found(section, f"the study has no section {section!r} to compare with.", pd.DataFrame(), up)
    build, names = BUILDERS[section]
    got = [tables.get(n, f"no {n}") for n in names]
    if msgs := [t for t in got if isinstance(t, str)]:
        return Found(section, msgs[0] + ".", pd.DataFrame(), up)
    return build(*got).at(up)


def _epoch_marks(section: str, profile: str) -> list[int] | None:
    """`epoch_marks` of `params/<section>.yaml`'s `profile` (what the figure notebook reads), else None."""
    import yaml
    try:
        doc = yaml.safe_load((ROOT / "params" / f"{section}.yaml").read_text(encoding="utf-8"))
        return doc["profiles"][profile]["fixed"].get("epoch_marks")
    except (OSError, KeyError, TypeError, AttributeError, yaml.YAMLError):
        return None


def study_tables(section: str, runs: pd.DataFrame, profile: str = "cpu") -> dict[str, pd.DataFrame]:
    """The table `of(section, ...)` reads for a section with a section notebook (01-05), built from `runs` as the
    section's figure notebook builds it."""
    from initmem.analysis import tables
    build = {"01_optimizers": tables.optimizer_table, "03_lr_l2": tables.lr_l2_table,
             "04_batch_size": tables.batch_size_table, "05_depth": tables.depth_table,
             "02_long_training": lambda r: tables.long_training_table(r, marks=_epoch_marks(section, profile))}
    return {BUILDERS[section][1][0]: build[section](runs)}


def what_we_found(section: str, point: pd.DataFrame | None = None, results: str | Path | None = None) -> Found:
    """A section notebook's closing cell: this `point`'s spread (its `run_point` rows), then what the committed
    study found for `section`, computed from its runs in `results` (relative to the repository root; default the
    section's headline set, `verdicts.headline_set`)."""
    from initmem import metrics
    from initmem.store.results import load_runs
    results = results or verdicts.headline_set(section)
    root = ROOT / results
    runs = load_runs(root / section) if (root / section).is_dir() else pd.DataFrame()
    found = of(section, study_tables(section, runs, root.name) if len(runs) else {}, up=1)
    head = ""
    if point is not None and len(point):
        s = metrics.point_summary(point)
        head = (f"This point: a spread of {'–' if s['spread_pp'] is None else display.spread(s['spread_pp'])} across "
                f"{len(s['sigma_ws'])} σ_w ({len(s['seeds'])} seed(s)). ")
    return dataclasses.replace(found, sentence=f"{head}The committed study ({results}, this section's headline set): "
                                               f"{found.sentence}")
