"""The engine's loop as one type, `Loop`: what a training step and a measurement read or change, and its steps.
Every tensor is on the run's device except, by design, the data-order generators (one minibatch order on every
device), torch's Adam/AdamW step counters (host scalars) and, on `meta` (no meta generator), the augmentation ones;
`check_device` (after building, resuming and the first step) names the first one elsewhere in a one-line
`DeviceMismatch` (tests/test_meta_device.py runs the loop on `meta`). A measured epoch is one host sync (`readings`,
named by `reading_names`), plus one where exact_tau's whole train split or full_test's whole test set is evaluated.
Restoring a checkpoint (`load_state_dict`) is all or nothing: a failure leaves every part as it was."""

import copy
import hashlib
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Self

import pandas as pd
import torch

from initmem import metrics
from initmem.config import TrainConfig
from initmem.data import splits as _data
from initmem.engine import capture, members, optim, runtime
from initmem.engine import checkpoint as _ckpt
from initmem.engine.instruments import Instruments
from initmem.errors import ConfigError
from initmem.store import record

_FINITE = ("train_loss", "val_loss", "test_loss", "weight_norm")  # a row with any of these non-finite: diverged
# What `Loop.readings` measures before the norms and instruments, by name: the epoch's running train loss and accuracy
# (from the training steps), then loss and accuracy of each evaluated split (`Loop.evals`), then the whole norm.
# The history's train_loss is the running one, so the clean train-eval subset's loss is measured but not recorded.
TRAIN_EVAL_LOSS = "train_eval_loss"
READING_COLUMNS = ("train_loss", "train_acc_running", TRAIN_EVAL_LOSS, "train_acc", "val_loss", "val_acc", "test_loss",
                   "test_acc", "weight_norm")


class DeviceMismatch(RuntimeError):
    """A tensor or generator the step uses is not on the run's device (the message names it)."""


def stream_seed(seed: int, stream: str) -> int:
    # Independent generators for independent choices: the minibatch order must not share draws with augmentation.
    return int.from_bytes(hashlib.sha256(f"initmem-train:{seed}:{stream}".encode()).digest()[:8], "little") >> 1


def generator_device(dev: torch.device) -> torch.device:
    """Where the augmentation generators live: the run's device, except the CPU for `meta` (no meta generator)."""
    return torch.device("cpu") if dev.type == "meta" else dev


def _same(a: torch.device, b: torch.device) -> bool:
    """Same device; `cuda` without an index matches any `cuda:N` (the current device, where torch puts it)."""
    return a.type == b.type and (a.index is None or b.index is None or a.index == b.index)


@dataclass(eq=False)
class Loop:
    """The loop's state and its steps (see the module docstring). Build it with `Loop.build`."""

    configs: list[TrainConfig]
    cfg: TrainConfig  # configs[0]: every setting but sigma_w and seed
    k: int  # members
    seeds: list[int]  # the members' distinct seeds, sorted; the generators are per seed
    n: int  # training images
    steps_per_epoch: int
    dev: torch.device
    splits: _data.Splits
    evals: list[tuple[torch.Tensor, torch.Tensor]]  # (x, y) of the train-eval subset, validation, test
    pop: members.PlainPopulation
    net: Callable[[torch.Tensor], torch.Tensor]  # the population's network, or its compiled form
    opt: torch.optim.Optimizer
    instruments: Instruments
    clocks: list[metrics.ClockAccumulator]
    order_gen: dict[int, torch.Generator]  # per seed, on the CPU: the same minibatch order on every device
    aug_gen: dict[int, torch.Generator]  # per seed, on generator_device(dev)
    live: torch.Tensor  # loss mask: 0 for diverged members
    alive: list[int]
    status: list[str]
    histories: list[list[dict]]
    epoch: int = 0
    step: int = 0
    wall_time: float = 0.0  # seconds of training and evaluation before this process's clock started
    t0: float = field(default_factory=time.perf_counter)  # when this process's clock started
    checked: bool = False  # check_device ran after a step (the optimiser's state exists from the first step on)
    full_eval: tuple[torch.Tensor, torch.Tensor] | None = None  # every test image (full_test), else None
    whole: capture.Capture | None = None  # with compile: the whole step, compiled (`engine.capture`)

    @classmethod
    def build(cls, configs: list[TrainConfig], dev: torch.device, splits: _data.Splits) -> Self:
        """The loop of `configs` (one point's members) on `dev`, at epoch 0, before any measurement."""
        cfg, k = configs[0], len(configs)
        evals = [(splits.train_x, splits.train_y) if splits.train_eval_idx is None else (
            splits.train_x[splits.train_eval_idx], splits.train_y[splits.train_eval_idx]),
            (splits.val_x, splits.val_y), (splits.test_x, splits.test_y)]
        pop, net = runtime.network(configs, dev)
        opt = optim.build_optimizer(cfg.optimizer, pop.model, lr=cfg.lr, members=k, momentum=cfg.momentum,
                                    weight_decay=cfg.weight_decay, betas=cfg.betas, eps=cfg.eps,
                                    amsgrad=cfg.amsgrad, ns_steps=cfg.ns_steps, ns_dtype=cfg.ns_dtype,
                                    muon_aux_lr=cfg.muon_aux_lr, capturable=cfg.compile)
        seeds = sorted({c.seed for c in configs})  # members with equal seeds draw the same minibatches
        order_gen = {s: torch.Generator().manual_seed(stream_seed(s, "order")) for s in seeds}
        aug_gen = {s: torch.Generator(device=generator_device(dev)).manual_seed(stream_seed(s, "augment"))
                   for s in seeds}
        clocks = [metrics.ClockAccumulator(c.batch_size, c.weight_decay, metrics.lr_scale(c.optimizer, c.momentum))
                  for c in configs]
        n = len(splits.train_y)
        if cfg.full_test and splits.full_test_x is None:
            raise ConfigError("TrainConfig.full_test=True is invalid with these splits: splits made by "
                              "make_splits(..., full_test=True) are accepted")
        full_eval = (splits.full_test_x, splits.full_test_y) if cfg.full_test else None
        # the CPU's eager instruments keep the committed runs' values bit for bit; a compiled step and every other
        # device take the fused ones (fewer ops, equal to rounding: engine.instruments)
        instruments, whole = Instruments(pop.weights, k, pop.layers, fused=cfg.compile or dev.type != "cpu"), None
        if cfg.compile:  # a later population of the shape trains with the compiled step's optimiser and instruments
            whole = capture.Capture(cfg, dev, pop, opt, instruments, runtime.network_key(configs, dev))
            opt, instruments = whole.opt, whole.instruments
        return cls(configs, cfg, k, seeds, n, _data.steps_per_epoch(n, cfg.batch_size, cfg.drop_last), dev, splits,
                   evals, pop, net, opt, instruments, clocks, order_gen, aug_gen, torch.ones(k, device=dev),
                   list(range(k)), ["complete"] * k, [[] for _ in range(k)], full_eval=full_eval, whole=whole)

    def columns(self) -> list[str]:
        """The history's columns, in order."""
        return [*record.HISTORY_COLUMNS, *metrics.EXTRA_CLOCKS, *(f"norm:{n}" for n in self.pop.layers),
                *self.instruments.columns(), *self.sparse_columns()]

    def exact_tau(self) -> bool:
        """Whether tau_interp needs the whole train split beside the subset (exact_tau with train_eval_size)."""
        return self.cfg.exact_tau and self.splits.train_eval_idx is not None

    def sparse_columns(self) -> tuple[str, ...]:
        """The last columns, measured at some epochs only (`whole_train`, `full_test`), NaN at the others."""
        return (*((metrics.WHOLE_TRAIN_COLUMN,) if self.exact_tau() else ()),
                *(metrics.FULL_TEST_COLUMNS if self.full_eval is not None else ()))

    def elapsed(self) -> float:
        """Seconds of training and evaluation so far (this process's and those before it)."""
        return self.wall_time + time.perf_counter() - self.t0

    def _tensors(self) -> Iterator[tuple[str, torch.Tensor]]:
        yield from ((f"data {name}", t) for name in ("train_x", "train_y", "val_x", "val_y", "test_x", "test_y",
                                                     "train_eval_idx", "full_test_x", "full_test_y")
                    if (t := getattr(self.splits, name)) is not None)
        for i, (x, y) in enumerate(self.evals):
            yield f"evaluation split {i} images", x
            yield f"evaluation split {i} labels", y
        yield from ((f"parameter {n}", t) for n, t in self.pop.model.named_parameters())
        yield from ((f"buffer {n}", t) for n, t in self.pop.model.named_buffers())
        names = {id(p): n for n, p in self.pop.model.named_parameters()}
        for p, state in self.opt.state.items():
            for key, t in state.items():
                if isinstance(t, torch.Tensor) and not (key == "step" and t.ndim == 0 and t.device.type == "cpu"):
                    yield f"optimizer state {names.get(id(p), '?')}.{key}", t  # torch's step counter: a host scalar
        for key in ("w0", "prev"):
            yield from ((f"instrument {key}:{n}", t) for n, t in zip(self.pop.layers, getattr(self.instruments, key),
                                                                  strict=True))
        yield "instrument step_sum", self.instruments.step_sum
        yield "instrument theta", self.instruments.theta
        for j, c in enumerate(self.clocks):  # Python floats by design: a tensor here would be a bug
            yield from ((f"clock {j} {key}", t) for key, t in vars(c).items() if isinstance(t, torch.Tensor))
        yield "live mask", self.live

    def check_device(self) -> None:
        """DeviceMismatch naming the first tensor or generator not where it belongs (metadata only: no host sync)."""
        gens = [(f"{kind} generator of seed {seed}", g, want) for kind, gs, want in (
            ("data-order", self.order_gen, torch.device("cpu")),
            ("augmentation", self.aug_gen, generator_device(self.dev))) for seed, g in gs.items()]
        for what, t, want in [*((what, t, self.dev) for what, t in self._tensors()), *gens]:
            if not _same(t.device, want):
                raise DeviceMismatch(f"{what} is on {t.device}, not on {want}: every tensor the training step uses "
                                     f"must be made on the run's device {self.dev} (a factory without device=, or a "
                                     "module built elsewhere)")

    def _batch(self, idxs: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, torch.Tensor]:
        """The step's input (augmented per seed) and labels ([b] or [b, K] when the seeds differ)."""
        cfg, seeds = self.cfg, self.seeds
        xs = {s: self.splits.train_x[idx] for s, idx in zip(seeds, idxs, strict=True)}
        if cfg.augment:  # each seed's own stream
            xs = {s: _data.augment_batch(x, self.aug_gen[s]) for s, x in xs.items()}
        xb = self.pop.inputs([xs[c.seed] for c in self.configs] if len(seeds) > 1 else [xs[seeds[0]]])
        y = self.splits.train_y
        yb = y[idxs[0]] if len(seeds) == 1 else torch.stack([y[idxs[seeds.index(c.seed)]] for c in self.configs], 1)
        if cfg.channels_last:
            xb = xb.contiguous(memory_format=torch.channels_last)
        return xb, yb

    def step_begin(self) -> None:
        """CUDA graphs reuse their output buffers: a new step must say so, or the last outputs would be overwritten."""
        if self.cfg.compile and self.dev.type == "cuda" and hasattr(torch.compiler, "cudagraph_mark_step_begin"):
            torch.compiler.cudagraph_mark_step_begin()

    def train_step(self, idxs: tuple[torch.Tensor, ...], sums: torch.Tensor) -> float:
        """One optimiser step on `idxs` (an index tensor per seed), adding [loss * batch, correct] to `sums`; its lr."""
        cfg, pop, per_epoch = self.cfg, self.pop, self.steps_per_epoch
        total = per_epoch * cfg.epochs
        factor = optim.lr_factor(cfg.schedule, self.step, total, min(total, round(cfg.warmup_epochs * per_epoch)),
                                 cfg.step_milestones, cfg.step_gamma)
        optim.set_lr_factor(self.opt, factor)
        lr = cfg.lr * factor  # the clocks run on the main lr (muon's aux AdamW lr is not a clock)
        x, y = self._batch(idxs)
        self.step_begin()
        # With compile, the whole step is one compiled graph, but the partial last batch (drop_last false) runs eagerly
        # (`capture.Capture`). Not padded and masked: in training mode BatchNorm's batch statistics would include the
        # padding rows, so no mask gives the unpadded batch's gradients.
        if self.whole is not None:
            losses, out = self.whole(x, y, self.live)
        else:
            self.opt.zero_grad(set_to_none=True)
            losses, out = capture.whole_step(cfg, self.dev, pop, self.opt, self.instruments, x, y, self.live)
            self.instruments.steps += 1
        sums[:, 0] += losses * len(out)
        sums[:, 1] += pop.correct(out, y)
        for j in self.alive:
            self.clocks[j].update(lr)
        self.step += 1
        return lr

    def run_epoch(self, on_step: Callable[[int], None] | None = None) -> tuple[torch.Tensor, float]:
        """One epoch of steps: the members' [loss * batch, correct] sums and its last lr (`check_device` once)."""
        self.pop.model.train()
        sums = torch.zeros(self.k, 2, dtype=torch.float64, device=self.dev)
        lr = math.nan
        batches = (_data.batches(self.n, self.cfg.batch_size, self.order_gen[s], self.cfg.drop_last,
                                 device=self.dev) for s in self.seeds)
        for idxs in zip(*batches, strict=True):
            if on_step is not None:
                on_step(self.step)
            lr = self.train_step(idxs, sums)
            if not self.checked:
                self.check_device()
                self.checked = True
        self.epoch += 1
        return sums, lr

    def _evaluate(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """[K, 2] float64 on the device: each member's mean loss and accuracy on (x, y), in eval_batch_size chunks
        (the model in eval mode, under no_grad: the caller's)."""
        cfg, pop = self.cfg, self.pop
        total = torch.zeros(self.k, 2, dtype=torch.float64, device=self.dev)
        for i in range(0, len(x), cfg.eval_batch_size):
            xb, yb = x[i:i + cfg.eval_batch_size], y[i:i + cfg.eval_batch_size]
            # With compile, the tail is padded to the compiled shape: in eval mode the rows are independent
            # (BatchNorm uses its running statistics), so the padding changes no real row's output.
            if cfg.compile and len(xb) < cfg.eval_batch_size:
                xb = torch.cat([xb, xb.new_zeros(cfg.eval_batch_size - len(xb), *xb.shape[1:])])
            if cfg.channels_last:
                xb = xb.contiguous(memory_format=torch.channels_last)
            self.step_begin()
            with runtime.autocast(cfg, self.dev):
                out = self.net(xb)[:len(yb)].float()  # evaluation shares one 3-channel input across members
            total += torch.stack([pop.losses(out, yb, "sum"), pop.correct(out, yb)], 1).double()
        return total / len(x)

    def reading_names(self) -> tuple[str, ...]:
        """The columns of `readings`, in order: the epoch's running train loss and accuracy, each evaluated split's
        loss and accuracy (the train-eval subset's loss, `TRAIN_EVAL_LOSS`, is no history column), the norms and the
        instruments."""
        return (*READING_COLUMNS, *(f"norm:{n}" for n in self.pop.layers), *self.instruments.columns())

    @torch.no_grad()
    def readings(self, sums: torch.Tensor | None) -> torch.Tensor:
        """[K, values] float64 on the device: every measured number of the members' rows but the clocks, in
        `reading_names` order."""
        pop, k = self.pop, self.k
        pop.model.eval()
        parts = [torch.full((k, 2), math.nan, dtype=torch.float64, device=self.dev) if sums is None else sums / self.n]
        parts += [self._evaluate(x, y) for x, y in self.evals]
        norms = torch.stack([members.member_view(w, k).norm(dim=1) for w in pop.weights], 1).double()  # [K, L]
        parts += [norms.square().sum(1, keepdim=True).sqrt(), norms, self.instruments.read()]
        return torch.cat(parts, 1)

    def measure(self, sums: torch.Tensor | None, lr: float) -> list[dict]:
        """Every member's history row, read from the device in one sync (with full_test, a second where a selection
        rule can pick a member's row: `full_test`)."""
        values = self.readings(sums).tolist()  # the one host sync of a measured epoch
        wall = self.elapsed()  # after the sync: on a GPU the queued work has run only now
        names, columns = self.reading_names(), self.columns()
        rows = []
        for i, v in enumerate(values):
            read = dict(zip(names, v, strict=True))
            del read[TRAIN_EVAL_LOSS]
            row = {"epoch": self.epoch, "step": self.step, "lr": lr, **read, **self.clocks[i].totals(),
                   "wall_time": wall, **dict.fromkeys(self.sparse_columns(), math.nan)}
            rows.append({c: row[c] for c in columns})  # the history's column order; a missing reading fails here
        if self.whole_train(rows) | self.full_test(rows):  # both run: whole_train first, selectable reads it
            wall = self.elapsed()  # the whole test set's evaluation counts in this epoch's time
            for row in rows:
                row["wall_time"] = wall
        return rows

    @torch.no_grad()
    def whole_train(self, rows: list[dict]) -> bool:
        """With exact_tau, each alive member's accuracy on the whole train split in its row while the subset's is at
        least `metrics.subset_bound` and the whole split has not reached the threshold yet: where the whole split
        can have interpolated, it is measured, so tau_interp is the whole split's. Reads no generator (see
        `full_test`). Whether it evaluated."""
        if not self.exact_tau():
            return False
        bound = metrics.subset_bound(self.n, len(self.splits.train_eval_idx))
        pick = [j for j in self.alive if rows[j]["train_acc"] >= bound - 1e-12 and not any(
            r[metrics.WHOLE_TRAIN_COLUMN] >= metrics.THRESHOLD for r in self.histories[j])]  # NaN: not reached
        if pick:
            self.pop.model.eval()
            values = self._evaluate(self.splits.train_x, self.splits.train_y).tolist()
            for j in pick:
                rows[j][metrics.WHOLE_TRAIN_COLUMN] = values[j][1]
        return bool(pick)

    @torch.no_grad()
    def full_test(self, rows: list[dict]) -> bool:
        """With full_test, each alive member's whole-test-set loss and accuracy in its row where a selection rule can
        pick it (`metrics.selectable` over its history and this row; the last epoch, or a non-finite row, is final).
        Reads no generator and leaves the model in eval mode: training goes on exactly as without it. Whether it
        evaluated."""
        if self.full_eval is None:
            return False
        pick = [j for j in self.alive if metrics.selectable(pd.DataFrame([*self.histories[j], rows[j]]), final=(
            self.epoch >= self.cfg.epochs or not all(math.isfinite(rows[j][c]) for c in _FINITE)))[-1]]
        if pick:
            self.pop.model.eval()
            values = self._evaluate(*self.full_eval).tolist()  # a second host sync, at the picked epochs only
            for j in pick:
                rows[j].update(zip(metrics.FULL_TEST_COLUMNS, values[j], strict=True))
        return bool(pick)

    def record(self, rows: list[dict]) -> list[int]:
        """Append each alive member's row (those members are returned); a non-finite row silences its member."""
        recorded = list(self.alive)
        for j in recorded:
            self.histories[j].append(rows[j])
            if not all(math.isfinite(rows[j][c]) for c in _FINITE):
                self.status[j] = "diverged"
                self.alive.remove(j)
                self.live[j] = 0.0
                self.pop.silence(self.opt, j)
        return recorded

    def state_dict(self) -> dict:
        """What a checkpoint holds of the loop (tensors and plain values; `torch.save`-able)."""
        return {"model": self.pop.model.state_dict(), "optimizer": self.opt.state_dict(),
                "order_gen": {s: g.get_state() for s, g in self.order_gen.items()},
                "aug_gen": {s: g.get_state() for s, g in self.aug_gen.items()},
                "clocks": [c.state_dict() for c in self.clocks], "instruments": self.instruments.state_dict(),
                "live": self.live.clone(), "alive": self.alive, "status": self.status, "histories": self.histories,
                "epoch": self.epoch, "step": self.step, "wall_time": self.elapsed()}

    def load_state_dict(self, state: dict, rng: dict | None = None) -> None:
        """Apply `state` (a `state_dict`) and, with `rng`, the global generators (`checkpoint.rng_state`), all or
        nothing: when any part fails, every part is rolled back exactly and the error propagates."""
        before, clock, global_rng = copy.deepcopy(self.state_dict()), (self.wall_time, self.t0), _ckpt.rng_state()
        try:
            self._apply(state)
            if rng is not None:
                _ckpt.set_rng_state(rng)
        except BaseException:
            self._apply(before)
            self.wall_time, self.t0 = clock
            _ckpt.set_rng_state(global_rng)
            raise

    def _apply(self, s: dict) -> None:
        self.pop.model.load_state_dict(s["model"])
        self.opt.load_state_dict(s["optimizer"])
        for seed in self.seeds:
            self.order_gen[seed].set_state(s["order_gen"][seed])
            self.aug_gen[seed].set_state(s["aug_gen"][seed])
        for c, cs in zip(self.clocks, s["clocks"], strict=True):
            c.load_state_dict(cs)
        self.instruments.load_state_dict(s["instruments"])
        self.live.copy_(s["live"])
        self.alive, self.status, self.histories = (copy.deepcopy(list(s[key])) for key in
                                                   ("alive", "status", "histories"))
        self.epoch, self.step, self.wall_time = int(s["epoch"]), int(s["step"]), float(s["wall_time"])
        self.t0 = time.perf_counter()
        if self.whole is not None:
            self.whole.warm = False  # the restored optimiser state: converted by an eager step
