"""A DataFrame as the text of a table: `display_rows` (headers in the study's symbols, cells formatted, `c_std`
companions folded into "c ± std"), `markdown_table`, `tex_table` (booktabs) and `tex_escape`. Pure functions of
their input; `initmem.figures` writes what they return."""

from __future__ import annotations

import fnmatch
import math
import re
from collections.abc import Iterable

import numpy as np
import pandas as pd

_HEADERS = {"sigma_w": "σ_w", "tau_interp": "τ_interp", "weight_decay": "wd", "batch_size": "b",
            "spread_pp": "spread (pp)", "paper_spread_pp": "paper spread (pp)", "norm_ratio_min": "norm ratio min",
            "norm_ratio_max": "norm ratio max", "radial_slope": "radial slope",
            # T6, T7 (initmem.tables_forgetting)
            "predicted": "predicted (rad/step)", "ratio_min": "measured/predicted min",
            "ratio_max": "measured/predicted max", "sigma_rel_spread": "range/mean over σ_w",
            "independent_of_sigma": "σ_w-independent", "spearman": "Spearman ρ", "n_configs": "configurations",
            "n_sections": "sections"}


def _header(col: str) -> str:
    return "σ_w=" + col.split("=", 1)[1] if col.startswith("sigma_w=") else _HEADERS.get(col, col)


def _cell(v, fmt: str) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    if isinstance(v, (bool, np.bool_, str)):
        return str(v)
    if isinstance(v, (int, np.integer)) or (isinstance(v, float) and v.is_integer() and fmt == "{:.4g}"):
        return str(int(v))
    return fmt.format(v)


def display_rows(df: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """Headers and string cells as the md/tex files show them: `c_std` companions folded into 'c ± std'."""
    formats = df.attrs.get("formats", {})
    cols = [c for c in df.columns if not (c.endswith("_std") and c[:-4] in df.columns)]

    def fmt(c: str) -> str:
        return next((f for pat, f in formats.items() if fnmatch.fnmatchcase(c, pat)), "{:.4g}")

    rows = []
    for r in df.to_dict("records"):
        cells = []
        for c in cols:
            s, sd = _cell(r[c], fmt(c)), r.get(c + "_std")
            if sd is not None and not (isinstance(sd, float) and math.isnan(sd)) and s != "–":
                s += " ± " + _cell(sd, fmt(c))
            cells.append(s)
        rows.append(cells)
    return [_header(c) for c in cols], rows


_TEX = {"&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{", "}": r"\}",
        "~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "\\": r"\textbackslash{}", "σ_w": r"$\sigma_w$",
        "τ_interp": r"$\tau_\mathrm{interp}$", "σ": r"$\sigma$", "τ": r"$\tau$", "λ": r"$\lambda$", "η": r"$\eta$",
        "±": r"$\pm$", "×": r"$\times$", "≈": r"$\approx$", "–": "--", "—": "---", "β": r"$\beta$",
        "ρ": r"$\rho$", "Θ": r"$\Theta$", "Σ": r"$\Sigma$", "−": "$-$", "°": r"$^\circ$", "≤": r"$\leq$"}
_TEX_RE = re.compile("|".join(re.escape(k) for k in sorted(_TEX, key=len, reverse=True)))


def tex_escape(text: str) -> str:
    """LaTeX-safe text: special characters escaped, the study's Greek letters and dashes as LaTeX."""
    return _TEX_RE.sub(lambda m: _TEX[m.group(0)], str(text))


def markdown_table(headers: list[str], rows: list[list[str]]) -> str:
    def line(cells: Iterable[str]) -> str:
        return "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"

    return "\n".join([line(headers), "|" + "|".join("---" for _ in headers) + "|", *map(line, rows)])


def tex_table(headers: list[str], rows: list[list[str]], caption: str, label: str) -> str:
    """A booktabs table (needs \\usepackage{booktabs}); first column left-aligned, the others right."""
    return "\n".join([
        r"\begin{table}[htbp]", r"\centering", r"\small", rf"\caption{{{tex_escape(caption)}}}",
        rf"\label{{tab:{label}}}", rf"\begin{{tabular}}{{l{'r' * (len(headers) - 1)}}}", r"\toprule",
        " & ".join(map(tex_escape, headers)) + r" \\", r"\midrule",
        *(" & ".join(map(tex_escape, r)) + r" \\" for r in rows),
        r"\bottomrule", r"\end{tabular}", r"\end{table}", ""])
