"""The study's verdicts as data: one `Verdict` per finding, the single source of the verdict that docs/findings.md (its
table and headings), README, the notebooks' "What we found" and the figure indexes show (tests/test_verdicts.py keeps
each page equal to it; `python -m initmem.analysis.verdicts` prints the blocks to paste). The words are
docs/study.md's (`WORDS`); a verdict's numbers are computed from the committed runs of its `evidence` tree, never
typed, and `limits` says what it does not show. Findings 3, 4 (L2), 5 and 7 take their word from the clock
experiment's registered criteria (T10, `clocks.criteria`) once those are read: `decided_by`, `OUTCOME_WORDS`."""

import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pandas as pd

from initmem import metrics
from initmem.analysis import cells, clocks, display, instrument_tables, tables

ROOT = Path(__file__).resolve().parents[2]
WORDS = ("consistent", "partly", "not shown", "contradicted")  # docs/study.md#verdicts defines each
OUTCOME_WORDS = {"held": "consistent", "consistent": "consistent", "partly": "partly", "not on f (below)": "partly",
                 "no power": "not shown", "refuted": "contradicted", "contradicted": "contradicted"}  # T10's outcomes
CLOCK_TIME, TIME_ALONE, BATCH, T_ADAPT, L2 = clocks.PREDICTIONS  # T10's five registered predictions
HEADLINE = "results/cpu_w025"  # the 5-seed width-0.25 grid: section 01's headline set
SECTION_SETS = {"01_optimizers": HEADLINE}  # each section's headline set; the others' is results/cpu


def headline_set(section: str) -> str:
    """The committed results tree a section's "What we found" reads (its headline set)."""
    return SECTION_SETS.get(section, "results/cpu")


@cache
def _runs(tree: str, section: str | None = None) -> pd.DataFrame:
    from initmem.store.results import load_runs
    path = ROOT / tree / section if section else ROOT / tree
    return load_runs(path)


@cache
def _clock_readings() -> tuple[pd.DataFrame, pd.DataFrame]:
    """The clock experiment's criteria (T10, indexed by prediction) and its complete readings (T11's rows)."""
    from initmem.store.results import load_histories
    runs = clocks.clock_runs(pd.concat([_runs(t) for t in clocks.TREES], ignore_index=True))
    hist = pd.concat([load_histories(ROOT / t) for t in clocks.TREES], ignore_index=True)
    hist = hist[hist["run_id"].isin(runs["run_id"])]
    return clocks.criteria(runs, hist).set_index("prediction"), clocks.complete(clocks.readings(runs, hist))


def _t10(prediction: str) -> tuple[str, str]:
    """T10's reading and outcome of one registered prediction."""
    row = _clock_readings()[0].loc[prediction]
    return row["reading"], row["outcome"]


@cache
def _t1(tree: str) -> pd.DataFrame:
    return tables.optimizer_table(_runs(tree)).set_index("optimizer")


def _pp(row: pd.Series, prefix: str = "") -> str:
    """A spread with its interval, as T1 shows it: '23.7 [23.0, 24.3]'."""
    v, lo, hi = (row.get(f"{prefix}spread_pp{s}", math.nan) for s in ("", "_lo", "_hi"))
    return display.spread(float(v), float(lo), float(hi)).removesuffix(" pp").replace(" pp [", " [")


def _seeds(tree: str) -> int:
    return int(_runs(tree).groupby(["optimizer", "sigma_w"])["seed"].nunique().min())


def _quote_1() -> str:
    t, n = _t1(HEADLINE), _seeds(HEADLINE)
    return (f"SGD's spread {_pp(t.loc['sgd'])} pp at the selected epoch, {_pp(t.loc['sgd'], 'end_')} at the end "
            f"of training (n = {n} seeds a σ_w)")


def _quote_2() -> str:
    t = _t1(HEADLINE)
    parts = ", ".join(f"{n} {_pp(t.loc[o])}" for o, n in (("adam", "Adam"), ("adamw", "AdamW"), ("muon", "Muon")))
    return (f"{parts} pp; SGD − max(adaptive) {_pp(t.loc[tables.CONTRAST])} selected, "
            f"{_pp(t.loc[tables.CONTRAST], 'end_')} at the end (n = {_seeds(HEADLINE)})")


def _quote_3() -> str:
    if VERDICTS[3].decided():
        return _t10(TIME_ALONE)[0] + ": G(600) − G(60) at lr 0.01, seeds paired"
    t2 = tables.long_training_table(_runs("results/cpu", "02_long_training"), marks=[25, 400])
    sgd = t2[t2["optimizer"] == "sgd"].set_index("epoch")["spread_pp"]
    pct = lambda e: display.number(sgd[e], "percent")  # noqa: E731
    return f"SGD's selected spread {pct(25)} pp at epoch 25, {pct(400)} at epoch 400 (results/cpu, 1 seed)"


def _quote_4() -> str:
    if VERDICTS[4].decided():  # the lr route's end-of-training G, beside the L2 route's
        r = _clock_readings()[1].query("route == 'lr' and epoch == 60").set_index("lr")
        said = ", ".join(f"lr {lr:g}: {clocks.g_text(r.loc[lr])} (n = {int(r.loc[lr, 'n'])})" for lr in (0.1, 0.01))
        return f"G (pp), {said}; " + _t10(L2)[0]
    lr = tables.optimizer_table(_runs("results/cpu_w025_lr").query("optimizer == 'sgd'")).iloc[0]
    return f"SGD lr 0.1: {_pp(lr)} pp (n = 3), lr 0.01: {_pp(_t1(HEADLINE).loc['sgd'])} (n = 5); no L2 run yet"


def _quote_5() -> str:
    if VERDICTS[5].decided():
        return "G (pp) at lr 0.01, " + _t10(BATCH)[0]
    t4 = tables.batch_size_table(_runs("results/cpu", "04_batch_size")).set_index("batch_size")["sgd"]
    return "SGD's spread " + ", ".join(f"b = {b}: {display.number(v, 'percent')}" for b, v in t4.items()) + \
        " pp (1 seed each)"


def _quote_6() -> str:
    t5 = tables.depth_table(_runs("results/cpu", "05_depth"))
    sgd = t5[t5["optimizer"] == "sgd"]
    return "SGD interpolates " + ", ".join(f"{r.interpolated} σ_w at {r.arch}" for r in sgd.itertuples()) + \
        " (800 steps, 1 seed)"


def _quote_7() -> str:
    if VERDICTS[7].decided():
        r = _clock_readings()[1]
        ends = [t for t in clocks.time_readings(r) if t["epoch"] == t["epochs"]]
        said = "; ".join(f"lr {t['lr']:g} × {t['epochs']}: {clocks.g_text(t)} vs f {t['f']:.1f}, band {t['band']:.1f}"
                         for t in ends)
        adam = r[r["optimizer"] == "adam"].set_index(["lr", "epoch"])
        by_time, by_lr = adam.loc[(1e-3, 180)], adam.loc[(3e-3, 60)]  # prediction 4's pair (`clocks.t_adapt`)
        n = min(int(by_time["n"]), int(by_lr["n"]), *(int(t["n"]) for t in ends))
        return (f"G (pp) by time: {said}; at T_adapt {by_time['T_adapt']:.1f} by time "
                f"{clocks.g_text(by_time)}, by lr {clocks.g_text(by_lr)} (n = {n})")
    t7 = instrument_tables.clock_correlations(_runs(HEADLINE)).set_index("x")
    r = t7.loc["T_SGD"]
    return (f"ρ(spread, T_SGD) = {display.number(r['spearman'], 'signed')} over {int(r['n_configs'])} "
            "configurations; the designed test (docs/experiments/clocks) is training")


@dataclass(frozen=True)
class Verdict:
    """A finding's verdict: its `word` (one of `WORDS`), the `evidence` tree its numbers come from, `quote` (the
    numbers, computed), `limits` (what it does not show)."""

    finding: int
    title: str
    anchor: str  # docs/study.md's heading anchor
    until: str  # the word while its criteria (`decided_by`) are pending; the word itself where it has none
    evidence: str
    quote: Callable[[], str]
    limits: str
    decided_by: tuple[str, ...] = ()  # T10's predictions that decide it
    known: tuple[str, ...] = ()  # words of its other halves, already read
    decided_limits: str = ""  # what it does not show, once decided

    def decided(self) -> str | None:
        """The word T10's outcomes give it (one word if all agree, else 'partly'); None while one is pending."""
        if not self.decided_by:
            return None
        outcomes = [_t10(p)[1] for p in self.decided_by]
        if "pending" in outcomes:
            return None
        words = {OUTCOME_WORDS[o] for o in outcomes} | set(self.known)
        return words.pop() if len(words) == 1 else "partly"

    @property
    def word(self) -> str:
        return self.decided() or self.until

    @property
    def what_not(self) -> str:
        """What it does not show: `decided_limits` once decided, else `limits`."""
        return self.decided_limits if self.decided() else self.limits

    @property
    def source(self) -> str:
        """The trees its numbers are read from: once decided the clock experiment's (after `evidence` where another
        half is `known`), else `evidence`."""
        if not self.decided():
            return self.evidence
        return f"{self.evidence}, {clocks.TREES[0]}" if self.known else clocks.TREES[0]

    def line(self) -> str:
        """'finding 1 (SGD remembers): *consistent*', as the notebooks and indexes show it."""
        return f"finding {self.finding} ({self.title}): *{self.word}*"

    def heading(self) -> str:
        return f"## {self.finding}. {self.title} — {self.word}"


VERDICTS = {v.finding: v for v in (
    Verdict(1, "SGD remembers", "finding-1-sgd-remembers", "consistent", HEADLINE, _quote_1,
            "one protocol (ResNet-9 width 0.25, 2,000 images); memory follows the effective lr more than the "
            "optimiser's name (docs/experiments/matched_lr)"),
    Verdict(2, "Adaptive methods forget", "finding-2-adaptive-methods-forget", "partly", HEADLINE, _quote_2,
            "they keep a third to a half of SGD's spread, not the paper's near zero; Muon's and SGD+momentum's "
            "selected networks have not yet fitted"),
    Verdict(3, "Time alone is not enough", "finding-3-time-alone-is-not-enough", "not shown", "results/cpu",
            _quote_3, "selection freezes early, so a flat selected spread says little; the 600-epoch clock route "
            "will decide", (TIME_ALONE,), decided_limits="600 epochs, not the paper's 5,000, and the wear "
            "has not levelled off by then; lr 0.01 only, one protocol, 3 seeds a σ_w; G a 10-epoch median, not at a "
            "selected epoch"),
    Verdict(4, "Regularisation and learning rate make SGD forget",
            "finding-4-regularisation-and-learning-rate-make-sgd-forget", "partly",
            "results/cpu_w025_lr, results/cpu_w025", _quote_4,
            "lr: consistent, two lrs in one protocol; L2: not shown (the clock experiment's L2 route will read it)",
            (L2,), ("consistent",), "one protocol, 3 seeds a σ_w, 2 lrs, 2 λ at lr 0.01; λ 0.3 holds by its "
            "2 SE allowance, none fitted"),
    Verdict(5, "Batch size", "finding-5-batch-size", "not shown", "results/cpu", _quote_5,
            "one seed and unequal fitting across b; the clock experiment's batch route will decide", (BATCH,),
            decided_limits="lr 0.01, b 16–128 in one protocol, 3 seeds a σ_w; b 64 and 128 lie below f's range, "
            "where the clock predicts only a floor; at epoch 120 b 128 has taken half b 32's steps"),
    Verdict(6, "Depth", "finding-6-depth", "not shown", "results/cpu", _quote_6,
            "no designed test: 800 steps and one seed cannot tell 'never fits' from 'fits slowly'; the deeper net "
            "does not fail more; no ResNet-110"),
    Verdict(7, "Clocks, not epochs", "finding-7-clocks-not-epochs", "not shown", HEADLINE, _quote_7,
            "5 configurations cannot settle a sign; lr and T_SGD vary together in the committed runs",
            (CLOCK_TIME, T_ADAPT), decided_limits="one protocol, 3 seeds a σ_w; lr 0.0562 at the band's edge; f "
            "interpolated between 5 lrs trained at 3 commits; Adam at one T_adapt"),
)}


def findings_table() -> str:
    """docs/findings.md's verdict table (between its `<!-- verdicts:begin/end -->` markers)."""
    rows = ["| finding | verdict | numbers | read from | what it does not show |", "|---|---|---|---|---|"]
    for v in VERDICTS.values():
        rows.append(f"| {v.finding}. {v.title} | **{v.word}** | {v.quote()} | "
                    f"`{v.source}` | {v.what_not} |")
    return "\n".join(rows)


def readme_table() -> str:
    """README's verdict table: a line a finding, its word and link."""
    rows = ["| finding | verdict at CPU scale |", "|---|---|"]
    rows += [f"| {v.finding}. {v.title} | [{v.word}](docs/findings.md#{v.finding}-{_slug(v.title)}--{_slug(v.word)}) |"
             for v in VERDICTS.values()]
    return "\n".join(rows)


def _slug(text: str) -> str:
    """GitHub's heading anchor of `text` (lower case, spaces to '-', punctuation dropped)."""
    return "".join(c for c in text.lower().replace(" ", "-") if c.isalnum() or c in "-_")


def readme_block(runs: pd.DataFrame) -> str:
    """The README's result block: T1's spread per optimiser at the selected epoch and at the end of training, each
    with its 95 % interval, the seeds, then the contrast row and a caption naming the statistics
    (tests/test_readme_numbers.py keeps README.md equal to it)."""
    t, confs = tables.optimizer_table(runs), tables.configurations(runs)
    lines = ["| optimiser | spread at the selected epoch (pp) | spread at the end of training (pp) | seeds |",
             "|---|---|---|---|"]
    seeds = []
    for r in t.to_dict("records"):
        name = r["optimizer"]
        n = confs["seed"].nunique() if name == tables.CONTRAST else \
            confs.loc[confs["optimizer"] == name, "seed"].nunique()
        seeds.append(n)
        lines.append(f"| {name} | {_pp(pd.Series(r))} | {_pp(pd.Series(r), 'end_')} | {n} |")
    what = cells.TEST_SETS[cells.spread_column(confs)]
    crude = "; crude with 2 seeds" if min(seeds, default=0) <= 2 else ""  # each σ_w's mean: a, b or their average
    lines += ["", f"Spread: max − min over σ_w of the seed-mean test accuracy at the lowest-validation-loss epoch "
              f"({what}) and at the end of training (each run's median over its last {metrics.END_WINDOW} epochs, "
              f"{cells.TEST_SETS[cells.SUBSET_TEST]}); [95 % interval]: seeds resampled within each σ_w "
              f"(`metrics.spread_resamples`{crude})."]
    return "\n".join(lines)


if __name__ == "__main__":  # the generated blocks, to paste between their markers
    print(findings_table(), readme_table(), readme_block(_runs(HEADLINE)), sep="\n\n", file=sys.stdout)
