"""Forgetting instruments: how far each layer of each population member has turned from its initialisation.

Every conv before a BatchNorm is scale-invariant, so its real state is its direction: the **angle from
initialisation** `angle:<layer>` = arccos(<W_t, W_0> / (|W_t| |W_0|)) in degrees, and the **relative displacement**
`disp:<layer>` = |W_t - W_0| / |W_0|, at every measured epoch (epoch 0 included: 0 and 0). The **angular update** of
a step is the angle between W before and after it, accumulated on the device over every optimiser step (no host
sync): `step_angle:<layer>` is the epoch's mean per-step angle (radians), `Theta` the cumulative sum over training of
the whole network's per-step angle (radians): a *measured* forgetting clock beside T_SGD, T_L2 and T_adapt (for SGD on
a scale-invariant layer about eta |g| / |W| per step, for Adam about eta sqrt(n) / |W|). Columns without a layer
(`angle`, `disp`, `step_angle`) treat all conv and linear weights together as one vector.

Numerics: an angle of 1e-4 rad has cos = 1 - 5e-9, below float32 resolution, so arccos of the cosine would read 0.
Every angle here is computed from the difference d = a - b (formed elementwise, where it is exact to rounding):
with rho = <d, b> / |b| (the radial part of d) and t^2 = |d|^2 - rho^2 (its tangential part),
angle(a, b) = atan2(|t|, |b| + rho). Products and reductions are in float64 (a nearly radial d would
otherwise leave |t|^2 = |d|^2 - rho^2 at float32's rounding).
"""

from __future__ import annotations

import math

import torch

TOTAL = ""  # the column suffix of the whole-network value: `angle`, `disp`, `step_angle`


def _parts(d: list[torch.Tensor], b: list[torch.Tensor], k: int) -> torch.Tensor:
    """[3, L, K]: per layer and member <d, b>, |d|^2, |b|^2 (float64), each tensor viewed as [K, -1]."""
    def dots(xs: list[torch.Tensor], ys: list[torch.Tensor]) -> torch.Tensor:
        return torch.stack([(x.reshape(k, -1).double() * y.reshape(k, -1).double()).sum(1)
                            for x, y in zip(xs, ys, strict=True)])

    return torch.stack([dots(d, b), dots(d, d), dots(b, b)])


def angle(parts: torch.Tensor) -> torch.Tensor:
    """Angle (radians) between b + d and b from `parts` = [<d, b>, |d|^2, |b|^2] along dim 0 (any trailing shape)."""
    db, dd, bb = parts
    nb = bb.sqrt()
    rho = db / nb
    return torch.atan2((dd - rho * rho).clamp(min=0).sqrt(), nb + rho)


def with_total(parts: torch.Tensor) -> torch.Tensor:
    """[3, L, K] -> [3, L + 1, K]: row 0 of dim 1 is the sum over layers (the whole network as one vector)."""
    return torch.cat([parts.sum(1, keepdim=True), parts], 1)


def angle_between(a: torch.Tensor, b: torch.Tensor) -> float:
    """Angle (degrees) between two tensors of the same shape, as flat vectors (for tests and notebooks)."""
    return math.degrees(float(angle(_parts([a - b], [b], 1)[:, 0, 0])))


class Instruments:
    """The instruments of one population: its initial weights W_0, the per-step angle accumulators and the epoch
    values. `weights` are the population's conv/linear weights (each [K*out, ...] or [K, out, in], member j's part in
    row j of `reshape(K, -1)`); call `before_step()` / `after_step()` around every optimiser step and `read()` at a
    measured epoch."""

    def __init__(self, weights: list[torch.Tensor], k: int, layers: list[str]):
        self.weights, self.k, self.layers = weights, k, layers
        self.w0 = [w.detach().clone() for w in weights]
        self.prev = [torch.empty_like(w) for w in weights]
        dev = weights[0].device
        self.step_sum = torch.zeros(len(weights) + 1, k, dtype=torch.float64, device=dev)  # since the last read
        self.theta = torch.zeros(k, dtype=torch.float64, device=dev)  # cumulative whole-network per-step angle
        self.steps = 0  # steps since the last read

    def columns(self) -> list[str]:
        names = [TOTAL, *self.layers]
        return [f"{kind}:{n}" if n else kind for kind in ("angle", "disp", "step_angle") for n in names] + ["Theta"]

    @torch.no_grad()
    def before_step(self) -> None:
        torch._foreach_copy_(self.prev, [w.detach() for w in self.weights])

    @torch.no_grad()
    def after_step(self) -> None:
        d = torch._foreach_sub([w.detach() for w in self.weights], self.prev)
        step = angle(with_total(_parts(d, self.prev, self.k)))  # [L + 1, K]
        self.step_sum += step
        self.theta += step[0]
        self.steps += 1

    @torch.no_grad()
    def read(self) -> torch.Tensor:
        """[K, 3 (L + 1) + 1] float64 device tensor in `columns()` order; resets the epoch's step accumulators."""
        d0 = torch._foreach_sub([w.detach() for w in self.weights], self.w0)
        parts = with_total(_parts(d0, self.w0, self.k))
        mean_step = self.step_sum / self.steps if self.steps else torch.full_like(self.step_sum, math.nan)
        out = torch.cat([torch.rad2deg(angle(parts)), (parts[1] / parts[2]).sqrt(), mean_step, self.theta[None]]).T
        self.step_sum.zero_()
        self.steps = 0
        return out

    def state_dict(self) -> dict:
        return {"w0": [w.clone() for w in self.w0], "step_sum": self.step_sum.clone(), "theta": self.theta.clone(),
                "steps": self.steps}

    def load_state_dict(self, state: dict) -> None:
        for w, s in zip(self.w0, state["w0"], strict=True):
            w.copy_(s)
        self.step_sum.copy_(state["step_sum"])
        self.theta.copy_(state["theta"])
        self.steps = int(state["steps"])
