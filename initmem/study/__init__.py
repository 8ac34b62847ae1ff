"""study: the study's points from notebooks and params files, trained by the engine one point at a time, in a
local pool or on Slurm, and planned before anything trains (notebooks, params, point, sweep, planner and its
throughput tables)."""

from initmem import lazy_face

API = {
    **dict.fromkeys(["run_point", "train_point"], ".point"),
    **dict.fromkeys(["notebook_parameters", "checked_parameters", "execute_notebook", "run_notebook"], ".notebook"),
    **dict.fromkeys(["load_section", "params_files", "Section", "Point"], ".params"),
    "run_sweep": ".sweep",
    **dict.fromkeys(["plan_point", "plan_section"], ".plan"),
    "format_plan": ".plan_report",
    "load_throughput": ".throughput",
    **dict.fromkeys(["choose_table", "calibrate"], ".calibrate"),
}
__all__ = sorted(API)
__getattr__, __dir__ = lazy_face(__name__, API)
