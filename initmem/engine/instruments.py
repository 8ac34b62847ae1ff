"""Forgetting instruments: how far each layer of each member has turned from its initialisation (a conv before a
BatchNorm is scale-invariant: its state is its direction). `angle:<layer>` (degrees from W_0), `disp:<layer>` =
|W_t - W_0| / |W_0|, `step_angle:<layer>` (the epoch's mean per-step angle, radians) and `Theta` (its cumulative
whole-network sum: a *measured* clock); no layer: all weights as one vector. cos(1e-4 rad) is 1 in float32, so an
angle is atan2(|t|, |b| + rho) from d = a - b (rho = <d, b> / |b|, t^2 = |d|^2 - rho^2), in float64.

Cost (docs/performance.md): a step's instruments are 24 aten ops whatever the depth (30 before 2026-12-06), not ~10
per layer. Why: every layer's weights are copied (one `_foreach_copy_`) into a flat buffer of the population, each
layer's part laid out in the weight's own memory order (a `channels_last` weight is a memcpy, not a reshape copy), so
member j's part of a layer is one contiguous run of it (dim 0, which holds the members, is outermost in every
layout). The weights before the step, the difference and W_0 are adjacent rows of one buffer, so a pair of them
becomes float64 in one copy; its products and their sums are then a handful of ops on the whole population:
consecutive layers of equal size are summed as one [3, G, K, n] view (a few groups in a ResNet of any depth), each
member's run summed by torch's own reduction; every view is made once. `fused=True` (a compiled step) computes the
same sums as one functional expression that inductor fuses into a float64-accumulating reduction per group: equal
to rounding, the eager path's values unchanged bit for bit."""

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
        dev = weights[0].device
        pair, prods = (torch.empty(r, self.numel, dtype=torch.float64, device=dev) for r in (2, 3))
        self._parts = torch.empty(3, len(weights) + 1, k, dtype=torch.float64, device=dev)
        # views made once: a view made at every step is one more dispatched op
        self.rows = self._parts.unbind(0)  # `parts`' three rows
        self._work = (pair, pair[0], pair[1], prods[0], prods[1:], self._parts[:, 1:], self._parts[:, 0],
                      [x.view(3, g, k, n) for x, (g, n) in zip(prods.split(self.split, 1), self.groups, strict=True)])

    def buffer(self, like: torch.Tensor, rows: int = 1) -> tuple[torch.Tensor, list[list[torch.Tensor]]]:
        """A flat buffer of `rows` rows and, per row, its per-layer views, each with its weight's shape and strides."""
        flat = torch.empty(rows, self.numel, dtype=like.dtype, device=like.device)
        return flat, [[r[o:o + math.prod(s)].as_strided(s, st) for o, s, st in
                       zip(self.offsets, self.shapes, self.strides, strict=True)] for r in flat]

    def parts(self, pair: torch.Tensor) -> torch.Tensor:
        """[3, L + 1, K] float64: <x0, x1>, |x0|^2, |x1|^2 per member of all layers together (row 0) and of each, from
        the flat [2, N] buffer `pair` (products in float64, each member's run of a layer summed by one reduction;
        the result is a buffer of the layout, overwritten by the next call)."""
        work, x0, x1, p01, squares, layers, total, groups = self._work
        work.copy_(pair)
        torch.mul(x0, x1, out=p01)
        torch.mul(work, work, out=squares)
        sums = [g.sum(-1) for g in groups]
        torch.cat(sums, 1, out=layers) if len(sums) > 1 else layers.copy_(sums[0])
        torch.sum(layers, 1, out=total)
        return self._parts

    def fused_parts(self, pair: torch.Tensor) -> torch.Tensor:
        """`parts` as one functional expression (no work buffers): compiled, each group's float32 products are
        summed in float64 by one fused reduction that reads the weights once (equal to `parts` to rounding)."""
        x = pair.double()
        prods = torch.stack([x[0] * x[1], x[0] * x[0], x[1] * x[1]])
        sums = [p.view(3, g, self.k, n).sum(-1) for p, (g, n) in zip(prods.split(self.split, 1), self.groups,
                                                                     strict=True)]
        layers = torch.cat(sums, 1)
        return torch.cat([layers.sum(1, keepdim=True), layers], 1)


def _dense(w: torch.Tensor) -> bool:
    """Whether `w`'s elements fill numel() consecutive memory slots (any order of dims): a flat view can hold it."""
    order = sorted(range(w.ndim), key=lambda i: w.stride(i), reverse=True)
    return w.permute(order).is_contiguous()


def angle(parts: torch.Tensor) -> torch.Tensor:
    """Angle (radians) between b + d and b from `parts` = [<d, b>, |d|^2, |b|^2] along dim 0 (any trailing shape)."""
    db, dd, bb = parts
    return _angle(db, dd, bb)


def _angle(db: torch.Tensor, dd: torch.Tensor, bb: torch.Tensor) -> torch.Tensor:
    nb = bb.sqrt()
    rho = db / nb
    return torch.atan2((dd - rho * rho).clamp(min=0).sqrt(), nb + rho)


def angle_between(a: torch.Tensor, b: torch.Tensor) -> float:
    """Angle (degrees) between two tensors of the same shape, as flat vectors (for tests and notebooks)."""
    flat = b.reshape(-1)
    return math.degrees(float(angle(Layout([flat], 1).parts(torch.stack([a.reshape(-1) - flat, flat]))[:, 0, 0])))


class Instruments:
    """One population's instruments over its conv/linear `weights` (member j's part in row j of `reshape(K, -1)`):
    `before_step()` / `after_step()` around every optimiser step, `read()` at a measured epoch. `fused`: the
    instruments' reductions as `Layout.fused_parts` (for a compiled step; equal to rounding), else `Layout.parts`."""

    def __init__(self, weights: list[torch.Tensor], k: int, layers: list[str], fused: bool = False):
        self.weights, self.k, self.layers, self.fused = weights, k, layers, fused
        self.layout = Layout(weights, k)
        # rows: the weights before the step, a difference, W_0; (before, difference) and (difference, W_0) are
        # adjacent pairs, each converted to float64 by one copy
        self._rows, (self.prev, self._d_views, self.w0) = self.layout.buffer(weights[0], 3)
        self._step_pair, self._read_pair, self._d = self._rows[0:2], self._rows[1:3], self._rows[1]
        self._before, self._w0, self.now = self._rows[0], self._rows[2], self._d_views
        with torch.no_grad():
            torch._foreach_copy_(self.w0, weights)
        dev = weights[0].device
        # the step accumulators, added to by one op: the epoch's per-layer sums (since the last read) and, in row 0
        # of the second, the cumulative whole-network per-step angle (the rest of that row is unused)
        self._acc = torch.zeros(2, len(weights) + 1, k, dtype=torch.float64, device=dev)
        self.step_sum, self.theta = self._acc[0], self._acc[1, 0]
        self.steps = 0  # steps since the last read

    def columns(self) -> list[str]:
        names = ["", *self.layers]  # "": the whole network's `angle`, `disp`, `step_angle`
        return [f"{kind}:{n}" if n else kind for kind in ("angle", "disp", "step_angle") for n in names] + ["Theta"]

    def _parts(self, pair: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """`pair`'s three sums, as rows (the eager ones: views made once)."""
        if self.fused:
            return self.layout.fused_parts(pair).unbind(0)
        self.layout.parts(pair)
        return self.layout.rows

    @torch.no_grad()
    def before_step(self) -> None:
        torch._foreach_copy_(self.prev, self.weights)

    def after_step(self) -> None:
        self.add_step()
        self.steps += 1

    @torch.no_grad()
    def add_step(self) -> None:
        """`after_step`'s tensor work alone (a compiled step's part: the host counter `steps` stays outside it)."""
        torch._foreach_copy_(self.now, self.weights)  # the weights after the step, then less those before it
        self._d.sub_(self._before)
        db, bb, dd = self._parts(self._step_pair)  # the pair is (before, difference)
        self._acc += _angle(db, dd, bb)  # [L + 1, K], into both accumulators

    @torch.no_grad()
    def read(self) -> torch.Tensor:
        """[K, 3 (L + 1) + 1] float64 device tensor in `columns()` order; resets the epoch's step accumulators."""
        torch._foreach_copy_(self.now, self.weights)
        self._d.sub_(self._w0)
        db, dd, bb = self._parts(self._read_pair)  # the pair is (difference, W_0)
        mean_step = self.step_sum / self.steps if self.steps else torch.full_like(self.step_sum, math.nan)
        out = torch.cat([torch.rad2deg(_angle(db, dd, bb)), (dd / bb).sqrt(), mean_step, self.theta[None]]).T
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
