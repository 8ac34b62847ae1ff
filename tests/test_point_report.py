"""The point report warns where a spread is between networks at chance (a smoke point at 7-10 % test accuracy): such
a spread is noise, not a memory of the initialisation. On hand-made rows, no training."""

from __future__ import annotations

import pandas as pd
import pytest

from initmem.analysis import point_report
from initmem.config import NUM_CLASSES


def _point(accuracies: dict[float, float], seeds: int = 1) -> pd.DataFrame:
    """A point's `run_point`-like rows: per σ_w its test accuracy (the same for every seed but a small offset)."""
    return pd.DataFrame([{"run_id": f"r{s}-{seed}", "sigma_w": s, "seed": seed, "status": "complete",
                          "test_acc_at_best": acc + 0.001 * seed, "interpolated": False, "tau_interp": None}
                         for s, acc in accuracies.items() for seed in range(seeds)])


def test_a_spread_between_networks_at_chance_carries_a_warning():
    smoke = _point({0.5: 0.101, 1.0: 0.07, 2.0: 0.09}, seeds=2)  # a 3.1 pp spread, every network ~ chance
    assert point_report.at_chance(smoke)
    table = point_report.summary_table(smoke)
    assert table.loc["warning", "value"] == ("spread 3.1 pp between networks at chance (every test accuracy <= 15 %): "
                                             "not a memory")
    assert table.loc["spread across σ_w (pp)", "value"].startswith("3.1 [")
    row = point_report.sweep_row(smoke, "p", smoke["run_id"].tolist())
    assert row["spread_pp"] == 3.1 and row["warning"] == "at chance: not a memory"
    assert "spread 3.1 pp at chance" in point_report.point_figure(smoke, pd.DataFrame(
        columns=["run_id", "epoch"])).axes[0].get_title()


@pytest.mark.parametrize("accuracies", [{0.5: 0.62, 1.0: 0.55}, {0.5: 0.16, 1.0: 0.09}])
def test_a_spread_where_some_network_learnt_carries_none(accuracies):
    """One network above 1.5 x chance (15 % of ten classes) is enough: its spread may be a memory."""
    runs = _point(accuracies)
    assert 1.5 / NUM_CLASSES == pytest.approx(0.15) and not point_report.at_chance(runs)
    assert "warning" not in point_report.summary_table(runs).index
    assert "warning" not in point_report.sweep_row(runs, "p", runs["run_id"].tolist())


def test_no_spread_no_warning():
    """One σ_w, or no accuracy at all (every run diverged), has no spread to warn about."""
    one = _point({1.0: 0.1})
    assert point_report.at_chance(one) and point_report.chance_warning(one, None) is None
    assert "warning" not in point_report.summary_table(one).index
    diverged = _point({0.5: float("nan"), 1.0: float("nan")}).assign(status="diverged")
    assert not point_report.at_chance(diverged)
