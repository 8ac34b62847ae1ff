"""analysis: DataFrames and matplotlib figures from run records, torch-free (the study's tables, plots, their
display rule and style, the forgetting instruments' tables and plots, one point's report)."""

from initmem import lazy_face

API = {
    **dict.fromkeys(["configurations", "config_spreads", "run_histories", "optimizer_table", "long_training_table",
                     "lr_l2_table", "batch_size_table", "depth_table", "effective_lr_table"], ".tables"),
    **dict.fromkeys(["equilibrium_table", "clock_correlations", "unfolding_table", "collapse_table"],
                    ".instrument_tables"),
    **dict.fromkeys(["accuracy_vs_sigma", "weight_norm_curves", "radial_memory_plot", "spread_vs_batch_size",
                     "spread_heatmap", "depth_interpolation_map", "spread_vs_clocks", "repair_gap_bars",
                     "training_curves", "spread_vs_effective_lr"], ".plots"),
    **dict.fromkeys(["angle_curves", "spread_vs_measured_clock", "unfolding_figure"], ".instrument_plots"),
    **dict.fromkeys(["display_frame", "markdown_table", "tex_table"], ".display"),
    **dict.fromkeys(["StudyFigure", "new_figure"], ".style"),
    **dict.fromkeys(["show_point", "point_table", "run_table", "sweep_row"], ".point_report"),
}
__all__ = sorted(API)
__getattr__, __dir__ = lazy_face(__name__, API)
