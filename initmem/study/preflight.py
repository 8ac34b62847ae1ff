"""What a sweep needs, checked once before any point starts: every pending point's runs build (notebook and params
valid), their data is there and passes its hash check, the results folder can be written, and their device exists.
One line per problem (a problem many points share is one line), so a sweep that cannot finish never starts."""

import os
from pathlib import Path

from initmem.checks import check_results_root
from initmem.config import point_configs
from initmem.errors import ConfigError, InitmemError
from initmem.store.folders import RunFolders
from initmem.store.serve import origin
from initmem.study.params import Point, Section


def run_states(section: Section, point: Point) -> list[str]:
    """Each run of a point, in `config.point_configs` order (the TrainConfigs its notebook builds): "complete" in its
    folder, "served" (the tree holds it elsewhere: `store.serve.origin`, copied when the point runs) or "train"."""
    owner = RunFolders(section.root / point.parameters["results_dir"], section.name)  # an absolute one wins the join
    return ["complete" if (r := owner.run(c)).is_complete() else "served" if origin(r) else "train"
            for c in point_configs(section.effective(point))]


def point_progress(section: Section, point: Point) -> tuple[int, int, int]:
    """(complete runs, runs to serve, runs) of a point (`run_states`)."""
    states = run_states(section, point)
    return states.count("complete"), states.count("served"), len(states)


def _writable_problem(folder: Path) -> str | None:
    """Why `folder` cannot be created and written (checked on its nearest existing ancestor; nothing is created)."""
    probe = folder
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if probe.exists() and not probe.is_dir():
        return f"results folder {str(folder)!r} is not writable: {str(probe)!r} is a file"
    if not os.access(probe, os.W_OK | os.X_OK):
        return f"results folder {str(folder)!r} is not writable ({str(probe)!r} is read-only for this user)"
    return None


def _device_problem(device: str) -> str | None:
    """Why `device` is not here (cpu and auto always are; a CUDA device needs torch to see it)."""
    if device in ("cpu", "auto"):
        return None
    from initmem.data.device import resolve_device  # torch: only for a device that is not the CPU
    try:
        resolve_device(device)
    except InitmemError as exc:
        return str(exc)
    import torch
    if device.startswith("cuda:") and int(device.split(":")[1]) >= torch.cuda.device_count():
        return f"device={device!r} is not here: {torch.cuda.device_count()} CUDA device(s) visible"
    return None


def section_problems(section: Section, profile: str, results: str | Path | None, executor: str = "local",
                     pending_only: bool = True) -> list[str]:
    """The problems of one section's profile (see the module doc); `pending_only`: complete points need nothing."""
    from initmem.data.fetch import data_problem

    problems: list[str] = []
    out = section.results_for(profile, results)
    if out.is_dir():  # a section or run folder given for the tree would get every run trained again, a level down
        try:
            check_results_root("results", out)
        except ConfigError as exc:
            problems.append(str(exc))
    pending, data_checked = 0, {}
    for p in section.points(profile, results):
        try:
            configs = point_configs(section.effective(p))
            done, served, total = point_progress(section, p)
        except InitmemError as exc:
            problems.append(f"{section.name} {p.point_id}: {exc}")
            continue
        if pending_only and done == total:
            continue
        pending += 1
        if pending_only and done + served == total:  # its runs are copied: no data nor device needed
            continue
        for c in configs:
            root = Path(c.data_root) if Path(c.data_root).is_absolute() else section.root / c.data_root
            if c.data != "synthetic" and (root, c.data) not in data_checked:  # hashed once per data source
                data_checked[root, c.data] = why = data_problem(root, c.data)
                problems += [why] if why else []
            if executor == "local" and (why := _device_problem(c.device)):
                problems.append(why)
    if pending and (why := _writable_problem(out / section.name)):
        problems.append(why)
    return problems


def preflight(sections: list[Section], profile: str, results: str | Path | None, executor: str = "local") -> list[str]:
    """Every problem of a sweep of `sections`, each once, in the order found; empty when it can start."""
    seen: dict[str, None] = {}
    for s in sections:
        seen.update(dict.fromkeys(section_problems(s, profile, results, executor)))
    return list(seen)
