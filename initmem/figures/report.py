"""`initmem report`: the executed notebooks of a results tree as static HTML, readable without Jupyter: each
`<results>/<section>/notebooks/<point>.ipynb` becomes `<out>/<section>/<point>.html` (the section relative to
`results`, so profiles in one tree stay apart), linked with its status from `<out>/index.html`."""

import html
import json
import warnings
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from initmem.errors import ResultsError

PATTERN = "**/notebooks/*.ipynb"
SMOKE = "results/smoke"  # where `make smoke` sweeps, and what `make report` reads by default
_STYLE = """body{font-family:system-ui,sans-serif;margin:2em}table{border-collapse:collapse}
td,th{border:1px solid #ccc;padding:.3em .6em;text-align:left;vertical-align:top}
.ok{color:#1a7f37}.failed,.unreadable{color:#cf222e;font-weight:bold}.incomplete{color:#9a6700}
code{font-size:.85em}"""


@dataclass
class Page:
    """One executed notebook as the index lists it."""

    notebook: Path
    section: str  # section folder relative to the results root, e.g. "01_optimizers" or "cpu/01_optimizers"
    point: str  # the notebook's stem: the sweep point id
    status: str  # ok | failed | incomplete (started, never finished: killed or still running) | unreadable
    duration: float | None = None  # seconds, from papermill's metadata
    parameters: dict | None = None
    error: str = ""  # "<ename>: <evalue>" of the first error output, or why the file is unreadable
    html: Path | None = None  # the exported page; None when unreadable


def find_notebooks(results: str | Path) -> list[Path]:
    """Every executed notebook under `results`, sorted; without any, ResultsError naming what makes them."""
    results = Path(results)
    make = (f"executed notebooks are build products of a sweep (never committed; a sweep skips complete points, so "
            f"it makes none over finished runs): `make smoke` writes them to {SMOKE}, then `make report` (or `initmem "
            f"sweep params/*.yaml --profile smoke --results {SMOKE} && initmem report --results {SMOKE}`)")
    if not results.is_dir():
        raise ResultsError(f"results folder {str(results)!r} does not exist: {make}")
    found = sorted(p for p in results.glob(PATTERN) if ".ipynb_checkpoints" not in p.parts)
    if not found:
        from initmem.store.results import find_runs
        runs = len(find_runs(results))
        raise ResultsError(f"no executed notebooks under {str(results)!r} (looked for {PATTERN}"
                           + (f"; it holds {runs} runs" if runs else "") + f"): {make}")
    return found


def _status(nb) -> tuple[str, float | None, dict | None, str]:
    """(status, duration, parameters, first error) from papermill's metadata and the outputs."""
    pm = nb.metadata.get("papermill", {})
    error = next((f"{o.get('ename', '')}: {o.get('evalue', '')}" for c in nb.cells if c.cell_type == "code"
                  for o in c.get("outputs", []) if o.get("output_type") == "error"), "")
    status = "failed" if pm.get("exception") or error else "incomplete" if pm and not pm.get("end_time") else "ok"
    return status, pm.get("duration"), pm.get("parameters"), error


def export_reports(results: str | Path = SMOKE, out: str | Path = "reports") -> list[Path]:
    """Export every executed notebook under `results` to `<out>/<section>/<point>.html` (an unreadable one listed as
    such, with a warning), then `<out>/index.html`; the pages. ResultsError without notebooks or writable `out`."""
    import nbformat
    from nbconvert import HTMLExporter
    results, out = Path(results), Path(out)
    exporter = HTMLExporter(template_name="lab")  # images are embedded as data URIs: each page stands alone
    pages: list[Page] = []
    for path in find_notebooks(results):
        section, point = path.parent.parent.relative_to(results).as_posix(), path.stem
        try:
            nb = nbformat.read(path, as_version=4)
        except Exception as exc:  # nbformat raises JSON, validation and OS errors alike
            warnings.warn(f"skipping notebook {str(path)!r}: {exc}", stacklevel=2)
            pages.append(Page(path, section, point, "unreadable", error=str(exc).splitlines()[0][:200]))
            continue
        body, _ = exporter.from_notebook_node(nb, resources={"metadata": {"name": f"{section}/{point}"}})
        pages.append(Page(path, section, point, *_status(nb), html=out / section / f"{point}.html"))
        _write(pages[-1].html, body)
    _write(out / "index.html", _index_html(pages, results, out))
    return [p.html for p in pages if p.html] + [out / "index.html"]


def _write(path: Path, text: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise ResultsError(f"cannot write report {str(path)!r}: {exc.strerror or exc}") from None


def _varying(pages: list[Page]) -> dict[str, set[str]]:
    """Per section, the parameter names whose values differ between its points: what tells the points apart."""
    values: dict[tuple[str, str], set[str]] = defaultdict(set)
    for p in pages:
        for k, v in (p.parameters or {}).items():
            values[p.section, k].add(json.dumps(v, sort_keys=True))
    out: dict[str, set[str]] = defaultdict(set)
    for (section, k), vs in values.items():
        if len(vs) > 1:
            out[section].add(k)
    return out


def _index_html(pages: list[Page], results: Path, out: Path) -> str:
    counts = {s: sum(p.status == s for p in pages) for s in ("ok", "failed", "incomplete", "unreadable")}
    varying = _varying(pages)
    rows = []
    for p in pages:
        link = html.escape(p.html.relative_to(out).as_posix()) if p.html else ""
        point = f'<a href="{link}">{html.escape(p.point)}</a>' if link else html.escape(p.point)
        duration = f"{p.duration:.1f}" if isinstance(p.duration, (int, float)) else ""
        params = ""
        if p.parameters:  # the distinguishing values in sight, every injected parameter one click away
            keys = sorted(varying.get(p.section, set()) & set(p.parameters))
            short = " ".join(f"{k}={json.dumps(p.parameters[k])}" for k in keys) or "all"
            full = json.dumps(p.parameters, sort_keys=True)
            params = f"<details><summary>{html.escape(short)}</summary><code>{html.escape(full)}</code></details>"
        rows.append(f'<tr><td>{html.escape(p.section)}</td><td>{point}</td><td class="{p.status}">{p.status}</td>'
                    f"<td>{duration}</td><td>{params}</td><td>{html.escape(p.error)}</td></tr>")
    summary = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>initmem report: {html.escape(str(results))}</title>
<style>{_STYLE}</style></head><body>
<h1>Executed notebooks of <code>{html.escape(str(results))}</code></h1>
<p>{len(pages)} notebooks: {summary}. Written {stamp} by <code>initmem report</code>.</p>
<table><thead><tr><th>section</th><th>point</th><th>status</th><th>duration (s)</th><th>parameters</th>
<th>error</th></tr></thead>
<tbody>
{chr(10).join(rows)}
</tbody></table></body></html>
"""
