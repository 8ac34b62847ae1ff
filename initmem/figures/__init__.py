"""figures: the study's artefacts written from a results tree (figure notebooks, tables and figures with their
sidecars and index, where a set may go) and executed notebooks exported to HTML."""

from initmem import lazy_face

API = {
    **dict.fromkeys(["FigureBook", "make_figures", "make_study_figures", "save_table", "save_figure", "Stamp"],
                    ".artefacts"),
    **dict.fromkeys(["COMMITTED_SETS", "default_out", "check_out"], ".paths"),
    "export_reports": ".report",
}
__all__ = sorted(API)
__getattr__, __dir__ = lazy_face(__name__, API)
