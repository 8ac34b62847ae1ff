"""Forgetting instruments: how far each layer of each member has turned from its initialisation (a conv before a
BatchNorm is scale-invariant: its state is its direction). `angle:<layer>` (degrees from W_0), `disp:<layer>` =
|W_t - W_0| / |W_0|, `step_angle:<layer>` (the epoch's mean per-step angle, radians) and `Theta` (its cumulative
whole-network sum: a *measured* clock); no layer: all weights as one vector. cos(1e-4 rad) is 1 in float32, so an
angle is atan2(|t|, |b| + rho) from d = a - b (rho = <d, b> / |b|, t^2 = |d|^2 - rho^2), in float64.

Cost (docs/performance.md): a step's instruments are a fixed number of aten ops whatever the depth, not ~10 per
layer: every layer's weights are copied (one `_foreach_copy_`) into a flat buffer of the population, in the weight's
own memory order (a `channels_last` weight is a memcpy, not a reshape copy; dim 0, which holds the members, is
outermost in every layout). The weights before the step, the difference and W_0 are adjacent rows of one buffer, so
a pair of them becomes float64 in one copy, and its products and their sums are a handful of ops on the whole
population, every view made once. Two layouts of the buffer:
- `Layout` (eager steps on the CPU, 24 ops, 30 before 2026-12-06): layer by layer, member j's part of a layer one
  contiguous run; consecutive layers of equal size summed as one [3, G, K, n] view (G groups: 7 in a ResNet-9), each
  member's run by torch's own reduction. Its values are those of every committed CPU run, bit for bit.
- `ChunkLayout` (`fused`: a compiled step, and eager steps on every other device: 16 ops): member by member, each
  layer's part zero-padded to whole chunks, so that every sum is one chunk sum and one batched matmul by the chunks'
  0/1 layer indicator, whatever the depth; compiled, inductor fuses the copy, the products and the chunk sums into
  one float64-accumulating reduction. Equal to `Layout`'s sums to rounding (another order of summation)."""

import math

import torch


def _member_sizes(weights: list[torch.Tensor], k: int) -> list[int]:
    """Each weight's elements per member; ValueError unless every weight is K dense member blocks of one dtype."""
    for w in weights:
        outer = k == 1 or w.stride(0) == w.numel() // w.shape[0]  # member j's part: one run of memory
        if w.numel() % k or not outer or w.dtype != weights[0].dtype or not _dense(w):
            raise ValueError(f"a weight of shape {tuple(w.shape)} and strides {w.stride()} is not K={k} dense "
                             f"member blocks of dtype {weights[0].dtype}")
    return [w.numel() // k for w in weights]


def _dense(w: torch.Tensor) -> bool:
    """Whether `w`'s elements fill numel() consecutive memory slots (any order of dims): a flat view can hold it."""
    order = sorted(range(w.ndim), key=lambda i: w.stride(i), reverse=True)
    return w.permute(order).is_contiguous()


def _flat(t: torch.Tensor, k: int) -> torch.Tensor:
    """[K, numel / K]: `t`'s K dense member blocks in its memory order (a view)."""
    n = t.numel() // k
    return t.as_strided((k, n), (n, 1))


class Layout:
    """Where each layer of `weights` lies in one flat buffer of their dtype and device, member-major within a layer;
    `groups`: (layers, numel per member) of consecutive layers of equal size, summed together."""

    def __init__(self, weights: list[torch.Tensor], k: int):
        self.k, self.shapes, self.strides = k, [w.shape for w in weights], [w.stride() for w in weights]
        sizes = _member_sizes(weights, k)
        self.offsets = [k * sum(sizes[:i]) for i in range(len(sizes))]
        self.numel = k * sum(sizes)
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
        parts = torch.empty(3, len(weights) + 1, k, dtype=torch.float64, device=dev)
        # views made once: a view made at every step is one more dispatched op
        self._work = (pair, pair[0], pair[1], prods[1], prods[0::2], parts[:, 1:], parts[:, 0],
                      [x.view(3, g, k, n) for x, (g, n) in zip(prods.split(self.split, 1), self.groups, strict=True)])
        self.rows = parts.unbind(0)

    def buffer(self, like: torch.Tensor, rows: int = 1) -> tuple[torch.Tensor, list[list[torch.Tensor]]]:
        """A flat buffer of `rows` rows and, per row, its per-layer views, each with its weight's shape and strides."""
        flat = torch.empty(rows, self.numel, dtype=like.dtype, device=like.device)
        return flat, [[r[o:o + math.prod(s)].as_strided(s, st) for o, s, st in
                       zip(self.offsets, self.shapes, self.strides, strict=True)] for r in flat]

    def sources(self, weights: list[torch.Tensor]) -> list[torch.Tensor]:
        """What a row's views are copied from: the weights themselves."""
        return weights

    def to_weights(self, views: list[torch.Tensor], weights: list[torch.Tensor]) -> list[torch.Tensor]:
        """A row's views as tensors of the weights' shapes (a checkpoint's form, the same for both layouts)."""
        return [v.clone() for v in views]

    def load(self, views: list[torch.Tensor], tensors: list[torch.Tensor], weights: list[torch.Tensor]) -> None:
        """Copy `to_weights`' form into a row's views."""
        for v, t in zip(views, tensors, strict=True):
            v.copy_(t)

    def parts(self, pair: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """|x0|^2, <x0, x1>, |x1|^2: three [L + 1, K] float64 rows, per member of all layers together (column 0) and
        of each, from the flat [2, N] buffer `pair` (products in float64, each member's run of a layer summed by one
        reduction; the rows are buffers of the layout, overwritten by the next call)."""
        work, x0, x1, p01, squares, layers, total, groups = self._work
        work.copy_(pair)
        torch.mul(x0, x1, out=p01)
        torch.mul(work, work, out=squares)
        sums = [g.sum(-1) for g in groups]
        torch.cat(sums, 1, out=layers) if len(sums) > 1 else layers.copy_(sums[0])
        torch.sum(layers, 1, out=total)
        return self.rows


class ChunkLayout:
    """The fused instruments' layout (module docstring): member j's run of every layer, each zero-padded to a whole
    number of `chunk` elements (a power of two, the padding at most an eighth of the weights), at j * `width`."""

    def __init__(self, weights: list[torch.Tensor], k: int):
        self.k, self.sizes = k, _member_sizes(weights, k)
        real, layers = sum(self.sizes), len(self.sizes)
        self.chunk = 1 << max(0, (real // (8 * layers)).bit_length() - 1)  # each layer wastes < chunk
        padded = [-(-n // self.chunk) * self.chunk for n in self.sizes]
        self.offsets = [sum(padded[:i]) for i in range(layers)]
        self.width = sum(padded)
        chunks, dev = self.width // self.chunk, weights[0].device
        # row 0 sums every chunk (the whole network), row 1 + l the chunks of layer l
        self.indicator = torch.zeros(layers + 1, chunks, dtype=torch.float64, device=dev)
        self.indicator[0] = 1
        for i, (o, p) in enumerate(zip(self.offsets, padded, strict=True)):
            self.indicator[1 + i, o // self.chunk:(o + p) // self.chunk] = 1
        self._pairs: dict[int, torch.Tensor] = {}  # per pair (by id): its rows twice, a view
        self._kept = self._make()  # float64 work buffers with their views (7 N: ResNet-9, width 1, K = 7: 2.7 GB)

    def buffer(self, like: torch.Tensor, rows: int = 1) -> tuple[torch.Tensor, list[list[torch.Tensor]]]:
        """A flat buffer of `rows` rows, zero (the padding stays zero) and, per row, its per-layer [K, n] views."""
        flat = torch.zeros(rows, self.k * self.width, dtype=like.dtype, device=like.device)
        return flat, [[r.view(self.k, self.width)[:, o:o + n] for o, n in zip(self.offsets, self.sizes, strict=True)]
                      for r in flat]

    def sources(self, weights: list[torch.Tensor]) -> list[torch.Tensor]:
        """What a row's views are copied from: each weight as [K, n] in its memory order (views)."""
        with torch.no_grad():
            return [_flat(w, self.k) for w in weights]

    def to_weights(self, views: list[torch.Tensor], weights: list[torch.Tensor]) -> list[torch.Tensor]:
        """`Layout.to_weights`: each view in a tensor like its weight, in the weight's memory order."""
        out = [torch.empty_like(w) for w in weights]
        torch._foreach_copy_(self.sources(out), views)
        return out

    def load(self, views: list[torch.Tensor], tensors: list[torch.Tensor], weights: list[torch.Tensor]) -> None:
        """`Layout.load`: `to_weights`' form into a row's views."""
        torch._foreach_copy_(views, self.sources([torch.empty_like(w).copy_(t) for w, t in zip(weights, tensors,
                                                                                             strict=True)]))

    def parts(self, pair: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """`Layout.parts` of a flat [2, K * width] pair in four ops: the pair in float64 with each row twice (x0, x0,
        x1, x1), the products of consecutive rows, their chunk sums, and those times the indicator."""
        dup, low, high, prods, chunked, chunks, per_member, indicator, out, rows = self._buffers()
        dup.copy_(self._twice(pair))
        torch.mul(low, high, out=prods)
        torch.sum(chunked, -1, out=chunks)
        torch.bmm(indicator, per_member, out=out)
        return rows

    def _buffers(self) -> tuple:
        """What `parts` writes: the kept buffers and views (eager: a view made at every step is one more op), or new
        ones while dynamo traces (temporaries, which inductor fuses away)."""
        return self._make() if torch.compiler.is_compiling() else self._kept

    def _make(self) -> tuple:
        """`parts`' buffers and their views."""
        k, n, c = self.k, self.k * self.width, self.chunk
        dev = self.indicator.device
        dup = torch.empty(2, 2, n, dtype=torch.float64, device=dev)
        prods = torch.empty(3, n, dtype=torch.float64, device=dev)
        chunks = torch.empty(3, k, self.width // c, dtype=torch.float64, device=dev)
        out = torch.empty(3, len(self.sizes) + 1, k, dtype=torch.float64, device=dev)
        flat = dup.view(4, n)
        return (dup, flat[0:3], flat[1:4], prods, prods.view(3, k, -1, c), chunks, chunks.mT,
                self.indicator.expand(3, *self.indicator.shape), out, out.unbind(0))

    def _twice(self, pair: torch.Tensor) -> torch.Tensor:
        """[2, 2, N]: each row of `pair` twice (a view, kept per pair when eager)."""
        if torch.compiler.is_compiling():
            return pair[:, None].expand(2, 2, -1)
        if id(pair) not in self._pairs:
            self._pairs[id(pair)] = pair[:, None].expand(2, 2, -1)
        return self._pairs[id(pair)]


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
    dd, db, bb = (r[0, 0] for r in Layout([flat], 1).parts(torch.stack([a.reshape(-1) - flat, flat])))
    return math.degrees(float(_angle(db, dd, bb)))


class Instruments:
    """One population's instruments over its conv/linear `weights` (member j's part in row j of `reshape(K, -1)`):
    `before_step()` / `after_step()` around every optimiser step, `read()` at a measured epoch. `fused`: the
    `ChunkLayout` (a compiled step, a device other than the CPU; equal to rounding), else the `Layout`."""

    def __init__(self, weights: list[torch.Tensor], k: int, layers: list[str], fused: bool = False):
        self.weights, self.k, self.layers, self.fused = weights, k, layers, fused
        self.layout = (ChunkLayout if fused else Layout)(weights, k)
        self.sources = self.layout.sources(weights)  # what the rows' views are copied from
        # rows: the weights before the step, a difference, W_0; (before, difference) and (difference, W_0) are
        # adjacent pairs, each converted to float64 by one copy
        self._rows, (self.prev, self._d_views, self.w0) = self.layout.buffer(weights[0], 3)
        self._step_pair, self._read_pair, self._d = self._rows[0:2], self._rows[1:3], self._rows[1]
        self._before, self._w0, self.now = self._rows[0], self._rows[2], self._d_views
        with torch.no_grad():
            torch._foreach_copy_(self.w0, self.sources)
        dev = weights[0].device
        # the step accumulators, added to by one op: the epoch's per-layer sums (since the last read) and, in row 0
        # of the second, the cumulative whole-network per-step angle (the rest of that row is unused)
        self._acc = torch.zeros(2, len(weights) + 1, k, dtype=torch.float64, device=dev)
        self.step_sum, self.theta = self._acc[0], self._acc[1, 0]
        self.steps = 0  # steps since the last read

    def columns(self) -> list[str]:
        names = ["", *self.layers]  # "": the whole network's `angle`, `disp`, `step_angle`
        return [f"{kind}:{n}" if n else kind for kind in ("angle", "disp", "step_angle") for n in names] + ["Theta"]

    def step_tensors(self) -> list[torch.Tensor]:
        """The tensors of its own a step reads or writes in place (what a compiled step marks static on CUDA)."""
        return [*self.prev, *self.now, self._d, self._before, self._step_pair, self._acc,
                *([self.layout.indicator] if self.fused else [])]

    def _sources(self) -> list[torch.Tensor]:
        """`sources`, made inside the graph while dynamo traces (views of the weights it updates, not inputs)."""
        return self.layout.sources(self.weights) if torch.compiler.is_compiling() else self.sources

    @torch.no_grad()
    def before_step(self) -> None:
        torch._foreach_copy_(self.prev, self._sources())

    def after_step(self) -> None:
        self.add_step()
        self.steps += 1

    @torch.no_grad()
    def add_step(self) -> None:
        """`after_step`'s tensor work alone (a compiled step's part: the host counter `steps` stays outside it)."""
        torch._foreach_copy_(self.now, self._sources())  # the weights after the step, then less those before it
        self._d.sub_(self._before)
        bb, db, dd = self.layout.parts(self._step_pair)  # the pair is (before, difference)
        self._acc += _angle(db, dd, bb)  # [L + 1, K], into both accumulators

    @torch.no_grad()
    def read(self) -> torch.Tensor:
        """[K, 3 (L + 1) + 1] float64 device tensor in `columns()` order; resets the epoch's step accumulators."""
        torch._foreach_copy_(self.now, self.sources)
        self._d.sub_(self._w0)
        dd, db, bb = self.layout.parts(self._read_pair)  # the pair is (difference, W_0)
        mean_step = self.step_sum / self.steps if self.steps else torch.full_like(self.step_sum, math.nan)
        out = torch.cat([torch.rad2deg(_angle(db, dd, bb)), (dd / bb).sqrt(), mean_step, self.theta[None]]).T
        self.step_sum.zero_()
        self.steps = 0
        return out

    def state_dict(self) -> dict:
        """W_0 as tensors of the weights' shapes (either layout's checkpoint restores into either), the accumulators."""
        return {"w0": self.layout.to_weights(self.w0, self.weights), "step_sum": self.step_sum.clone(),
                "theta": self.theta.clone(), "steps": self.steps}

    def load_state_dict(self, state: dict) -> None:
        with torch.no_grad():
            self.layout.load(self.w0, state["w0"], self.weights)
        self.step_sum.copy_(state["step_sum"])
        self.theta.copy_(state["theta"])
        self.steps = int(state["steps"])
