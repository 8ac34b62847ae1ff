"""The host-floor model of a GPU training step, torch-free (docs/planner.md, "Modelled steps"): an eager step costs
max(GPU work, host floor). The host floor is the ops one step launches (`STEP_OPS`) times a per-op host cost fitted to
a table's host-bound entries; the GPU work is the table's GPU-bound b = 128 fp32 step scaled by FLOPs, and to another
precision by the ratio of its evaluated image's time (evaluation, at large batches, is GPU-bound)."""

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
# forward multiply-accumulates per 32x32 image at width 1 (conv layers; width w scales them by about w^2)
ARCH_MACS = {"resnet9": 379e6, "resnet20": 41e6, "resnet56": 125e6, "resnet110": 253e6}
COUNTED_PRECISIONS = ("fp32", "tf32")  # the precisions whose ops `STEP_OPS` counts
ANCHOR_BATCH = 128  # the GPU work is scaled from the table's fp32 step at this batch size
HOST_BOUND = 0.5  # an entry is host-bound where its modelled GPU work is under this share of its measured step
MODELLED = "modelled"  # the first word of a modelled point's time source


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
    costs = tuple(e.train_step_s / STEP_OPS[(e.arch, "sgd")] for e in singles if e.precision in COUNTED_PRECISIONS
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


def describe_fit(hf: HostFit) -> str:
    """One line: the per-op cost's range and what it was fitted to."""
    low, mid, high = hf.per_op
    return (f"{MODELLED}: a step costs max(GPU work, ops x {mid * 1e6:.0f} us) ({low * 1e6:.0f}-{high * 1e6:.0f} us "
            f"an op, from {len(hf.per_op_s)} host-bound entries; GPU work scaled by FLOPs from the "
            f"{hf.anchor.arch} b{hf.anchor.batch_size} fp32 step)")
