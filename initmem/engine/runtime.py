"""Where and how a run computes: `run_device`, the process-wide numerics (`engine_settings`, recorded with the run:
fp32 with TF32 off everywhere, tf32 on CUDA, bf16 autocast with weights, loss and metrics in fp32; deterministic
algorithms, else cuDNN benchmarking on CUDA; the cuBLAS workspace is set at import), bf16 `autocast`, and the network
the loop calls (`network`: compiled once per process and shape with `compile`, as `engine.capture`'s whole step is,
both kept by `compiled_once`; `reset_compiled` clears them)."""

import contextlib
import os
from collections.abc import Callable
from typing import TypeVar

import torch

from initmem.config import TrainConfig, field_error
from initmem.data import splits as _data
from initmem.data.device import resolve_device
from initmem.engine import members, models

# cuBLAS reads its workspace setting at its first call and deterministic algorithms need it: set at import (or kept).
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
INDUCTOR_CACHE_ENV = "TORCHINDUCTOR_CACHE_DIR"
T = TypeVar("T")


def run_device(config: TrainConfig) -> torch.device:
    """The device `config` runs on; ConfigError for one that is not here or a precision it does not have."""
    dev = resolve_device(config.device)
    if config.precision == "tf32" and dev.type != "cuda":
        raise field_error("precision", config.precision, f"'tf32' is CUDA only (device resolved to {dev.type}); "
                          "'fp32' or 'bf16' is accepted")
    return dev


def engine_settings(config: TrainConfig, dev: torch.device) -> dict:
    """Set and return (for the provenance) the numerics `config` asks: fp32 strict IEEE (PyTorch lets cuDNN convolutions
    use TF32), tf32 TF32 matmuls and convolutions; `deterministic` algorithms, else cuDNN benchmarking on CUDA."""
    tf32 = config.precision == "tf32"
    set_tf32(tf32)
    torch.use_deterministic_algorithms(config.deterministic)
    torch.backends.cudnn.deterministic = config.deterministic
    torch.backends.cudnn.benchmark = dev.type == "cuda" and not config.deterministic
    out = {"precision": config.precision, "deterministic": config.deterministic, "allow_tf32": tf32,
           "cudnn_benchmark": torch.backends.cudnn.benchmark}
    if config.compile:
        out.update(inductor_cache=inductor_cache(), compile_partial_batch="eager")  # see Loop.train_step
    return out


def inductor_cache() -> str:
    """Where inductor keeps its compiled kernels and graphs: `TORCHINDUCTOR_CACHE_DIR` when the user set it ("user"),
    else set here to `<INITMEM_CACHE or ~/.cache/initmem>/inductor` ("shared"), so that a sweep's point processes
    reuse one another's compilations instead of each compiling anew in a private temporary folder."""
    shared = str(_data.default_cache_dir() / "inductor")
    if os.environ.get(INDUCTOR_CACHE_ENV, shared) != shared:
        return "user"
    os.environ[INDUCTOR_CACHE_ENV] = shared
    return "shared"


def set_tf32(on: bool) -> str:
    """TF32 for matmuls and cuDNN convolutions on or off; the API used: torch >= 2.9's `fp32_precision` where it
    exists, else `allow_tf32`. Where both exist, the legacy setters run first and the new ones after: torch 2.14's
    legacy getters (`cudnn.allow_tf32`, `matmul.allow_tf32`, `get_float32_matmul_precision()`, which inductor reads)
    raise RuntimeError ("a mix of the legacy and new APIs") after the new setters alone; in this order every getter
    of `tf32_state` reads the same setting."""
    matmul, cudnn = torch.backends.cuda.matmul, torch.backends.cudnn
    new = hasattr(matmul, "fp32_precision") and hasattr(getattr(cudnn, "conv", None), "fp32_precision")
    if new:
        torch.set_float32_matmul_precision("high" if on else "highest")
    matmul.allow_tf32 = cudnn.allow_tf32 = on
    if not new:
        return "allow_tf32"
    value = "tf32" if on else "ieee"
    matmul.fp32_precision = cudnn.conv.fp32_precision = value
    if hasattr(getattr(cudnn, "rnn", None), "fp32_precision"):
        cudnn.rnn.fp32_precision = value
    return "fp32_precision"


def tf32_state() -> dict[str, object]:
    """Every TF32 getter torch and inductor read (those this torch has), by name: a getter that raises raises here."""
    matmul, cudnn = torch.backends.cuda.matmul, torch.backends.cudnn
    state = {"cudnn.allow_tf32": cudnn.allow_tf32, "cuda.matmul.allow_tf32": matmul.allow_tf32,
             "float32_matmul_precision": torch.get_float32_matmul_precision()}
    for name, owner in (("cuda.matmul", matmul), ("cudnn.conv", getattr(cudnn, "conv", None)),
                        ("cudnn.rnn", getattr(cudnn, "rnn", None))):
        if hasattr(owner, "fp32_precision"):
            state[f"{name}.fp32_precision"] = owner.fp32_precision
    return state


def autocast(config: TrainConfig, dev: torch.device):
    """bf16 autocast (weights, loss, norms and metrics stay fp32) or nothing."""
    return torch.autocast(dev.type, dtype=torch.bfloat16) if config.precision == "bf16" else contextlib.nullcontext()


_COMPILED: dict[str, tuple[tuple, object]] = {}  # per kind ("network", "step"): its key and compiled form


def reset_compiled() -> None:
    """Forget every compiled network and step: dynamo's caches and this module's (after dynamo's alone, a model stays
    held)."""
    torch._dynamo.reset()
    _COMPILED.clear()


def compiled_once(kind: str, key: tuple, make: Callable[[], T]) -> T:
    """`make()` (a compiled form) once per process and `key` of its `kind`: a new key replaces the kind's old one."""
    if kind not in _COMPILED or _COMPILED[kind][0] != key:
        _COMPILED[kind] = (key, make())
    return _COMPILED[kind][1]


def network_key(configs: list[TrainConfig], dev: torch.device) -> tuple:
    """What makes two populations' networks one compiled shape: arch, width, K, a shared input, device, layout."""
    cfg = configs[0]
    return cfg.arch, cfg.width, len(configs), len({c.seed for c in configs}) == 1, str(dev), cfg.channels_last


def network(configs: list[TrainConfig], dev: torch.device) -> tuple[members.PlainPopulation, object]:
    """The population of `configs` on `dev`, initialised as separate runs are, and what the loop calls: its network or,
    with `compile`, its compiled form, once per process and shape (a later population reuses it, its weights reset)."""
    cfg = configs[0]
    nets = []
    for c in configs:
        torch.manual_seed(c.seed)  # the initialisation draws from the global generator
        try:
            nets.append(models.build_model(c.arch, c.sigma_w, c.width).to(dev))
        except (RuntimeError, MemoryError) as exc:
            if "memory" not in str(exc).lower() and not isinstance(exc, MemoryError):
                raise
            raise field_error("width", cfg.width, f"the network does not fit in memory on {dev} "
                              f"({type(exc).__name__}); a smaller width is accepted") from None
    pop = members.population(nets, len({c.seed for c in configs}) == 1)
    if cfg.channels_last:
        pop.model.to(memory_format=torch.channels_last)
    if not cfg.compile:
        return pop, pop.model
    key = network_key(configs, dev)
    if _COMPILED.get("network", (None,))[0] != key:
        _COMPILED.clear()  # the step compiled for the old network goes with it
        # dynamic=False: one graph per shape: the padded evaluation batch (training compiles the whole step instead,
        # engine.capture). On CUDA replayed as CUDA graphs ("reduce-overhead"): one launch instead of ~100-1,000.
        mode = "reduce-overhead" if dev.type == "cuda" else None
        return compiled_once("network", key, lambda: (pop, torch.compile(pop.model, dynamic=False, mode=mode)))
    cached, net = _COMPILED["network"][1]
    cached.model.load_state_dict(pop.model.state_dict())  # weights, BatchNorm running stats and counters
    cached.model.zero_grad(set_to_none=True)
    cached.model.train()
    return cached, net
