"""The parity verdict of `benchmarks.device_check`: does the device compute what the CPU does? It separates a bug
from rounding in two parts. At epoch 0 nothing has trained: the three evaluations are forward passes of the same
initial weights, so a correct device agrees to ~1e-7 (fp32) and the check is tight. After training, a different
summation order (another conv algorithm, memory layout or thread count) is amplified by every step, so the
tolerance is a multiple of the spread measured on the CPU under those changes (`python -m benchmarks.parity`,
numbers in docs/gpu/device_check.md). A real bug (a wrong lr, another seed's minibatches, BatchNorm statistics never
updated) moves the losses by far more; `plant` puts one into a target run so that a test can show it still fails.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np
import pandas as pd

LOSSES = ("train_loss", "val_loss", "test_loss")
# the device check's full-mode parity run (`device_steps.SIZES`), on which the tolerances below were measured
RUN = dict(arch="resnet9", width=0.25, n_train=512, n_val=500, n_test=500, train_eval_size=512, batch_size=128,
           epochs=2)
# epoch 0 (forward only, the same initial weights): largest relative difference of val/test loss and weight norm.
# fp32 measured <= 2e-7 on the CPU (layout, threads); tf32 and bf16 round the forward pass itself (10- and 8-bit
# mantissas), so theirs are their rounding's size
EPOCH0 = {"fp32": 1e-5, "tf32": 1e-2, "bf16": 5e-2}
# after training (2 epochs of the parity run): largest relative loss difference. fp32: 5x the largest spread measured
# on the CPU under channels_last on/off and 1/2 threads (1.96e-3), 7x under the smallest planted bug's (7.0e-2;
# docs/gpu/device_check.md); tf32 and bf16 round every step's arithmetic more coarsely still
TRAINED = {"fp32": 1e-2, "tf32": 5e-2, "bf16": 5e-2}
# the initial weights: one draw on the CPU moved to the device, so equal (a device-side draw or a wrong seed: order 1)
INIT_TOL = 1e-7
# after training: the BatchNorm running statistics' difference relative to how far training moved them (`States`):
# rounding moved them <= 5.2e-3 on the CPU (docs/gpu/device_check.md); a skipped BN update leaves them where they
# started (1.0), which the losses may not show at sigma_w 1 (eval-mode statistics near their initial 0 and 1)
BUFFERS_TOL = {"fp32": 0.1, "tf32": 0.2, "bf16": 0.3, "population": 0.1}
# what `plant` can put into the target run: rounding changes (must pass) and bugs (must fail)
ROUNDING = ("channels_last", "threads")
BUGS = ("lr", "data", "bn")
PLANTS = (*ROUNDING, *BUGS)


def _rel(a: np.ndarray, b: np.ndarray) -> float | None:
    """Largest relative difference where both are finite; None when one is finite where the other is not."""
    if (np.isfinite(a) != np.isfinite(b)).any():
        return None
    both = np.isfinite(a) & np.isfinite(b)
    d = (np.abs(a - b) / np.maximum(np.abs(a), 1e-12))[both]
    return float(d.max()) if len(d) else 0.0


def verdict(ref: pd.DataFrame, got: pd.DataFrame, precision: str, trained_as: str | None = None,
            states: dict[str, float] | None = None) -> dict[str, Any]:
    """Both parts of the verdict of `got` against the reference history `ref` (rows by epoch, 0 first): the epoch-0
    forward check (val/test loss and weight norm, `EPOCH0`; with `states`, `state_differences`' initial weights
    within `INIT_TOL`) and the trained check (every loss at epochs >= 1 within `TRAINED`; with `states`, the BatchNorm
    statistics within `BUFFERS_TOL`), the trained tolerances those of `trained_as` if given (Muon: "bf16", its
    Newton-Schulz iterations run in bfloat16); `pass` when both hold."""
    if list(ref["epoch"]) != list(got["epoch"]):
        return {"pass": False, "reason": f"epochs {list(got['epoch'])} against {list(ref['epoch'])}"}
    r0, g0 = ref[ref["epoch"] == 0], got[got["epoch"] == 0]
    zero = {c: _rel(r0[c].to_numpy(float), g0[c].to_numpy(float)) for c in ("val_loss", "test_loss", "weight_norm")}
    r1, g1 = ref[ref["epoch"] > 0], got[got["epoch"] > 0]
    after = {c: _rel(r1[c].to_numpy(float), g1[c].to_numpy(float)) for c in LOSSES}
    trained_as = trained_as or precision
    t0, t1 = EPOCH0[precision], TRAINED[trained_as]
    worst0 = None if None in zero.values() else max(zero.values())
    worst1 = None if None in after.values() else max(after.values())
    ok0, ok1 = worst0 is not None and worst0 <= t0, worst1 is not None and worst1 <= t1
    out = {"epoch0": {**zero, "max": worst0, "tolerance": t0}, "trained": {**after, "max": worst1, "tolerance": t1}}
    if states is not None:
        ok0 = ok0 and states["weights_init_rel"] <= INIT_TOL
        ok1 = ok1 and states["buffers_rel"] <= BUFFERS_TOL[trained_as]
        out["epoch0"].update(weights_init_rel=states["weights_init_rel"], tolerance_weights_init=INIT_TOL)
        out["trained"].update(weights_rel=states["weights_rel"], buffers_rel=states["buffers_rel"],
                              tolerance_buffers=BUFFERS_TOL[trained_as])
    out["epoch0"]["pass"], out["trained"]["pass"] = ok0, ok1
    return {"pass": ok0 and ok1, **out}


@contextlib.contextmanager
def plant(kind: str | None, cfg: Any) -> Iterator[Any]:
    """The target run's config with `kind` planted (None: unchanged), undone on exit. Rounding: "channels_last"
    (flipped), "threads" (1 <-> 2 torch threads). Bugs: "lr" (twice the lr), "data" (minibatches in another seed's
    order), "bn" (BatchNorm running statistics never updated: momentum 0)."""
    import torch

    from initmem.engine import loop, models

    if kind is None:
        yield cfg
        return
    if kind not in PLANTS:
        raise ValueError(f"plant={kind!r} is invalid: one of {', '.join(PLANTS)} is accepted")
    threads, batches, build = torch.get_num_threads(), loop._data.batches, models.build_model
    others: dict[int, torch.Generator] = {}

    def other_order(n, b, gen, *args, **kw):  # the same sizes, another seed's permutation
        g = others.setdefault(id(gen), torch.Generator(device=gen.device).manual_seed(gen.initial_seed() + 1))
        return batches(n, b, g, *args, **kw)

    def frozen_bn(*args, **kw):
        net = build(*args, **kw)
        for m in net.modules():
            if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
                m.momentum = 0.0
        return net

    try:
        if kind == "threads":
            torch.set_num_threads(1 if threads > 1 else 2)
        elif kind == "data":
            loop._data.batches = other_order
        elif kind == "bn":
            models.build_model = frozen_bn
        yield cfg.replace(**{"channels_last": not cfg.channels_last} if kind == "channels_last" else
                          {"lr": 2 * cfg.lr} if kind == "lr" else {})
    finally:
        torch.set_num_threads(threads)
        loop._data.batches, models.build_model = batches, build


class States:
    """The networks `train` builds while `record()` is open: each member's state before training and, once asked
    (after `train` returned), after it, as float64 CPU vectors of its parameters and of its BatchNorm statistics."""

    def __init__(self) -> None:
        self.nets: list[tuple[Any, list, list[dict[str, Any]]]] = []

    @staticmethod
    def _members(pop: Any, configs: list) -> list[dict[str, Any]]:
        import torch

        from initmem.engine import members, models

        if len(configs) == 1:
            sds = [pop.model.state_dict()]
        else:
            template = models.build_model(configs[0].arch, 1.0, configs[0].width)
            sds = [members.member_state_dict(pop.model, template, j) for j in range(len(configs))]
        params = {n for n, _ in pop.model.named_parameters()}
        flat = {kind: [torch.cat([t.detach().reshape(-1).double().cpu() for k, t in sd.items() if (k in params) == (
            kind == "weights") and t.is_floating_point()]).numpy() for sd in sds] for kind in ("weights", "buffers")}
        return [{kind: flat[kind][j] for kind in flat} for j in range(len(sds))]

    def add(self, pop: Any, configs: list) -> None:
        self.nets.append((pop, configs, self._members(pop, configs)))

    def members(self) -> list[dict[str, Any]]:
        """{"weights0", "buffers0", "weights", "buffers"} per member of every recorded network, in order."""
        return [{**{k + "0": v for k, v in first.items()}, **last} for pop, configs, init in self.nets
                for first, last in zip(init, self._members(pop, configs), strict=True)]


@contextlib.contextmanager
def record() -> Iterator[States]:
    """Record the states of the networks `train` builds inside (wraps `runtime.network`, restored on exit)."""
    from initmem.engine import runtime

    states, real = States(), runtime.network

    def network(configs, dev):
        out = real(configs, dev)
        states.add(out[0], configs)
        return out

    runtime.network = network
    try:
        yield states
    finally:
        runtime.network = real


def state_differences(ref: dict[str, Any], got: dict[str, Any]) -> dict[str, float]:
    """Initial weights' relative difference (epoch 0: the same draw), and the final weights' and BatchNorm statistics'
    difference relative to how far training moved the reference's (rounding: small; a bug: order 1)."""
    def norm(x):
        return float(np.linalg.norm(x))

    return {"weights_init_rel": norm(ref["weights0"] - got["weights0"]) / max(norm(ref["weights0"]), 1e-30),
            "weights_rel": norm(ref["weights"] - got["weights"]) / max(norm(ref["weights"] - ref["weights0"]), 1e-30),
            "buffers_rel": norm(ref["buffers"] - got["buffers"]) / max(norm(ref["buffers"] - ref["buffers0"]), 1e-30)}


LAYOUTS = tuple(itertools.product((True, False), (1, 2)))  # (channels_last, threads); (True, 1): the reference


def spread(cfg: Any, plants: tuple[str, ...] = BUGS, layouts: tuple[tuple[bool, int], ...] = LAYOUTS
           ) -> dict[str, Any]:
    """The measurement behind the fp32 tolerances: `cfg` trained under each (channels_last, threads) of `layouts`
    (default {on, off} x {1, 2}; the first must be (True, 1)), the verdict of every pair (its largest differences,
    and whether it passes), then each of `plants` against the default layout at 1 thread."""
    import torch

    from initmem.engine.trainer import train

    runs = {}
    for cl, th in layouts:
        torch.set_num_threads(th)
        with record() as rec:
            runs[(cl, th)] = (train(cfg.replace(channels_last=cl), progress=False).history, rec.members()[0])
    torch.set_num_threads(1)

    def against(ref: tuple, got: tuple) -> dict[str, Any]:
        v = verdict(ref[0], got[0], "fp32", states=state_differences(ref[1], got[1]))
        return {"pass": v["pass"], "epoch0_max": v["epoch0"]["max"], "loss_rel_max": v["trained"]["max"],
                "buffers_rel": v["trained"]["buffers_rel"], "weights_rel": v["trained"]["weights_rel"]}

    pairs = {f"channels_last {a[0]}, {a[1]} thread(s) vs {b[0]}, {b[1]}": against(runs[a], runs[b])
             for a, b in itertools.combinations(runs, 2)}
    out = {"config": cfg.to_dict(), "rounding": pairs}
    for kind in plants:
        with plant(kind, cfg) as bad, record() as rec:
            out[kind] = against(runs[(True, 1)], (train(bad, progress=False).history, rec.members()[0]))
    return out


def main() -> int:
    """Print the spread of the device check's full-mode parity run on this CPU (the archive as its first argument):
    `python -m benchmarks.parity [ARCHIVE]` from the repository root."""
    from initmem.config import TrainConfig

    archive = sys.argv[1] if len(sys.argv) > 1 else "data/cifar10-jpeg.tar.gz"
    cfg = TrainConfig(data="auto", data_root=archive, device="cpu", deterministic=True, **RUN)
    print(json.dumps(spread(cfg), indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
