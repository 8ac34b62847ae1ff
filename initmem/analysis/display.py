"""How every table a person reads shows its numbers (the display rule, in one place) and a DataFrame as a table's
text. A number's *kind* decides its digits (`KINDS`), `COLUMN_KINDS` (then a table's own, `cells.finish`) a
column's kind; 4 significant digits show a 0.4 % change of a norm ratio (1.004, not 1). Pure functions."""

import fnmatch
import math
import re
from collections.abc import Iterable

import numpy as np
import pandas as pd

KINDS = {"percent": "an accuracy in percent or a spread in pp: one decimal (51.6, 22.9)",
         "fraction": "an accuracy stored as a fraction (run records): shown in percent, one decimal (0.516 → 51.6)",
         "fine": "a norm ratio or an angle: 4 significant digits, trailing zeros kept (1.004, 1.680, 33.60, 5.200)",
         "count": "epochs and other whole numbers: no decimal (36)",
         "decimal2": "a slope or a relative spread: two decimals (0.84)",
         "signed": "a correlation: signed, two decimals (+0.83)",
         "clock": "a forgetting clock: 3 significant digits (0.00125, 2.5e-05)",
         "general": "anything else: 4 significant digits, whole numbers as integers (0.001, 128, 287.8)"}
COLUMN_KINDS = {"sigma_w=*": "percent", "*_pp*": "percent", "*_acc*": "fraction", "repair_gap": "fraction",
                "norm_ratio*": "fine", "angle*": "fine", "Theta*": "fine", "tau_interp": "count", "*epoch*": "count",
                "radial_slope": "decimal2", "T_SGD*": "clock", "T_L2*": "clock", "T_adapt*": "clock"}
_FINE_DIGITS = 4
# headers of the tables (T1-T5), of T6 and T7 (`tables_forgetting`) and of a run a row (`point_report`)
_HEADERS = {"sigma_w": "σ_w", "tau_interp": "τ_interp", "weight_decay": "wd", "batch_size": "b",
            "spread_pp": "spread (pp)", "spread_pp_lo": "95 % low (pp)", "spread_pp_hi": "95 % high (pp)",
            "last_spread_pp": "last-epoch spread (pp)", "last_spread_pp_lo": "last 95 % low (pp)",
            "last_spread_pp_hi": "last 95 % high (pp)", "end_spread_pp": "end spread (pp)",
            "end_spread_pp_lo": "end 95 % low (pp)", "end_spread_pp_hi": "end 95 % high (pp)",
            "effective_lr": "effective lr",
            "selected_after_tau": "selected after τ_interp", "collapse_epochs": "collapse epochs",
            "selected_after_collapse": "selected after its collapse",
            "paper_spread_pp": "paper spread (pp)", "norm_ratio_min": "norm ratio min",
            "norm_ratio_max": "norm ratio max", "radial_slope": "radial slope", "predicted": "predicted (rad/step)",
            "ratio_min": "measured/predicted min", "ratio_max": "measured/predicted max",
            "sigma_rel_spread": "range/mean over σ_w", "independent_of_sigma": "σ_w-independent",
            "spearman": "Spearman ρ", "n_configs": "configurations", "n_sections": "sections",
            "test_acc_at_best": "test acc (%)", "final_train_acc": "final train acc (%)", "best_epoch": "best epoch",
            "repair_gap": "repair gap (pp)", "init_weight_norm": "initial norm", "final_weight_norm": "final norm",
            "norm_ratio": "norm ratio", "wall_time_s": "wall time (s)", "diverged_epoch": "diverged at epoch",
            "angle_final": "final angle (°)", "Theta_final": "Θ_final (rad)",
            "failed_to_interpolate": "failed to interpolate"}
_TEX = {"&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{", "}": r"\}",
        "~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "\\": r"\textbackslash{}", "σ_w": r"$\sigma_w$",
        "τ_interp": r"$\tau_\mathrm{interp}$", "σ": r"$\sigma$", "τ": r"$\tau$", "λ": r"$\lambda$", "η": r"$\eta$",
        "±": r"$\pm$", "×": r"$\times$", "≈": r"$\approx$", "–": "--", "—": "---", "β": r"$\beta$",
        "ρ": r"$\rho$", "Θ": r"$\Theta$", "Σ": r"$\Sigma$", "−": "$-$", "°": r"$^\circ$", "≤": r"$\leq$"}
_TEX_RE = re.compile("|".join(re.escape(k) for k in sorted(_TEX, key=len, reverse=True)))


def _decimals(kind: str, v: float) -> int | None:
    """Decimals of `v` (already scaled) in fixed point; None where it is not shown so."""
    fixed = {"percent": 1, "fraction": 1, "count": 0, "decimal2": 2, "signed": 2}
    if kind in fixed:
        return fixed[kind]
    if kind == "fine" and (v == 0 or 1e-4 <= abs(v) < 1e5):
        return _FINE_DIGITS - 1 - (math.floor(math.log10(abs(v))) if v else 0)
    return None


def _missing(v) -> bool:
    return v is None or (isinstance(v, (float, np.floating)) and math.isnan(v))


def number(v, kind: str = "general") -> str:
    """One value as every table shows it (`KINDS`); '–' for a missing value, strings and booleans as they are."""
    if kind not in KINDS:
        raise ValueError(f"display kind {kind!r} is unknown: one of {', '.join(KINDS)} is accepted")
    if _missing(v):
        return "–"
    if isinstance(v, (bool, np.bool_, str)):
        return str(v)
    if isinstance(v, (int, np.integer)) and kind not in ("fraction", "fine"):
        return str(int(v))
    x = 100 * float(v) if kind == "fraction" else float(v)
    if not math.isfinite(x):
        return str(x)
    d = _decimals(kind, x)
    if d is not None:
        return f"{x:{'+' if kind == 'signed' else ''}.{max(d, 0)}f}"
    if kind == "fine":
        return f"{x:.{_FINE_DIGITS - 1}e}"
    if kind == "clock":
        return f"{x:.3g}"
    return str(int(x)) if x.is_integer() and abs(x) < 1e15 else f"{x:.4g}"


def with_std(v, sd, kind: str = "general") -> str:
    """'v ± sd' (`number`), the std at the mean's resolution; the value alone without a std."""
    s = number(v, kind)
    if s == "–" or _missing(sd) or isinstance(v, str):
        return s
    x = 100 * float(v) if kind == "fraction" else float(v)
    d = _decimals(kind, x)
    if d is None:
        return f"{s} ± {number(sd, kind)}"
    y = 100 * float(sd) if kind == "fraction" else float(sd)
    return f"{s} ± {y:.{max(d, 0)}f}"


def column_kind(column: str, formats: dict[str, str] | None = None) -> str:
    """The kind of `column`: the first matching pattern of `formats` (a table's own), then of `COLUMN_KINDS`."""
    return next((kind for patterns in (formats or {}, COLUMN_KINDS) for pat, kind in patterns.items()
                 if fnmatch.fnmatchcase(column, pat)), "general")


def header(col: str) -> str:
    """A column's header in the study's symbols: 'sigma_w=0.5' → 'σ_w=0.5', 'spread_pp' → 'spread (pp)'."""
    return "σ_w=" + col.split("=", 1)[1] if col.startswith("sigma_w=") else _HEADERS.get(col, col)


def display_rows(df: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """Headers and string cells as the md/tex files show them, `c_std` companions folded into 'c ± std'."""
    formats = df.attrs.get("formats", {})
    cols = [c for c in df.columns if not (c.endswith("_std") and c[:-4] in df.columns)]
    kinds = {c: column_kind(c, formats) for c in cols}
    rows = [[with_std(r[c], r.get(c + "_std"), kinds[c]) for c in cols] for r in df.to_dict("records")]
    return [header(c) for c in cols], rows


def display_frame(table: pd.DataFrame | str, index: int = 1) -> pd.DataFrame | str:
    """A written table as the DataFrame a notebook shows: the file's headers and cells (`display_rows`), its first
    `index` columns as the index (0: none); a placeholder message as it is."""
    if isinstance(table, str):
        return table
    headers, rows = display_rows(table)
    shown = pd.DataFrame(rows, columns=headers)
    return shown.set_index(headers[:index]) if index else shown


def captioned(frame: pd.DataFrame | str, caption: str):
    """`frame` (a `display_frame`) as a notebook shows it: `caption` under the table, each cell on one line
    ('51.6 ± 1.1' does not wrap), long headers wrapped so that a wide table (T6) fits; a message as it is."""
    if isinstance(frame, str):
        return frame
    return frame.style.set_caption(caption).set_table_styles([
        {"selector": "caption", "props": "caption-side: bottom; text-align: left; max-width: 60em; font-size: 90%"},
        {"selector": "td", "props": "white-space: nowrap"},
        {"selector": "th", "props": "white-space: normal; max-width: 7em"}])


def tex_escape(text: str) -> str:
    """LaTeX-safe text: special characters escaped, the study's Greek letters and dashes as LaTeX."""
    return _TEX_RE.sub(lambda m: _TEX[m.group(0)], str(text))


NBSP_PM = "\u00a0±\u00a0"  # 'mean ± std' that a rendered table never breaks over two lines


def markdown_table(headers: list[str], rows: list[list[str]]) -> str:
    """A GitHub-flavoured markdown table of string cells, 'mean ± std' kept on one line (non-breaking spaces)."""
    def line(cells: Iterable[str]) -> str:
        return "| " + " | ".join(str(c).replace("|", "\\|").replace(" ± ", NBSP_PM) for c in cells) + " |"

    return "\n".join([line(headers), "|" + "|".join("---" for _ in headers) + "|", *map(line, rows)])


def tex_table(headers: list[str], rows: list[list[str]], caption: str, label: str) -> str:
    """A booktabs table (needs \\usepackage{booktabs}); first column left-aligned, the others right."""
    return "\n".join([
        r"\begin{table}[htbp]", r"\centering", r"\small", rf"\caption{{{tex_escape(caption)}}}",
        rf"\label{{tab:{label}}}", rf"\begin{{tabular}}{{l{'r' * (len(headers) - 1)}}}", r"\toprule",
        " & ".join(map(tex_escape, headers)) + r" \\", r"\midrule",
        *(" & ".join(map(tex_escape, r)) + r" \\" for r in rows),
        r"\bottomrule", r"\end{tabular}", r"\end{table}", ""])


def spread(m: float, lo: float = math.nan, hi: float = math.nan) -> str:
    """A spread as the figures' legends and the notebooks' sentences say it: "22.5 pp [21.5, 23.4]" (its 95 %
    interval where it has one, as T1 prints the numbers)."""
    interval = "" if _missing(lo) or _missing(hi) else f" [{number(lo, 'percent')}, {number(hi, 'percent')}]"
    return number(m, "percent") + " pp" + interval
