"""The committed H200 record (docs/gpu/2026-12-04-h200*/): what it holds, and every number docs/gpu/README.md's
"Measured on an NVIDIA H200" quotes, re-derived from its JSON and the planner; no path of the machine it ran on."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from initmem.study import plan, throughput

REPO = Path(__file__).resolve().parents[1]
GPU = REPO / "docs" / "gpu"
CHECK, SPEEDS = GPU / "2026-12-04-h200", GPU / "2026-12-04-h200-speeds"
COMMITTED = {"device_check.json", "device_check.md", "throughput.json"}  # the check's outputs but its logs archive
CORRECTNESS = ["env", "parity_fp32", "population_vs_separate", "resume", "rerun", "parity_bf16", "parity_muon",
               "parity_tf32"]


def _doc(folder: Path) -> dict:
    return json.loads((folder / "device_check.json").read_text(encoding="utf-8"))


def _steps(folder: Path) -> dict[str, dict]:
    return {s["name"]: s for s in _doc(folder)["steps"]}


def _strings(doc) -> list[str]:
    if isinstance(doc, dict):
        return [s for v in doc.values() for s in _strings(v)]
    if isinstance(doc, list):
        return [s for v in doc for s in _strings(v)]
    return [doc] if isinstance(doc, str) else []


def _section() -> str:
    text = (GPU / "README.md").read_text(encoding="utf-8")
    start = text.index("## Measured on an NVIDIA H200")
    return " ".join(text[start:text.index("\n## ", start + 1)].split())  # one line: quotes may wrap


@pytest.mark.parametrize("folder", [CHECK, SPEEDS], ids=lambda f: f.name)
def test_each_record_is_the_checks_outputs_with_relative_paths(folder):
    logs = {"epoch_compile.log"} if folder == SPEEDS else set()  # the one step log with lines, as plain text
    notes = {"README.md"} if folder == CHECK else set()  # the two runs' story, dated
    assert {p.name for p in folder.iterdir()} == COMMITTED | logs | notes
    doc = _doc(folder)
    assert doc["device_name"] == "NVIDIA H200" and doc["kind"] == "cuda" and doc["stand_in"] is None
    assert doc["settings"]["data_root"] == "data/cifar10-jpeg.tar.gz" and not Path(doc["args"]["out"]).is_absolute()
    assert not [s for s in _strings(doc) if s.startswith("/") or ":/" in s]  # no absolute path of its machine
    assert throughput.load_throughput(folder / "throughput.json", "cuda").device == "NVIDIA H200"


def test_every_correctness_check_passed_on_the_h200():
    doc, steps = _doc(CHECK), _steps(CHECK)
    assert doc["checks"] == {"passed": CORRECTNESS, "failed": []}
    assert steps["resume"]["results"]["resumed_vs_straight"]["identical"] is True
    rerun = steps["rerun"]["results"]
    assert rerun["deterministic"]["identical"] and rerun["population_deterministic"]["identical"]
    assert rerun["nondeterministic"]["identical"] is False
    assert "**Correctness: every check passed** (2026-12-04-h200/, 8 of 8;" in _section()


def test_the_parity_rows_and_the_population_differences_are_the_records():
    section, steps = _section(), _steps(CHECK)
    for name in ("parity_fp32", "parity_tf32", "parity_bf16", "parity_muon"):
        v = steps[name]["results"]["verdict"]
        e0, trained = v["epoch0"], v["trained"]
        row = (f"| {name} | {e0['max']:.2e} | {trained['max']:.2e} | {trained['buffers_rel']:.2e} | "
               f"{e0['tolerance']:.0e}, {trained['tolerance']:.0e}, {trained['tolerance_buffers']:g} |")
        assert row in section, row
    members = steps["population_vs_separate"]["results"]["members"]
    assert [m["sigma_w"] for m in members] == [0.5, 2.0]
    assert (f"{members[0]['loss_rel_max']:.2e} (σ_w 0.5) and {members[1]['loss_rel_max']:.2e} (σ_w 2)" in section)
    rounding = max(json.loads((GPU / "parity_spread.json").read_text())["rounding_pairs_loss_rel"].values())
    assert steps["parity_fp32"]["results"]["verdict"]["trained"]["max"] < rounding  # the CPU against itself
    assert f"up to {rounding:.2e}" in section


def _runs() -> list[dict]:
    s = _steps(SPEEDS)
    return s["epoch_eager"]["results"]["runs"] + s["epoch_compile"]["results"]["runs"]


def test_the_speed_table_is_the_records_epoch_times():
    section = _section()
    for r in _runs():
        row = (f"| {r['batch_size']} | {r['precision']} | {'yes' if r['compile'] else 'no'} | {r['train_epoch_s']:.2f} "
               f"| {r['eval_s']:.2f} | {r['epoch_s']:.2f} | {r['train_images_per_s']:,.0f} "
               f"| {r['peak_memory_bytes'] / 2**30:.2f} |")
        assert row in section, row
    assert len(_runs()) == 6 and all(r["arch"] == "resnet9" and r["width"] == 1.0 for r in _runs())


def test_the_compile_and_population_sentences_are_the_records():
    section, steps = _section(), _steps(SPEEDS)
    runs = {(r["precision"], r["compile"]): r for r in _runs() if r["batch_size"] == 128}
    assert all(r["cuda_graphs_used"] for r in steps["epoch_compile"]["results"]["runs"])
    graphs = {g["what"].split(":")[0]: g["seconds"] for g in steps["epoch_compile"]["results"]["graphs"]
              if g["precision"] == "fp32"}
    assert f"train graph in {graphs['step 0']:.1f} s" in section
    assert f"first evaluation before it: {graphs['before step 0']:.1f} s" in section
    bf16 = runs[("bf16", False)]["epoch_s"] / runs[("bf16", True)]["epoch_s"]
    fp32 = runs[("fp32", False)]["epoch_s"] / runs[("fp32", True)]["epoch_s"] - 1
    assert f"a bf16 epoch is {bf16:.1f}x faster than eager bf16's; fp32 gains {fp32 * 100:.0f} %" in section
    for folder, quote in ((SPEEDS, "**{}x at b = 32 and {}x at b = 128**"), (CHECK, "(the first run: {}x and {}x)")):
        rows = {r["batch_size"]: r["population_vs_separate"] for r in _steps(folder)["population"]["results"]["rows"]}
        assert quote.format(f"{rows[32]:.2f}", f"{rows[128]:.2f}") in section


def test_the_studys_cost_on_the_h200_is_the_planners():
    from initmem.study.plan_report import plan_json
    table = throughput.load_throughput(SPEEDS / "throughput.json", "cuda")
    plans = plan.share_runs([plan.plan_section(p, "paper", table) for p in sorted((REPO / "params").glob("*.yaml"))])
    t = plan_json(plans, table)["totals"]  # each run id once; measured and modelled apart
    hours = {k: t[f"seconds_{k}"] / 3600 for k in ("measured", "modelled", "modelled_low", "modelled_high")}
    assert t["seconds_estimated"] == 0 and t["seconds"] / 3600 == pytest.approx(hours["measured"] + hours["modelled"])
    total = t["seconds"] / 3600
    section = _section()
    assert f"**{total:.1f} H200-hours** for the five sections at tf32" in section
    assert f"{hours['measured']:.1f} of them from measured entries" in section
    assert f"{hours['modelled']:.1f} modelled ({hours['modelled_low']:.1f}-{hours['modelled_high']:.1f}" in section
    entry = {(e.batch_size, e.precision, e.members): e for e in table.entries}
    tf32 = entry[(128, "tf32", 1)]
    roof = 128 * plan.image_flops("resnet9", 1.0)[0] / (plan.ROOFLINE_PEAK["tf32"] * plan.ROOFLINE_EFFICIENCY)
    assert f"measured tf32 step ({tf32.train_step_s * 1e3:.2f} ms) is {tf32.train_step_s / roof:.1f}x" in section
    per_image = (entry[(32, "fp32", 1)].train_step_s / 32) / (entry[(128, "fp32", 1)].train_step_s / 128)
    assert f"b = 32 fp32 measured {per_image:.1f}x b = 128's time per image" in section
    study = " ".join((REPO / "docs" / "study.md").read_text(encoding="utf-8").split())
    assert (f"{total:.1f} H200-hours for the five sections at tf32, the runs one after another, of "
            f"which {hours['modelled']:.1f} are modelled") in study
    readme = " ".join((REPO / "README.md").read_text(encoding="utf-8").split())
    assert f"the paper profiles plan to {total:.1f} H200-hours" in readme


def test_the_studys_captured_cost_on_the_h200_is_the_planners():
    """The paper profile, each step one CUDA graph (`plan --capture`): all modelled, its range, the model's terms."""
    from initmem.study import stepmodel
    from initmem.study.plan_report import plan_json
    table = throughput.load_throughput(SPEEDS / "throughput.json", "cuda")
    plans = plan.share_runs([plan.plan_section(p, "paper", table, capture=True)
                             for p in sorted((REPO / "params").glob("*.yaml"))])
    t = plan_json(plans, table, capture=True)["totals"]
    h = {k: t[f"seconds{k}"] / 3600 for k in ("", "_measured", "_modelled_low", "_modelled_high")}
    assert h["_measured"] == 0
    low, _, high = stepmodel.fit(table).replay
    bf16 = stepmodel.H200_COMPILED["bf16"][1]
    assert (f"--capture`), the same runs are modelled at **{h['']:.1f} H200-hours** ({h['_modelled_low']:.1f}-"
            f"{h['_modelled_high']:.1f}), none measured: a step costs its GPU work at the compiled fp32 step's "
            f"{stepmodel.COMPILE_GAIN:.3f}x eager's plus one replay of {low * 1e6:.0f}-{high * 1e6:,.0f} µs (one op's "
            f"host cost, up to the compiled bf16 step's {bf16 * 1e3:.2f} ms less its GPU work)") in _section()


def test_the_findings_cost_of_section_01_on_the_h200_is_the_planners():
    table = throughput.load_throughput(SPEEDS / "throughput.json", "cuda")
    hours = sum(p.seconds for p in plan.plan_section(REPO / "params" / "01_optimizers.yaml", "paper", table).points)
    findings = " ".join((REPO / "docs" / "findings.md").read_text(encoding="utf-8").split())
    assert f"200 epochs) costs {hours / 3600:.1f} H200-hours at tf32" in findings


def test_the_packaged_reference_gpu_table_is_the_records():
    from initmem.study import calibrate

    assert json.loads(calibrate.REFERENCE_GPU.read_text()) == json.loads((SPEEDS / "throughput.json").read_text())


def test_the_batch_exponents_quoted_are_the_tables():
    table = throughput.load_throughput(SPEEDS / "throughput.json", "cuda")
    t = {e.batch_size: e.train_step_s for e in table.entries if e.members == 1 and e.precision == "fp32"}
    low, high = (math.log(t[b] / t[a]) / math.log(b / a) for a, b in ((32, 128), (128, 512)))
    assert f"b^{low:.2f} from fp32 b = 32 to 128, b^{high:.2f} from 128 to 512" in _section()
    planner = " ".join((REPO / "docs" / "planner.md").read_text(encoding="utf-8").split())
    assert f"on the H200: {low:.2f} from b = 32 to 128, {high:.2f} from 128 to 512" in planner
    assert f"planned b = 16 {8 ** (1 - low):.1f}x too fast by that measure" in planner


def test_the_prepared_grids_floor_is_the_tables():
    text = " ".join((GPU / "README.md").read_text(encoding="utf-8").split())
    table = throughput.load_throughput(SPEEDS / "throughput.json", "cuda")
    by = {(e.batch_size, e.members): e for e in table.entries if e.precision == "fp32"}
    one = 3720 * by[(32, 1)].train_step_s  # cpu_w025: 62 whole batches of 32 an epoch, 60 epochs
    k7 = by[(32, 1)].train_step_s * 7 / by[(32, 7)].train_step_s
    assert f"(5.6 ms at width 1, the launch floor) one run's 3,720 steps take at least {one:.0f} s" in text
    assert f"at the {k7:.2f}x measured for K = 7 about {15 * one / k7 / 60:.1f} min a point" in text
    grid = plan.plan_section(REPO / "params" / "01_optimizers.yaml", "cpu_w025", table).totals()["seconds"]
    assert f"--profile cpu_w025 --device cuda` says {grid / 60:.1f} min, by the host-floor model" in text


def test_the_studys_tf32_sentence_is_the_records():
    steps = _steps(CHECK)
    tf32, fp32 = (steps[n]["results"]["verdict"]["trained"]["max"] for n in ("parity_tf32", "parity_fp32"))
    study = " ".join((REPO / "docs" / "study.md").read_text(encoding="utf-8").split())
    assert (f"the losses of two epochs agreed to {tf32:.2e} relative (tolerance 5e-02; fp32 on the same GPU: "
            f"{fp32:.2e})") in study
