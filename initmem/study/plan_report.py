"""The planner's output (`initmem plan`, docs/planner.md): one JSON document of the plans and their totals, or the
readable tables, measured, modelled (with the model's range) and otherwise estimated hours apart, each run id once."""

import math
from typing import Any

from initmem.study import stepmodel
from initmem.study.plan import ROOFLINE_EFFICIENCY, ROOFLINE_GPU, ROOFLINE_SOURCE, PointPlan, SectionPlan, plural
from initmem.study.throughput import Throughput

SOURCES = ("measured", "modelled", "estimated")  # the totals' split of the time by the points' sources


def _point_json(p: PointPlan) -> dict[str, Any]:
    r = dict(p.run)
    per_run = {"steps_per_run": r.pop("steps"), "eval_images_per_run": r.pop("eval_images")}
    return {"point_id": p.point_id, "grid": p.grid, "runs": p.runs, **r, **per_run, "steps": p.steps,
            "eval_images": p.runs * per_run["eval_images_per_run"], "key": p.key, "members": p.members,
            "seconds": p.seconds, "seconds_range": p.seconds_range, "time_source": p.time_source,
            "served_by": p.served_by,
            **({} if p.done is None else {"done": p.done, "to_serve": p.to_serve, "left": p.left,
                                       "left_seconds": p.left_seconds})}


def plan_json(plans: list[SectionPlan], table: Throughput | None, capture: bool = False) -> dict[str, Any]:
    """One JSON-ready document of the plans and their totals (a run id that several sections share counted once, in
    the first: `plan.share_runs`); `capture`: the plans priced each step as one captured graph."""
    sections = [{"section": s.section, "params": s.path, "profile": s.profile, "totals": s.totals(),
                 "points": [_point_json(p) for p in s.points]} for s in plans]
    totals = [s["totals"] for s in sections]
    known = [t["seconds"] for t in totals]
    total = {k: sum(t[k] for t in totals) for k in ("points", "runs", "steps", "eval_images", "points_without_time",
                                                      "served_runs")}
    total["seconds"] = math.fsum(known) if known and None not in known else None
    for k in ("seconds_known", *(f"seconds_{s}" for s in SOURCES), "seconds_modelled_low", "seconds_modelled_high"):
        total[k] = math.fsum(t[k] for t in totals)
    if any("left_runs" in t for t in totals):
        lefts = [t.get("left_seconds") for t in totals if t.get("left_runs", 0)]
        total.update(done_runs=sum(t.get("done_runs", 0) for t in totals),
                     to_serve_runs=sum(t.get("to_serve_runs", 0) for t in totals),
                     left_runs=sum(t.get("left_runs", 0) for t in totals),
                     left_seconds=math.fsum(lefts) if None not in lefts else None)
    dev = None if table is None else {"device": table.device, "kind": table.kind, "torch": table.torch,
                                      "path": table.path, "estimate": ROOFLINE_SOURCE if table.roofline else None}
    if table is not None and (fit := stepmodel.fit(table)) is not None:
        dev["model"] = {"per_op_s": fit.per_op, "fitted": list(fit.per_op_s),
                        "gpu_s_per_flop": fit.gpu_s_per_flop, "captured": capture,
                        **({"replay_s": fit.replay, "compile_gain": stepmodel.COMPILE_GAIN} if capture else {})}
    if table is not None and table.kind == "cuda":
        for t in (*totals, total):
            t["gpu_hours"] = t["seconds_known"] / 3600
            if table.roofline:
                t["gpu_hours_source"] = (f"{ROOFLINE_SOURCE}: {ROOFLINE_GPU} at {ROOFLINE_EFFICIENCY:.0%} of its "
                                         "dense peak")
    return {"throughput": dev, "sections": sections, "totals": total}


LEGEND = ("columns: runs = sigma_w x seed runs of the point; T_SGD = sum eta^2 / b, T_L2 = weight_decay x sum eta, "
          "T_adapt = sum eta (the forgetting clocks one run reaches, docs/study.md); eval img/run = images one run "
          "evaluates (train-eval + val + test at each measured epoch, plus full_test's and exact_tau's at their "
          "measured shares, docs/planner.md); time = the point's runs one after another (modelled: the model's "
          "range in brackets); a run another point trains (its id, or its first epochs) is counted there; with "
          "--results, done = its runs complete there, to serve = those the tree holds elsewhere (copied, not "
          "trained) and left = the time of the others")


def _hms(s: float | None) -> str:
    return ("no throughput" if s is None else f"{s:.1f} s" if s < 120 else f"{s / 60:.1f} min" if s < 7200
            else f"{s / 3600:.1f} h")


def _time(p: PointPlan) -> str:
    """A point's time, its range if modelled, its source unless measured, the runs an earlier section trains."""
    span = "" if p.seconds_range is None else f" [{_hms(p.seconds_range[0])}-{_hms(p.seconds_range[1])}]"
    note = "" if p.time_source in ("measured", "no throughput") else f" ({p.time_source})"
    shared = "".join(f"; {plural(n, 'run')} in {at}" for at, n in p.served_by.items())
    return f"{_hms(p.seconds)}{span}{note}{shared}"


def format_plan(plans: list[SectionPlan], table: Throughput | None, note: str | None = None,
                capture: bool = False) -> str:
    """The readable form: which throughput table (`note`), the model's fit, the legend, a table per section, totals."""
    doc = plan_json(plans, table, capture)
    fit = None if table is None else stepmodel.fit(table)
    lines = [note or f"throughput: {'no throughput table' if table is None else f'{table.device} ({table.path})'}",
             *([] if fit is None else [stepmodel.describe_fit(fit, capture)]), LEGEND]
    width = max([5, *(len(p.point_id) for s in plans for p in s.points)])
    head = (f"  {'point':<{width}} {'runs':>4} {'epochs':>6} {'steps/ep':>8} {'steps/run':>10} {'T_SGD':>9} "
            f"{'T_L2':>9} {'T_adapt':>9} {'eval img/run':>12}  time")
    for s, d in zip(plans, doc["sections"], strict=True):
        t = d["totals"]
        lines += ["", f"== {s.section} [{s.profile}] {plural(t['points'], 'point')}, "
                      f"{plural(t['runs'] + t['served_runs'], 'run')}", head]
        for p in s.points:
            r, c = p.run, p.run["clocks"]
            serve = f", {p.to_serve} to serve" if p.to_serve else ""
            left = "" if p.done is None else (f"; done {p.done}/{p.runs}{serve}, left "
                                              + (_hms(p.left_seconds) if p.left else "nothing"))
            lines.append(f"  {p.point_id:<{width}} {p.runs:>4} {r['epochs']:>6} {r['steps_per_epoch']:>8} "
                         f"{r['steps']:>10,} {c['T_SGD']:>9.3g} {c['T_L2']:>9.3g} {c['T_adapt']:>9.4g} "
                         f"{r['eval_images']:>12,}  {_time(p)}{left}")
        lines.append(_total_line(f"{s.section} total", t))
    lines += ["", _total_line("all total", doc["totals"])]
    return "\n".join(lines)


def _split(t: dict[str, Any]) -> str:
    """"measured 31.2 h + modelled 12.5 h [10.1-14.3 h] + estimated ..." for the sources that have time."""
    parts = [f"{s} {_hms(t[f'seconds_{s}'])}" + (f" [{_hms(t['seconds_modelled_low'])}-"
                                                  f"{_hms(t['seconds_modelled_high'])}]" if s == "modelled" else "")
             for s in SOURCES if t[f"seconds_{s}"] > 0]
    return f" ({' + '.join(parts)})" if len(parts) > 1 or "modelled" in " ".join(parts) else ""


def _total_line(label: str, t: dict[str, Any]) -> str:
    time = _hms(t["seconds"]) if t["points_without_time"] == 0 else "no throughput" if t["points_without_time"] == t[
        "points"] else f"{_hms(t['seconds_known'])} + {plural(t['points_without_time'], 'point')} with no throughput"
    gpu = f", {t['gpu_hours']:.1f} GPU-hours" if "gpu_hours" in t else ""
    gpu += f" ({t['gpu_hours_source']})" if "gpu_hours_source" in t else ""
    served = f" ({plural(t['served_runs'], 'run')} of other points counted there)" if t["served_runs"] else ""
    serve = f", {t['to_serve_runs']:,} to serve" if t.get("to_serve_runs") else ""
    left = "" if "left_runs" not in t else (f"; {t['done_runs']:,} complete{serve}, {plural(t['left_runs'], 'run')} "
                                            f"left: {_hms(t['left_seconds']) if t['left_runs'] else 'nothing'}")
    return (f"  {label}: {plural(t['runs'], 'run')}{served}, {plural(t['steps'], 'step')}, "
            f"{plural(t['eval_images'], 'image')} evaluated, time {time}{_split(t)}{gpu}{left}")
