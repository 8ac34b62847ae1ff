"""Forgetting instruments: how far each layer of each member has turned from its initialisation (a conv before a
BatchNorm is scale-invariant: its state is its direction). `angle:<layer>` (degrees from W_0), `disp:<layer>` =
|W_t - W_0| / |W_0|, `step_angle:<layer>` (the epoch's mean per-step angle, radians) and `Theta` (its cumulative
whole-network sum: a *measured* clock); no layer: all weights as one vector. cos(1e-4 rad) is 1 in float32, so an
angle is atan2(|t|, |b| + rho) from d = a - b (rho = <d, b> / |b|, t^2 = |d|^2 - rho^2), in float64.

Cost (docs/performance.md): a step's instruments are 30 aten ops whatever the depth, not ~10 per layer. Why: every
layer's weights are copied (one `_foreach_copy_`) into a flat buffer of the population, each layer's part laid out in
the weight's own memory order (a `channels_last` weight is a memcpy, not a reshape copy), so member j's part of a
layer is one contiguous run of it (dim 0, which holds the members, is outermost in every layout). The flat
difference, its float64 products and their sums are then a handful of ops on the whole population: consecutive layers
of equal size are summed as one [3, G, K, n] view (a few groups in a ResNet of any depth), each member's run summed by
torch's own reduction, as before (the sums of a `channels_last` layer are in memory order: rounding-level changes)."""

import math

import torch


class Layout:
    """Where each layer of `weights` lies in one flat buffer of their dtype and device, member-major within a layer;
    `groups`: (layers, numel per member) of consecutive layers of equal size, summed together."""

    def __init__(self, weights: list[torch.Tensor], k: int):
        self.k, self.shapes, self.strides = k, [w.shape for w in weights], [w.stride() for w in weights]
        self.offsets, self.numel, sizes = [], 0, []
        for w in weights:
            outer = k == 1 or w.stride(0) == w.numel() // w.shape[0]  # member j's part: one run of memory
            if w.numel() % k or not outer or w.dtype != weights[0].dtype or not _dense(w):
                raise ValueError(f"a weight of shape {tuple(w.shape)} and strides {w.stride()} is not K={k} dense "
                                 f"member blocks of dtype {weights[0].dtype}")
            self.offsets.append(self.numel)
            self.numel += w.numel()
            sizes.append(w.numel() // k)
        self.groups: list[tuple[int, int]] = []
        for n in sizes:
            if self.groups and self.groups[-1][1] == n:
                self.groups[-1] = (self.groups[-1][0] + 1, n)
            else:
                self.groups.append((1, n))
        self.split = [g * k * n for g, n in self.groups]
        # float64 work buffers, kept: on a CPU, allocating and stacking them anew each step cost more than the
        # arithmetic (5 N float64: 1.8 GB for ResNet-9 at width 1 with K = 7, on a GPU of 80-141 GB)
        prods = torch.empty(3, self.numel, dtype=torch.float64, device=weights[0].device)
        self._work = (torch.empty_like(prods[0]), torch.empty_like(prods[0]), prods.unbind(0),
                      [x.view(3, g, k, n) for x, (g, n) in zip(prods.split(self.split, 1), self.groups, strict=True)])

    def buffer(self, like: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """A flat buffer and its per-layer views, each with its weight's shape and strides."""
        flat = torch.empty(self.numel, dtype=like.dtype, device=like.device)
        return flat, [flat[o:o + math.prod(s)].as_strided(s, st) for o, s, st in
                      zip(self.offsets, self.shapes, self.strides, strict=True)]

    def parts(self, d: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """[3, L + 1, K] float64: <d, b>, |d|^2, |b|^2 per member of all layers together (row 0) and of each, from the
        flat buffers d and b (products in float64, each member's run of a layer summed by one reduction)."""
        dd, bb, (db_, dd_, bb_), groups = self._work
        dd.copy_(d)
        bb.copy_(b)
        torch.mul(dd, bb, out=db_)
        torch.mul(dd, dd, out=dd_)
        torch.mul(bb, bb, out=bb_)
        sums = [x.sum(-1) for x in groups]
        parts = torch.cat(sums, 1) if len(sums) > 1 else sums[0]
        return torch.cat([parts.sum(1, keepdim=True), parts], 1)


def _dense(w: torch.Tensor) -> bool:
    """Whether `w`'s elements fill numel() consecutive memory slots (any order of dims): a flat view can hold it."""
    order = sorted(range(w.ndim), key=lambda i: w.stride(i), reverse=True)
    return w.permute(order).is_contiguous()


def angle(parts: torch.Tensor) -> torch.Tensor:
    """Angle (radians) between b + d and b from `parts` = [<d, b>, |d|^2, |b|^2] along dim 0 (any trailing shape)."""
    db, dd, bb = parts
    nb = bb.sqrt()
    rho = db / nb
    return torch.atan2((dd - rho * rho).clamp(min=0).sqrt(), nb + rho)


def angle_between(a: torch.Tensor, b: torch.Tensor) -> float:
    """Angle (degrees) between two tensors of the same shape, as flat vectors (for tests and notebooks)."""
    flat = b.reshape(-1)
    return math.degrees(float(angle(Layout([flat], 1).parts(a.reshape(-1) - flat, flat)[:, 0, 0])))


class Instruments:
    """One population's instruments over its conv/linear `weights` (member j's part in row j of `reshape(K, -1)`):
    `before_step()` / `after_step()` around every optimiser step, `read()` at a measured epoch."""

    def __init__(self, weights: list[torch.Tensor], k: int, layers: list[str]):
        self.weights, self.k, self.layers = weights, k, layers
        self.layout = Layout(weights, k)
        self._w0, self.w0 = self.layout.buffer(weights[0])  # W_0, per layer (views) and flat
        self._prev, self.prev = self.layout.buffer(weights[0])  # the weights before the step
        self._now, self.now = self.layout.buffer(weights[0])  # the weights after it (or at a read)
        self._d = torch.empty_like(self._now)
        with torch.no_grad():
            torch._foreach_copy_(self.w0, weights)
        dev = weights[0].device
        self.step_sum = torch.zeros(len(weights) + 1, k, dtype=torch.float64, device=dev)  # since the last read
        self.theta = torch.zeros(k, dtype=torch.float64, device=dev)  # cumulative whole-network per-step angle
        self.steps = 0  # steps since the last read

    def columns(self) -> list[str]:
        names = ["", *self.layers]  # "": the whole network's `angle`, `disp`, `step_angle`
        return [f"{kind}:{n}" if n else kind for kind in ("angle", "disp", "step_angle") for n in names] + ["Theta"]

    @torch.no_grad()
    def before_step(self) -> None:
        torch._foreach_copy_(self.prev, self.weights)

    @torch.no_grad()
    def after_step(self) -> None:
        torch._foreach_copy_(self.now, self.weights)
        step = angle(self.layout.parts(torch.sub(self._now, self._prev, out=self._d), self._prev))  # [L + 1, K]
        self.step_sum += step
        self.theta += step[0]
        self.steps += 1

    @torch.no_grad()
    def read(self) -> torch.Tensor:
        """[K, 3 (L + 1) + 1] float64 device tensor in `columns()` order; resets the epoch's step accumulators."""
        torch._foreach_copy_(self.now, self.weights)
        parts = self.layout.parts(torch.sub(self._now, self._w0, out=self._d), self._w0)
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
