"""Forgetting instruments: how far each layer of each member has turned from its initialisation (a conv before a
BatchNorm is scale-invariant: its state is its direction). `angle:<layer>` (degrees from W_0), `disp:<layer>` =
|W_t - W_0| / |W_0|, `step_angle:<layer>` (the epoch's mean per-step angle, radians) and `Theta` (its cumulative
whole-network sum: a *measured* clock); no layer: all weights as one vector. cos(1e-4 rad) is 1 in float32, so an
angle is atan2(|t|, |b| + rho) from d = a - b (rho = <d, b> / |b|, t^2 = |d|^2 - rho^2), in float64."""

import math

import torch


def _parts(d: list[torch.Tensor], b: list[torch.Tensor], k: int) -> torch.Tensor:
    """[3, L + 1, K] float64: <d, b>, |d|^2, |b|^2 per member, of all layers together (row 0) and of each."""
    def dots(xs: list[torch.Tensor], ys: list[torch.Tensor]) -> torch.Tensor:
        return torch.stack([(x.reshape(k, -1).double() * y.reshape(k, -1).double()).sum(1)
                            for x, y in zip(xs, ys, strict=True)])

    parts = torch.stack([dots(d, b), dots(d, d), dots(b, b)])
    return torch.cat([parts.sum(1, keepdim=True), parts], 1)


def angle(parts: torch.Tensor) -> torch.Tensor:
    """Angle (radians) between b + d and b from `parts` = [<d, b>, |d|^2, |b|^2] along dim 0 (any trailing shape)."""
    db, dd, bb = parts
    nb = bb.sqrt()
    rho = db / nb
    return torch.atan2((dd - rho * rho).clamp(min=0).sqrt(), nb + rho)


def angle_between(a: torch.Tensor, b: torch.Tensor) -> float:
    """Angle (degrees) between two tensors of the same shape, as flat vectors (for tests and notebooks)."""
    return math.degrees(float(angle(_parts([a - b], [b], 1)[:, 0, 0])))


class Instruments:
    """One population's instruments over its conv/linear `weights` (member j's part in row j of `reshape(K, -1)`):
    `before_step()` / `after_step()` around every optimiser step, `read()` at a measured epoch."""

    def __init__(self, weights: list[torch.Tensor], k: int, layers: list[str]):
        self.weights, self.k, self.layers = weights, k, layers
        self.w0 = [w.detach().clone() for w in weights]
        self.prev = [torch.empty_like(w) for w in weights]
        dev = weights[0].device
        self.step_sum = torch.zeros(len(weights) + 1, k, dtype=torch.float64, device=dev)  # since the last read
        self.theta = torch.zeros(k, dtype=torch.float64, device=dev)  # cumulative whole-network per-step angle
        self.steps = 0  # steps since the last read

    def columns(self) -> list[str]:
        names = ["", *self.layers]  # "": the whole network's `angle`, `disp`, `step_angle`
        return [f"{kind}:{n}" if n else kind for kind in ("angle", "disp", "step_angle") for n in names] + ["Theta"]

    @torch.no_grad()
    def before_step(self) -> None:
        torch._foreach_copy_(self.prev, [w.detach() for w in self.weights])

    @torch.no_grad()
    def after_step(self) -> None:
        d = torch._foreach_sub([w.detach() for w in self.weights], self.prev)
        step = angle(_parts(d, self.prev, self.k))  # [L + 1, K]
        self.step_sum += step
        self.theta += step[0]
        self.steps += 1

    @torch.no_grad()
    def read(self) -> torch.Tensor:
        """[K, 3 (L + 1) + 1] float64 device tensor in `columns()` order; resets the epoch's step accumulators."""
        d0 = torch._foreach_sub([w.detach() for w in self.weights], self.w0)
        parts = _parts(d0, self.w0, self.k)
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
