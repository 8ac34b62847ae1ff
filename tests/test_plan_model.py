"""The host-floor model of a GPU step (`initmem.study.stepmodel`): its op counts are what a step dispatches on `meta`,
its fit is the committed H200 table's, the paper profile's plan is what the model gives on those numbers, each run id
counted once; and a GPU profile is not priced by a CPU's table."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from initmem.cli.commands import main
from initmem.config import TrainConfig, point_configs, run_id
from initmem.study import calibrate, plan, stepmodel, throughput
from initmem.study.params import load_section

REPO = Path(__file__).resolve().parents[1]
PARAMS = sorted(str(p) for p in (REPO / "params").glob("*.yaml"))
META = torch.device("meta")
NOT_LAUNCHED = {"empty", "empty_strided", "detach", "lift_fresh"}  # allocations and aliases: no kernel


class Launches(TorchDispatchMode):
    """Counts the aten calls on `meta` tensors that are no view, allocation or detach: a kernel each on a GPU."""

    def __init__(self):
        super().__init__()
        self.n = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        on_device = any(isinstance(t, torch.Tensor) and t.device == META for t in tree_leaves((args, kwargs)))
        if on_device and func.namespace == "aten" and not func.is_view and func.__name__.split(".")[0] not in \
                NOT_LAUNCHED:
            self.n += 1
        return func(*args, **(kwargs or {}))


def launched(arch: str, optimizer: str, batch: int = 128) -> int:
    """Ops a second `Loop.train_step` launches (the first made the optimiser's state), foreach as on CUDA."""
    from initmem.data import splits
    from initmem.engine.loop import Loop
    base = TrainConfig(arch=arch, data="synthetic", n_train=2 * batch, n_val=10, n_test=10, train_eval_size=10,
                       batch_size=batch, epochs=1, device="cpu", optimizer=optimizer)
    sp = splits.make_splits(splits.make_synthetic(2 * batch + 10, 10), 10, 2 * batch, 10, 0, META, 10)
    loop = Loop.build([base], META, sp)
    for group in loop.opt.param_groups:  # torch picks foreach on CUDA only: as there
        if "foreach" in group:
            group["foreach"] = True
    sums, idxs = torch.zeros(1, 2, dtype=torch.float64, device=META), (torch.arange(batch, device=META),)
    loop.train_step(idxs, sums)
    with Launches() as c:
        loop.train_step(idxs, sums)
    return c.n


def test_the_op_counts_are_what_a_step_launches_on_meta():
    assert {k: launched(*k) for k in stepmodel.STEP_OPS} == stepmodel.STEP_OPS
    assert launched("resnet9", "sgd", batch=16) == stepmodel.STEP_OPS[("resnet9", "sgd")]  # the batch: shapes only


def _reference() -> throughput.Throughput:
    return throughput.load_throughput(calibrate.REFERENCE_GPU, "cuda")


def test_the_fit_of_the_h200_table():
    """The per-op cost of its two host-bound steps (tf32 b = 128, fp32 b = 32); fp32 b = 128 is GPU-bound and sets the
    GPU's seconds per FLOP, tf32's and bf16's by their evaluated image against fp32's."""
    table = _reference()
    by = {(e.batch_size, e.precision): e for e in table.entries if e.members == 1}
    hf = stepmodel.fit(table)
    ops = stepmodel.STEP_OPS[("resnet9", "sgd")] + stepmodel.OPS_BEFORE_FUSED  # what the timed code launched
    assert table.created < stepmodel.FUSED_SINCE
    assert sorted(hf.per_op_s) == sorted([by[(128, "tf32")].train_step_s / ops, by[(32, "fp32")].train_step_s / ops])
    low, mid, high = hf.per_op
    assert low < mid < high and mid == pytest.approx(math.sqrt(low * high))
    assert 30e-6 < low and high < 50e-6  # the issue's ~36 us an op
    r9 = TrainConfig(arch="resnet9", batch_size=128, precision="fp32")
    assert hf.gpu_work(r9) == pytest.approx(by[(128, "fp32")].train_step_s)
    assert stepmodel.modelled_steps(hf, r9) == pytest.approx([by[(128, "fp32")].train_step_s] * 3)  # GPU-bound
    tf32 = stepmodel.modelled_steps(hf, r9.replace(precision="tf32"))
    now = stepmodel.STEP_OPS[("resnet9", "sgd")] / ops  # today's step launches fewer ops than the timed one
    assert tf32[0] == pytest.approx(by[(128, "tf32")].train_step_s * now) and tf32[2] > tf32[1] > tf32[0]
    assert hf.gpu_work(r9.replace(precision="tf32")) == pytest.approx(
        by[(128, "fp32")].train_step_s * by[(128, "tf32")].eval_image_s / by[(128, "fp32")].eval_image_s)
    assert stepmodel.fit(throughput.Throughput("GPU", "", [by[(128, "fp32")]], "cuda")) is None  # nothing host-bound


def _by_hand(config: TrainConfig, table: throughput.Throughput) -> tuple[float, float, float, str]:
    """(step at the central, low, high per-op cost, its source) of a paper point, from the table's numbers alone."""
    by = {e.key: e for e in table.entries}
    if (e := by.get((config.arch, 1.0, config.batch_size, config.precision, 1, config.optimizer))) is not None:
        return e.train_step_s, e.train_step_s, e.train_step_s, "measured"
    fp32, tf32 = by[("resnet9", 1.0, 128, "fp32", 1, "sgd")], by[("resnet9", 1.0, 128, "tf32", 1, "sgd")]
    work = (fp32.train_step_s * tf32.eval_image_s / fp32.eval_image_s * config.batch_size / 128
            * plan.ARCH_MACS[config.arch] / plan.ARCH_MACS["resnet9"])
    ops = stepmodel.STEP_OPS[(config.arch, config.optimizer)]
    r9 = stepmodel.STEP_OPS[("resnet9", "sgd")] + stepmodel.OPS_BEFORE_FUSED  # the fit's: the timed code's ops
    costs = [tf32.train_step_s / r9, by[("resnet9", 1.0, 32, "fp32", 1, "sgd")].train_step_s / r9]
    mid = math.sqrt(costs[0] * costs[1])
    return max(work, ops * mid), max(work, ops * min(costs)), max(work, ops * max(costs)), "modelled"


def test_the_paper_profiles_plan_is_the_models_on_the_committed_numbers(capsys):
    """Each run once: 203 run ids of 238 runs (the SGD and Adam b = 128 runs of 01 are 03's, 04's and 05's too), all
    203 to train (01's SGD runs, the first 200 epochs of 02's, come first), measured and modelled hours apart, the
    modelled with the range of the fitted per-op cost."""
    table = _reference()
    tf32 = next(e for e in table.entries if (e.batch_size, e.precision, e.members) == (128, "tf32", 1))
    eval_s = {a: tf32.eval_image_s * plan.ARCH_MACS[a] / plan.ARCH_MACS["resnet9"]
              for a in ("resnet9", "resnet56", "resnet110")}  # the tf32 entry's, scaled by MACs
    want, seen = {"measured": [0.0] * 3, "modelled": [0.0] * 3}, set()
    for path in PARAMS:  # 02's runs come after 01's, so none of them serves 01's SGD runs as its first epochs
        section = load_section(path)
        for p in section.points("paper"):
            for c in point_configs(section.effective(p)):
                if (rid := run_id(c)) in seen:
                    continue
                seen.add(rid)
                r, steps = plan.run_plan(c), _by_hand(c, table)
                for i, step in enumerate(steps[:3]):
                    want[steps[3]][i] += r["steps"] * step + r["eval_images"] * eval_s[c.arch]
    assert main(["plan", *PARAMS, "--profile", "paper", "--throughput", str(calibrate.REFERENCE_GPU), "--json"]) == 0
    t = json.loads(capsys.readouterr().out)["totals"]
    assert (t["runs"], t["served_runs"]) == (len(seen), 238 - len(seen)) == (203, 35)  # 203 run ids
    assert t["seconds_measured"] == pytest.approx(want["measured"][0], rel=1e-9)
    assert [t["seconds_modelled"], t["seconds_modelled_low"], t["seconds_modelled_high"]] == pytest.approx(
        want["modelled"], rel=1e-9)
    assert t["seconds_estimated"] == 0 and t["seconds"] == pytest.approx(t["seconds_measured"] + t["seconds_modelled"])
    assert main(["plan", *PARAMS, "--profile", "paper", "--throughput", str(calibrate.REFERENCE_GPU)]) == 0
    last = capsys.readouterr().out.splitlines()[-1]
    assert ("all total: 203 runs (35 runs of other points counted there)" in last
            and f"(measured {t['seconds_measured'] / 3600:.1f} h + modelled {t['seconds_modelled'] / 3600:.1f} h ["
            f"{t['seconds_modelled_low'] / 3600:.1f} h-{t['seconds_modelled_high'] / 3600:.1f} h])" in last), last


def test_a_run_id_of_several_sections_is_counted_in_the_first_and_a_prefix_in_an_earlier_longer_run():
    table = _reference()
    plans = plan.share_runs([plan.plan_section(p, "paper", table) for p in PARAMS])
    served = {f"{s.section}/{p.point_id}": p.served_by for s in plans for p in s.points if p.served_by}
    assert served == {  # 01's SGD runs, the first 200 epochs of 02's, train first: a sweep cannot serve them
        "03_lr_l2/lr-0.01_weight_decay-0_4c319d": {"01_optimizers/optimizer-sgd_c84530": 7},
        "04_batch_size/optimizer-sgd_batch_size-128_c84530": {"01_optimizers/optimizer-sgd_c84530": 7},
        "04_batch_size/optimizer-adam_batch_size-128_b46586": {"01_optimizers/optimizer-adam_b46586": 7},
        "05_depth/arch-resnet9_optimizer-sgd_fd547c": {"01_optimizers/optimizer-sgd_c84530": 7},
        "05_depth/arch-resnet9_optimizer-adam_f75157": {"01_optimizers/optimizer-adam_b46586": 7}}
    alone = plan.share_runs([plan.plan_section(PARAMS[3], "paper", table)])  # one section: it trains them all
    assert alone[0].totals()["runs"] == 70 and alone[0].totals()["served_runs"] == 0
    long_first = plan.share_runs([plan.plan_section(PARAMS[i], "paper", table) for i in (1, 0)])  # 02, then 01
    assert {p.point_id: p.served_by for p in long_first[1].points}["optimizer-sgd_c84530"] == {
        "02_long_training/base_c9defc, its first 200 epochs": 7}


def test_a_gpu_profile_on_a_cpu_says_how_to_price_it_instead_of_a_cpu_extrapolation(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("INITMEM_CACHE", str(tmp_path / "empty-cache"))  # the reference CPU table
    assert main(["plan", *PARAMS, "--profile", "paper", "--device", "cpu"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("throughput: none: profile 'paper' trains at tf32, on a GPU") and "--device cuda" in out[0]
    assert " h" not in out[-1] and out[-1].endswith("time no throughput")
    assert main(["plan", *PARAMS, "--profile", "paper", "--device", "cpu", "--json"]) == 0
    out = capsys.readouterr()
    assert json.loads(out.out)["totals"]["seconds"] is None and "--device cuda" in out.err
    assert main(["plan", PARAMS[0], "--profile", "cpu", "--device", "cpu"]) == 0  # a CPU profile keeps its time
    assert "no throughput" not in capsys.readouterr().out


def test_only_a_constant_lr_without_warm_up_makes_a_run_the_prefix_of_a_longer_one():
    c = TrainConfig(epochs=200, eval_every=10)
    assert plan.prefix_id(c) == plan.prefix_id(c.replace(epochs=5000, checkpoint_every=25)) is not None
    assert plan.prefix_id(c) != plan.prefix_id(c.replace(lr=0.05, epochs=5000))
    for other in (c.replace(schedule="cosine"), c.replace(warmup_epochs=1.0), c.replace(epochs=205)):
        assert plan.prefix_id(other) is None  # its first epochs are not a longer run's, or not measured at its end
