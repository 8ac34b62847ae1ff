"""The host-floor model of a GPU training step, torch-free (docs/planner.md, "Modelled steps"): an eager step costs
max(GPU work, host floor). The host floor is the ops one step launches (`STEP_OPS`) times a per-op host cost fitted to
a table's host-bound entries; the GPU work is the table's GPU-bound b = 128 fp32 step scaled by FLOPs, and to another
precision by the ratio of its evaluated image's time (evaluation, at large batches, is GPU-bound). A captured step
(`plan --capture`: the whole step one CUDA graph) costs its compiled GPU work plus one replay (`captured_steps`)."""

import math
from dataclasses import dataclass

from initmem.config import TrainConfig
from initmem.study.throughput import Entry, Throughput

# Ops one training step launches on the GPU at width 1, b = 128, one network (`Loop.train_step`: batch, forward,
# loss, backward, instruments, optimiser step, sums): aten calls on tensors of the device, views, allocations and
# detaches left out, counted on torch's `meta` device by tests/test_plan_model.py (which recounts them). Fixed per
# (arch, optimiser): the width and batch size change the shapes, not the calls. fp32 and tf32 launch the same ops;
# bf16's autocast adds casts not counted here, so bf16 takes no part in the fit.
STEP_OPS: dict[tuple[str, str], int] = {
    ("resnet9", "sgd"): 111, ("resnet9", "sgd_momentum"): 113, ("resnet9", "adam"): 117, ("resnet9", "adamw"): 118,
    ("resnet9", "muon"): 365,
    ("resnet56", "sgd"): 489, ("resnet56", "sgd_momentum"): 491, ("resnet56", "adam"): 495, ("resnet56", "adamw"): 496,
    ("resnet56", "muon"): 2200,
    ("resnet110", "sgd"): 921, ("resnet110", "sgd_momentum"): 923, ("resnet110", "adam"): 927,
    ("resnet110", "adamw"): 928, ("resnet110", "muon"): 4306,
}
# A table created before the instruments were fused (FUSED_SINCE) timed steps launching OPS_BEFORE_FUSED more ops than
# `STEP_OPS` (every arch: ResNet-9 SGD 127 then, 111 now); its per-op cost is its step over the ops it launched
FUSED_SINCE, OPS_BEFORE_FUSED = "2026-12-06", 16
# forward multiply-accumulates per 32x32 image at width 1 (conv layers; width w scales them by about w^2)
ARCH_MACS = {"resnet9": 379e6, "resnet20": 41e6, "resnet56": 125e6, "resnet110": 253e6}
COUNTED_PRECISIONS = ("fp32", "tf32")  # the precisions whose ops `STEP_OPS` counts
ANCHOR_BATCH = 128  # the GPU work is scaled from the table's fp32 step at this batch size
HOST_BOUND = 0.5  # an entry is host-bound where its modelled GPU work is under this share of its measured step
MODELLED = "modelled"  # the first word of a modelled point's time source
# The H200's compiled steps beside its eager ones (docs/gpu/2026-12-04-h200-speeds/device_check.json, epoch_eager and
# epoch_compile; ResNet-9 width 1, b = 128; "reduce-overhead": the network's forward and backward replayed as CUDA
# graphs, the loss, instruments and optimiser eager): (eager step, compiled step, eager evaluated image) in seconds.
H200_COMPILED = {"fp32": (9.523757703703707e-3, 8.700107891428551e-3, 2.189265810493808e-05),
                 "bf16": (5.972926415954414e-3, 2.3205874485712945e-3, 3.0969733264007696e-06)}
# Compiled kernels' share of the eager GPU work: the GPU-bound fp32 step, compiled against eager
COMPILE_GAIN = H200_COMPILED["fp32"][1] / H200_COMPILED["fp32"][0]  # 0.914
# A replay's host cost at most: the host-bound compiled bf16 step (which ran two replays and the eager rest) less its
# compiled GPU work (fp32's compiled step scaled to bf16 by the evaluated image, as `fit` scales precisions), so that
# a captured step there costs at most the compiled step measured
_FP32, _BF16 = H200_COMPILED["fp32"], H200_COMPILED["bf16"]
REPLAY_MAX_S = _BF16[1] - _FP32[1] * _BF16[2] / _FP32[2]


def step_ops(config: TrainConfig) -> int | None:
    """Ops `config`'s step launches (`STEP_OPS`; Muon at any Newton-Schulz arithmetic as Muon), None if not counted."""
    return STEP_OPS.get((config.arch, config.optimizer))


def image_flops(arch: str, width: float) -> tuple[float, float]:
    """(training, evaluation) FLOPs per image of one network: 2 per multiply-accumulate, a training step's forward
    and backward 3 forward passes (the conv layers' MACs, `ARCH_MACS`, scaled by width^2)."""
    forward = 2 * ARCH_MACS[arch] * width**2
    return 3 * forward, forward


def _flops(arch: str, width: float, batch_size: int) -> float:
    return batch_size * image_flops(arch, width)[0]


@dataclass(frozen=True)
class HostFit:
    """A table's fit: seconds of GPU work per training FLOP at each precision, and the per-op host cost each
    host-bound entry gives (`per_op`: low, central = geometric mean, high)."""

    gpu_s_per_flop: dict[str, float]
    per_op_s: tuple[float, ...]
    anchor: Entry

    @property
    def per_op(self) -> tuple[float, float, float]:
        c = self.per_op_s
        return min(c), math.exp(math.fsum(map(math.log, c)) / len(c)), max(c)

    @property
    def replay(self) -> tuple[float, float, float]:
        """One CUDA-graph replay's host cost (low, central = geometric mean, high): at least one op's (the fit's
        lowest per-op cost), at most `REPLAY_MAX_S`."""
        low = min(self.per_op[0], REPLAY_MAX_S)
        return low, math.sqrt(low * REPLAY_MAX_S), REPLAY_MAX_S

    def gpu_work(self, config: TrainConfig) -> float | None:
        g = self.gpu_s_per_flop.get(config.precision)
        return None if g is None else g * _flops(config.arch, config.width, config.batch_size)


def fit(table: Throughput) -> HostFit | None:
    """The fit of a GPU table (`HostFit`), or None where it has no single-network SGD fp32 entry at `ANCHOR_BATCH` of a
    counted arch, or no host-bound entry to fit the per-op cost to."""
    singles = [e for e in table.entries if e.members == 1 and e.optimizer == "sgd"
               and (e.arch, "sgd") in STEP_OPS]
    anchors = [e for e in singles if e.precision == "fp32" and e.batch_size == ANCHOR_BATCH]
    if table.kind != "cuda" or not anchors:
        return None
    a = anchors[0]
    per_flop = {"fp32": a.train_step_s / _flops(a.arch, a.width, a.batch_size)}
    for e in singles:  # another precision: the same network's evaluation against fp32's
        if (e.arch, e.width, e.batch_size) == (a.arch, a.width, a.batch_size) and e.precision != "fp32":
            per_flop[e.precision] = per_flop["fp32"] * e.eval_image_s / a.eval_image_s
    extra = OPS_BEFORE_FUSED if (table.created or "") < FUSED_SINCE else 0
    costs = tuple(e.train_step_s / (STEP_OPS[(e.arch, "sgd")] + extra) for e in singles
                  if e.precision in COUNTED_PRECISIONS
                  and per_flop[e.precision] * _flops(e.arch, e.width, e.batch_size) < HOST_BOUND * e.train_step_s)
    return HostFit(per_flop, costs, a) if costs else None


def modelled_steps(hf: HostFit, config: TrainConfig) -> tuple[float, float, float] | None:
    """`config`'s step at the fit's low, central and high per-op cost: max(GPU work, ops x per-op cost); None where
    its ops or its precision's GPU work are not known."""
    ops, work = step_ops(config), hf.gpu_work(config)
    if ops is None or work is None:
        return None
    low, mid, high = (max(work, ops * c) for c in hf.per_op)
    return low, mid, high


def captured_steps(hf: HostFit, config: TrainConfig) -> tuple[float, float, float] | None:
    """`config`'s step as one captured graph at the replay's low, central and high cost: compiled GPU work
    (`COMPILE_GAIN` x `HostFit.gpu_work`) + one replay, whatever its ops; None where its precision's work is unknown."""
    work = hf.gpu_work(config)
    if work is None:
        return None
    low, mid, high = (COMPILE_GAIN * work + r for r in hf.replay)
    return low, mid, high


def step_range(hf: HostFit, config: TrainConfig, capture: bool = False) -> tuple[float, float, float] | None:
    """`captured_steps` with `capture`, else `modelled_steps`."""
    return captured_steps(hf, config) if capture else modelled_steps(hf, config)


def step_source(hf: HostFit, config: TrainConfig, capture: bool = False) -> str:
    """A modelled step's time source: "modelled: max(GPU .. ms, N ops x .. us)" or "modelled: captured, ..."."""
    work = hf.gpu_work(config) or 0.0
    if capture:
        return f"{MODELLED}: captured, GPU {COMPILE_GAIN * work * 1e3:.2g} ms + a replay {hf.replay[1] * 1e6:.0f} us"
    return f"{MODELLED}: max(GPU {work * 1e3:.2g} ms, {step_ops(config)} ops x {hf.per_op[1] * 1e6:.0f} us)"


def describe_fit(hf: HostFit, capture: bool = False) -> str:
    """One line: the per-op cost's range and what it was fitted to (`capture`: the replay's range and its source)."""
    if capture:
        low, mid, high = hf.replay
        return (f"{MODELLED}, captured (--capture): a step costs its compiled GPU work ({COMPILE_GAIN:.3f} x the "
                f"eager GPU work, the H200's compiled fp32 step against eager) + one CUDA-graph replay, "
                f"{mid * 1e6:.0f} us ({low * 1e6:.0f}-{high * 1e6:.0f} us: one op to the H200's compiled bf16 step "
                "less its GPU work); evaluation as eager")
    low, mid, high = hf.per_op
    return (f"{MODELLED}: a step costs max(GPU work, ops x {mid * 1e6:.0f} us) ({low * 1e6:.0f}-{high * 1e6:.0f} us "
            f"an op, from {len(hf.per_op_s)} host-bound entries; GPU work scaled by FLOPs from the "
            f"{hf.anchor.arch} b{hf.anchor.batch_size} fp32 step)")
