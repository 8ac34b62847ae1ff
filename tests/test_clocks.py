"""The clock experiment's analysis (initmem.analysis.clocks): its committed tables (figures/cpu_w025_clocks: T10 the
criteria, T11 the readings) equal what the committed runs give, G and its interval, the curve f, and each registered
criterion deciding as registered on readings made to order."""

import json
import math
import re
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from initmem.analysis import clocks
from initmem.store.results import load_histories, load_runs
from initmem.study.notebook import notebook_parameters

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = notebook_parameters(ROOT / "notebooks" / "figures" / "clock_experiment_figures.py")
TREES = (NOTEBOOK["results_dir"].default, *NOTEBOOK["shared_dirs"].default)  # what the committed set reads


def test_the_committed_tables_are_what_the_committed_runs_give():
    runs = clocks.clock_runs(pd.concat([load_runs(ROOT / t) for t in TREES], ignore_index=True))
    hist = pd.concat([load_histories(ROOT / t) for t in TREES], ignore_index=True)
    hist = hist[hist["run_id"].isin(runs["run_id"])]
    tables = ROOT / "figures" / "cpu_w025_clocks" / "tables"
    got = clocks.criteria(runs, hist)
    want = pd.read_csv(tables / "T10_clock_criteria.csv", keep_default_na=False)
    assert got.astype(str).to_dict("records") == want.astype(str).to_dict("records")
    shown = clocks.reading_table(clocks.readings(runs, hist))
    want = pd.read_csv(tables / "T11_clock_readings.csv")
    assert list(shown.columns) == list(want.columns) and len(shown) == len(want)
    pd.testing.assert_frame_equal(shown.reset_index(drop=True), want, check_dtype=False, rtol=1e-5)


def test_g_is_the_gap_of_seed_means_with_an_enumerated_interval():
    g = clocks.gap(np.array([60.0, 62.0, 61.0]), np.array([40.0, 41.0, 39.0]))
    assert g["G_pp"] == pytest.approx(21.0) and g["n"] == 3
    assert g["se_pp"] == pytest.approx(math.sqrt(1 / 3 + 1 / 3))
    assert 19.0 <= g["G_lo"] < 21.0 < g["G_hi"] <= 23.0  # within the extreme resamples (60-41 .. 62-39)


def reading(route, lr, epoch, t_sgd, g, se=0.5, epochs=60, optimizer="sgd", b=32, wd=0.0, fitted="6/6", **kw):
    return {"route": route, "optimizer": optimizer, "lr": lr, "batch_size": b, "weight_decay": wd, "epochs": epochs,
            "epoch": epoch, "T_SGD": t_sgd, "T_L2": kw.get("t_l2", 0.0), "T_adapt": kw.get("t_adapt", 1.0),
            "G_pp": g, "se_pp": se, "G_lo": g - 1, "G_hi": g + 1, "n": 3, "fitted": fitted}


LR_ROUTE = [reading("lr", 0.01, 60, 0.01, 20.0), reading("lr", 0.1, 60, 1.0, 4.0)]


def test_f_is_linear_in_log_t_between_the_lr_routes_points_and_undefined_outside():
    pts = clocks.curve(pd.DataFrame(LR_ROUTE))
    assert clocks.f_at(pts, 0.1) == pytest.approx((12.0, 0.5))
    assert math.isnan(clocks.f_at(pts, 5.0)[0]) and math.isnan(clocks.f_at(pts, 0.001)[0])


LARGE_LR = [reading("time", 0.0562, 60, 0.3, 10.0, epochs=180),  # its own 60 above f(0.9): the 180 reading has power
            reading("time", 0.0562, 180, 0.9, 5.0, epochs=180)]  # on f (f(0.9) = 4.5: f now runs through its 60)


@pytest.mark.parametrize("g600, outcome", [(12.5, "held"), (19.0, "refuted"), (4.0, "not on f (below)")])
def test_the_time_route_refutes_the_clock_only_when_its_memory_stays_above_f(g600, outcome):
    r = pd.DataFrame(LR_ROUTE + LARGE_LR + [reading("time", 0.01, 60, 0.01, 20.0, epochs=600),
                                            reading("time", 0.01, 600, 0.1, g600, epochs=600)])
    said, got = clocks.clock_time(r)
    assert got == outcome and "e600" in said and "lr 0.0562 e180: 5.0 [4.0, 6.0] vs f 4.5, band 3.0, on f" in said


def test_the_time_route_is_pending_until_both_its_lrs_are_read_unless_one_refutes():
    one = LR_ROUTE + [reading("time", 0.01, 60, 0.01, 20.0, epochs=600)]
    assert clocks.clock_time(pd.DataFrame(one + [reading("time", 0.01, 600, 0.1, 12.5, epochs=600)]))[1] == "pending"
    assert clocks.clock_time(pd.DataFrame(one + [reading("time", 0.01, 600, 0.1, 19.0, epochs=600)]))[1] == "refuted"


def test_a_reading_without_power_decides_nothing():
    r = pd.DataFrame(LR_ROUTE + [reading("time", 0.01, 60, 0.1, 13.0, epochs=600),  # its own 60 already near f
                                 reading("time", 0.01, 600, 0.1, 13.0, epochs=600)])
    said, got = clocks.clock_time(r)
    assert "no power" in said and got == "pending"


def test_batch_and_l2_and_t_adapt_criteria_decide_as_registered():
    base = [reading("lr", 0.01, 60, 0.01, 20.0)]
    rising = base + [reading("batch", 0.01, 60, 0.04, 14.0, b=16), reading("batch", 0.01, 120, 0.005, 21.0, b=64,
                     epochs=120), reading("batch", 0.01, 120, 0.001, 22.0, b=128, epochs=120)]
    assert clocks.finding5(pd.DataFrame(rising))[1] == "consistent"
    flat = [dict(x, G_pp=19.5) if x["batch_size"] == 16 else x for x in rising]
    assert clocks.finding5(pd.DataFrame(flat))[1] == "contradicted"
    assert clocks.finding5(pd.DataFrame(base))[1] == "pending"
    l2 = [reading("L2", 0.01, 60, 0.01, 10.0, wd=0.03), None]
    for g, want in ((2.0, "held"), (8.0, "refuted")):
        l2[1] = reading("L2", 0.01, 60, 0.01, g, wd=0.3)
        assert clocks.t_l2(pd.DataFrame(l2))[1] == want
    adam = [reading("adaptive", 1e-3, 180, 0.0, 8.0, optimizer="adam", epochs=180),
            reading("adaptive", 3e-3, 60, 0.0, 9.0, optimizer="adam")]
    assert clocks.t_adapt(pd.DataFrame(adam))[1] == "pending"  # its epoch-120 reading is part of the prediction
    adam.append(reading("adaptive", 1e-3, 120, 0.0, 10.0, optimizer="adam", epochs=180))
    assert clocks.t_adapt(pd.DataFrame(adam))[1] == "held"
    adam[2] = reading("adaptive", 1e-3, 120, 0.0, 16.0, optimizer="adam", epochs=180)  # not between them ± band
    assert clocks.t_adapt(pd.DataFrame(adam))[1] == "refuted"
    adam[1:] = [reading("adaptive", 3e-3, 60, 0.0, 15.0, optimizer="adam"), adam[2]]
    assert clocks.t_adapt(pd.DataFrame(adam))[1] == "refuted"


def test_each_configuration_has_its_route():
    assert [clocks.route(dict(optimizer=o, weight_decay=w, batch_size=b, epochs=e)) for o, w, b, e in (
        ("adam", 0.0, 32, 60), ("sgd", 0.3, 32, 60), ("sgd", 0.0, 16, 60), ("sgd", 0.0, 32, 600),
        ("sgd", 0.0, 32, 60))] == ["adaptive", "L2", "batch", "time", "lr"]


def test_a_configuration_without_all_its_seeds_decides_nothing():
    r = pd.DataFrame(LR_ROUTE + [reading("time", 0.01, 60, 0.01, 20.0, epochs=600),
                                 reading("time", 0.01, 600, 0.1, 19.0, epochs=600)])
    r.loc[r["epochs"] == 600, "n"] = 1  # one seed at a σ_w so far
    assert clocks.clock_time(r)[1] == "refuted"  # as if decided ...
    assert clocks.clock_time(clocks.complete(r))[1] == "pending"  # ... but criteria() reads complete ones only


def test_the_verdicts_read_the_trees_the_committed_set_reads():
    assert TREES == clocks.TREES


def _t11_readings() -> pd.DataFrame:
    """The committed T11's readings at λ = 0 (T11 shows T_L2, not λ), named as `clocks.readings` names them, so
    that `clocks.curve` and `clocks.time_readings` read them as they read the runs."""
    t11 = pd.read_csv(ROOT / "figures" / "cpu_w025_clocks" / "tables" / "T11_clock_readings.csv")
    t11 = t11[t11["T_L2"] == 0]
    return t11.rename(columns={"G (pp)": "G_pp", "SE (pp)": "se_pp"}).assign(weight_decay=0.0)


def test_findings_md_says_what_t10_says_of_the_time_route():
    """findings.md's finding 7 reports predictions 1's and 4's outcomes in words, exactly as T10 gives them."""
    t10 = pd.read_csv(ROOT / "figures" / "cpu_w025_clocks" / "tables" / "T10_clock_criteria.csv")
    outcome = t10.set_index("prediction").at["1. the clock, time route", "outcome"]
    text = " ".join((ROOT / "docs" / "findings.md").read_text(encoding="utf-8").split())
    section = text.split("## 7. Clocks, not epochs")[1].split("## ")[0]
    assert ("its time route refutes T_SGD as registered" in section) == (outcome == "refuted"), outcome
    adapt = t10.set_index("prediction").at["4. T_adapt", "outcome"]
    assert ("T_adapt holds as registered" in section) == (adapt == "held"), adapt
    assert ("T_adapt is refuted as registered" in section) == (adapt == "refuted"), adapt
    r = _t11_readings()
    times = clocks.time_readings(r)
    ends = [t for t in times if t["epoch"] == t["epochs"]]
    both = len(ends) == 2 and all(t["side"] == "above f" and t["power"] for t in ends)
    assert ("at both lrs" in section and "both last readings above f, with power" in section) == both, ends
    if both:  # how clearly: lr 0.01 leaves f after its last 'on f' mark; lr 0.0562 within 0.5 pp of the band
        lr01 = [t for t in times if math.isclose(t["lr"], 0.01)]
        on = max(t["epoch"] for t in lr01 if t["side"] == "on f")
        above = min(t["epoch"] for t in lr01 if t["side"] == "above f")
        assert f"clearly at lr 0.01 (on f to epoch {on}, above from {above})" in section
        margin = {round(t["lr"], 4): t["G_pp"] - t["f"] - t["band"] for t in ends}
        assert margin[0.0562] < 0.5 <= margin[0.01] and "at the band's edge at 0.0562" in section, margin


def test_findings_md_says_how_many_l2_networks_fit():
    """findings.md's finding 4 counts the L2 route's fitted networks in words; T11 counts them from the runs."""
    t11 = pd.read_csv(ROOT / "figures" / "cpu_w025_clocks" / "tables" / "T11_clock_readings.csv")
    fitted = dict(zip(t11.loc[t11["route"] == "L2", "T_L2"].round(1), t11.loc[t11["route"] == "L2", "fitted"],
                      strict=True))
    assert fitted == {1.1: "5/6", 11.2: "0/6"}
    text = " ".join((ROOT / "docs" / "findings.md").read_text(encoding="utf-8").split())
    assert "at λ 0.03 (T_L2 ≈ 1.1) five of six networks fit" in text
    assert "(T_L2 ≈ 11) the memory is small but none fits" in text


def test_findings_md_says_what_t11_says_of_the_batch_route():
    """findings.md's finding 5: G rises with b (each b at its last epoch), every batch network fitted, and b 16
    falls on f at its T_SGD — read from T11 with f built as `clocks.curve` builds it."""
    r = _t11_readings()
    last = r[(r["epoch"] == r["epochs"]) & (r["optimizer"] == "sgd") & np.isclose(r["lr"], 0.01)]
    by_b = last[(last["route"] == "batch") | (last["route"] == "lr")].set_index("batch_size")
    assert list(by_b.index.sort_values()) == [16, 32, 64, 128]
    assert by_b.sort_index()["G_pp"].is_monotonic_increasing
    assert (by_b.loc[[16, 64, 128], "fitted"] == "6/6").all()
    b16 = by_b.loc[16]
    f, se_f = clocks.f_at(clocks.curve(r[r["route"].isin(["lr", "time"])]), b16["T_SGD"])
    assert abs(b16["G_pp"] - f) <= clocks.band(b16["se_pp"], se_f)
    text = " ".join((ROOT / "docs" / "findings.md").read_text(encoding="utf-8").split())
    section = text.split("## 5. Batch size")[1].split("## ")[0]
    assert "every network fits and G rises with b" in section and "b = 16 also falls on" in section
    b64 = last[last["batch_size"] == 64].iloc[0]
    overlap = b64["95 % low"] <= by_b.loc[32, "95 % high"] and by_b.loc[32, "95 % low"] <= b64["95 % high"]
    assert ("b 32 and 64 lie within each other's intervals" in section) == overlap


def test_findings_md_says_what_t10_says_of_finding_3():
    """findings.md's finding 3 says prediction 2's outcome in words, exactly as T10 gives it ('will decide' while
    pending)."""
    t10 = pd.read_csv(ROOT / "figures" / "cpu_w025_clocks" / "tables" / "T10_clock_criteria.csv")
    outcome = t10.set_index("prediction").at["2. finding 3", "outcome"]
    text = " ".join((ROOT / "docs" / "findings.md").read_text(encoding="utf-8").split())
    section = text.split("## 3. Time alone is not enough")[1].split("## ")[0]
    said = {"pending": "will decide", **{w: f"{w} as registered" for w in ("consistent", "partly", "contradicted")}}
    assert {o for o, phrase in said.items() if phrase in section} == {outcome}, outcome
    if outcome != "pending":  # its size and sign as the reading gives them: 'ΔG = -2.0 pp [-2.6, -1.4] (n = 3)'
        reading = t10.set_index("prediction").at["2. finding 3", "reading"]
        dg, lo, hi = map(float, re.match(r"ΔG = (\S+) pp \[(\S+), (\S+)\]", reading).groups())
        assert (f"about {abs(dg):.0f} pp over 540 epochs" in section) == (abs(dg) >= 0.5), reading
        assert ("its interval lies below 0" in section) == (hi < 0), reading
        readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
        assert f"about {abs(dg):.0f} pp from epoch 60 to 600 at lr 0.01" in readme, reading


REGISTERED = "48c292ccb8c67155e9c43ca4540a21b75d9d1440"  # the commit that registered the predictions


def test_every_clock_run_was_trained_from_the_commit_that_registered_its_predictions():
    """The predictions precede the runs: each run of the clock tree records that commit, unmodified, and a start
    after it; the commit holds the registered predictions (where the clone has its history)."""
    records = [json.loads(p.read_text(encoding="utf-8")) for p in (ROOT / TREES[0]).rglob("run.json")]
    provenance = pd.DataFrame([r["provenance"] for r in records])
    assert len(records) == 72 and set(provenance["git_commit"]) == {REGISTERED} and not provenance["git_dirty"].any()
    shown = subprocess.run(["git", "show", "-s", "--format=%cI", REGISTERED], cwd=ROOT, capture_output=True, text=True)
    if shown.returncode:
        pytest.skip(f"this clone lacks commit {REGISTERED[:7]}: {shown.stderr.strip()}")
    registered_at = pd.Timestamp(shown.stdout.strip())
    assert all(pd.Timestamp(r["started_at"]) > registered_at for r in records)
    doc = subprocess.run(["git", "show", f"{REGISTERED}:docs/experiments/clocks/README.md"], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    assert "## Registered 2026-12-06, before any run of the profile" in doc and "5. *T_L2*" in doc
