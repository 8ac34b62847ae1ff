"""engine: training one run or a population of runs as one computation (models, members, optimisers, the
forgetting instruments, runtime settings, the loop, checkpoints)."""

from initmem import lazy_face

API = {
    **dict.fromkeys(["train", "time_steps"], ".trainer"),
    **dict.fromkeys(["Loop", "DeviceMismatch"], ".loop"),
    **dict.fromkeys(["build_model", "init_weights", "layer_names"], ".models"),
    "population": ".members",
    **dict.fromkeys(["build_optimizer", "newton_schulz", "muon_update", "Muon"], ".optim"),
    **dict.fromkeys(["Instruments", "angle", "angle_between"], ".instruments"),
    **dict.fromkeys(["run_device", "engine_settings", "autocast"], ".runtime"),
}
__all__ = sorted(API)
__getattr__, __dir__ = lazy_face(__name__, API)
