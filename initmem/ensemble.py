"""Batched sigma_w ensembles: K runs that differ only in sigma_w and seed, trained as one computation.

`train_ensemble(configs)` returns what `[train(c) for c in configs]` returns (same histories to float rounding, same
summaries, same run folders), in one process and one set of kernels per step.

Design: **grouped convolutions.** The K members become one "wide" network whose channels are K groups: every conv
has groups=K, every BatchNorm has K*C channels (so its batch statistics and running stats are per member by
construction), ReLU, max-pools, global pools and residual adds are channel-wise, option-A shortcuts zero-pad each
group, and the head is a batched matmul over a [K, 10, C] weight. The wide network is made by module surgery on
member 0's network, so every layer keeps its module name and the `norm:<layer>` history columns match `train()`'s.
The loss is the sum of the members' mean cross-entropies, so each member's gradient is exactly its separate run's.
Input: member k sees its own minibatch (its seed fixes its data order and augmentation); when every member has the
same seed (the usual sweep) the stem conv takes the one shared 3-channel batch with groups=1, which is the same
arithmetic without copying the input K times; evaluation always does that.
Why this and not the alternatives: `torch.func.vmap` over stacked parameters lowers conv to the same grouped conv
but cannot update BatchNorm running stats in place; a Python loop over K models batches nothing, and running each
member's convs on channel slices inside the wide network measured slower than either. Grouped convs give one kernel
launch per layer for all members (the GPU win; not measured here). On CPU (measured, one core, ResNet-9 width 0.25,
K=3) oneDNN's grouped convs are 4-25 % slower than the same convs run separately while BatchNorm, pools and the
optimiser are as fast or faster batched: the step is about even with K separate steps (0.94-1.00x) once
`tune_malloc` stops glibc from page-faulting the K-times-larger activations in every step (0.74x without it).
See docs/performance.md.

Optimisers: SGD, Adam and AdamW are elementwise, so torch's optimisers on the grouped tensors give each member its
separate update; Muon orthogonalises each member's own [out, in*k*k] matrix (`newton_schulz_batched`, bitwise equal
to `optim.newton_schulz` per matrix on CPU) with the lr scale of the member's shape. Hyper-parameters are therefore
shared, which is why members may differ only in sigma_w and seed.

Checkpoints (`checkpoint_every`): the whole ensemble (grouped weights, optimiser state, every seed's generators,
clocks, histories, which members diverged) is saved atomically, as `train()` saves a run, under
`<out_dir>/<section>/ensembles/<ensemble id>/checkpoints/`; the id hashes the members' run ids, so only the same
member set resumes it (a member set that changed starts afresh: its runs are trained from epoch 0, which is exactly
what they would have been). The folder is deleted once the members' run.json files are written.

Divergence: members share no arithmetic (every op is per channel group, and the summed loss's gradient is 1 for each
member), so a NaN in one member never reaches another. At the end of an epoch a member whose row is not finite is
recorded as diverged at that epoch (its history stops there, as in `train()`), and its parameters, BatchNorm stats
and optimiser state are zeroed and its loss masked out, so it stays finite and inert while the others train on.
"""

from __future__ import annotations

import contextlib
import copy
import ctypes
import hashlib
import math
import os
import platform
import time
from pathlib import Path

import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn

from initmem import checkpoint as _ckpt
from initmem import data as _data
from initmem import locks as _locks
from initmem import metrics, models, optim
from initmem import results as _results
from initmem import train as _train
from initmem.errors import CheckpointError, ConfigError, ResultsError
from initmem.provenance import provenance
from initmem.train import RunResult, TrainConfig

MEMBER_FIELDS = ("sigma_w", "seed")  # the only fields members may differ in
ENSEMBLES = "ensembles"  # <out_dir>/<section>/ensembles/<ensemble id>/checkpoints/: an unfinished ensemble
_CHANNELWISE = (nn.MaxPool2d, nn.AdaptiveMaxPool2d, nn.AdaptiveAvgPool2d, nn.Identity, nn.ReLU)


# ---------------------------------------------------------------------------------------------------- grouped layers
class StemConv(nn.Conv2d):
    """The first conv of K members, weight [K*c_out, 3, k, k]. A 3-channel input (shared by all members) runs with
    groups=1, a 3K-channel input (member k's images in channels 3k..3k+2) with groups=K: the same weight either way."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        groups = x.shape[1] // self.weight.shape[1]
        return F.conv2d(x, self.weight, None, self.stride, self.padding, self.dilation, groups)


class GroupedHead(nn.Module):
    """K linear heads: [b, K*C] -> [b, K, out] with weight [K, out, C] and bias [K, out]."""

    def __init__(self, members: int, in_features: int, out_features: int):
        super().__init__()
        self.members = members
        self.weight = nn.Parameter(torch.empty(members, out_features, in_features))
        self.bias = nn.Parameter(torch.empty(members, out_features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.einsum("bkc,koc->bko", x.reshape(len(x), self.members, -1), self.weight) + self.bias


class GroupedShortcutA(nn.Module):
    """Option-A shortcut per member: subsample, zero-pad each member's channel group from c_in to c_out."""

    def __init__(self, members: int, stride: int, pad_lo: int, pad_hi: int):
        super().__init__()
        self.members, self.stride, self.pad_lo, self.pad_hi = members, stride, pad_lo, pad_hi

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x[:, :, ::self.stride, ::self.stride]
        b, _, h, w = x.shape
        x = F.pad(x.reshape(b, self.members, -1, h, w), (0, 0, 0, 0, self.pad_lo, self.pad_hi))
        return x.reshape(b, -1, h, w)


def _grouped_leaf(m: nn.Module, k: int, arch: str, name: str, stem: bool) -> nn.Module:
    if isinstance(m, nn.Conv2d):
        if m.groups != 1 or m.bias is not None:
            raise ConfigError(f"arch={arch!r} is not supported by the ensemble engine: layer {name} is a grouped or "
                              "biased conv; train its runs separately")
        cls = StemConv if stem else nn.Conv2d
        return torch.nn.utils.skip_init(cls, m.in_channels * k, m.out_channels * k, m.kernel_size, m.stride,
                                        m.padding, m.dilation, groups=k, bias=False)
    if isinstance(m, nn.BatchNorm2d):
        return torch.nn.utils.skip_init(nn.BatchNorm2d, m.num_features * k, m.eps, m.momentum, m.affine,
                                        m.track_running_stats)
    if isinstance(m, nn.Linear) and name == "head":
        return GroupedHead(k, m.in_features, m.out_features)
    if isinstance(m, models.ShortcutA):
        return GroupedShortcutA(k, m.stride, m.pad_lo, m.pad_hi)
    if isinstance(m, _CHANNELWISE):
        return copy.deepcopy(m)
    raise ConfigError(f"arch={arch!r} is not supported by the ensemble engine: layer {name} "
                      f"({type(m).__name__}) has no grouped form; train its runs separately")


@torch.no_grad()
def build_grouped(members: list[nn.Module], arch: str = "?") -> nn.Module:
    """One wide network holding `members` (same architecture, any weights) as channel groups, with their weights,
    biases and BatchNorm buffers copied in. Module names are the members', so `norm:<layer>` columns match."""
    k, template = len(members), members[0]
    grouped = copy.deepcopy(template)  # keeps the container classes, so their forward() runs unchanged
    first = models.layer_names(template)[0]
    for name, m in template.named_modules():
        if name and not list(m.children()):
            parent, _, child = name.rpartition(".")
            setattr(grouped.get_submodule(parent), child, _grouped_leaf(m, k, arch, name, stem=name == first))
    sources = [dict(m.state_dict()) for m in members]
    for key, target in grouped.state_dict().items():
        parts = [s[key] for s in sources]
        if target.numel() == k * parts[0].numel():
            target.copy_(torch.stack(parts).reshape(target.shape))
        else:  # scalar buffers (BatchNorm's num_batches_tracked): identical across members
            target.copy_(parts[0])
    return grouped


def member_state_dict(grouped: nn.Module, template: nn.Module, member: int) -> dict[str, torch.Tensor]:
    """One member's weights and buffers from `grouped`, shaped as the separate model `template`'s state_dict (so
    `models.build_model(...).load_state_dict(...)` gives that member as a plain network)."""
    shapes = {key: t.shape for key, t in template.state_dict().items()}
    return {key: (t.reshape(-1, *shapes[key])[member] if t.ndim else t).clone()
            for key, t in grouped.state_dict().items()}

# ---------------------------------------------------------------------------------------------------- Muon
def newton_schulz_batched(G: torch.Tensor, steps: int = 5, eps: float = 1e-7) -> torch.Tensor:
    """`optim.newton_schulz` on each matrix of a [K, m, n] stack (baddbmm mirrors addmm: bitwise equal on CPU)."""
    if G.ndim != 3:
        raise ConfigError(f"newton_schulz_batched got a tensor of shape {tuple(G.shape)}: [K, m, n] is accepted")
    a, b, c = optim.NS_COEFFICIENTS
    X = G.bfloat16()
    tall = G.size(1) > G.size(2)
    if tall:
        X = X.mT
    X = X.div(X.norm(dim=(1, 2), keepdim=True).clamp(min=eps))
    for _ in range(steps):
        A = X @ X.mT
        B = torch.baddbmm(A, A, A, beta=b, alpha=c)
        X = torch.baddbmm(X, B, X, beta=a)
    return X.mT if tall else X


class EnsembleMuon(optim.MuonWithAuxAdam):
    """`MuonWithAuxAdam` over grouped parameters: each Muon parameter [K*out, ...] is K members' matrices, each
    orthogonalised on its own, with the lr scale of one member's shape. The AdamW part is elementwise already."""

    def __init__(self, members: int, param_groups: list[dict]):
        self.members = members
        super().__init__(param_groups)

    def _muon_step(self, group: dict) -> None:
        lr, wd, beta, k = group["lr"], group["weight_decay"], group["momentum"], self.members
        for p in group["params"]:
            if p.grad is None:
                continue
            state = self.state[p]
            if "momentum_buffer" not in state:
                state["momentum_buffer"] = torch.zeros_like(p.grad)
            buf = state["momentum_buffer"]
            buf.lerp_(p.grad, 1 - beta)  # as optim.muon_update, with one orthogonalisation per member
            u = p.grad.lerp(buf, beta) if group["nesterov"] else buf
            u = newton_schulz_batched(u.reshape(k, len(u) // k, -1), group["ns_steps"]).reshape(p.shape)
            p.mul_(1 - lr * wd)
            p.add_(u.to(p.dtype), alpha=-lr * optim._muon_lr_scale((len(p) // k, *p.shape[1:])))


def ensemble_optimizer(config: TrainConfig, grouped: nn.Module, members: int) -> torch.optim.Optimizer:
    """`config`'s optimiser over a grouped model, as `train` builds it for one member (Muon: `EnsembleMuon`)."""
    opt = optim.build_optimizer(config.optimizer, grouped, lr=config.lr, momentum=config.momentum,
                                weight_decay=config.weight_decay, betas=config.betas, eps=config.eps,
                                ns_steps=config.ns_steps, muon_aux_lr=config.muon_aux_lr)
    return EnsembleMuon(members, opt.param_groups) if config.optimizer == "muon" else opt


# ---------------------------------------------------------------------------------------------------- validation
def check_members(configs: list[TrainConfig]) -> list[TrainConfig]:
    """ConfigError unless `configs` is a non-empty list of distinct TrainConfigs that differ only in sigma_w and
    seed."""
    if isinstance(configs, TrainConfig) or not isinstance(configs, (list, tuple)) or not configs or not all(
            isinstance(c, TrainConfig) for c in configs):
        raise ConfigError(f"configs={type(configs).__name__} is invalid: a non-empty list of TrainConfig is accepted")
    base = {k: v for k, v in configs[0].to_dict().items() if k not in MEMBER_FIELDS}
    for c in configs[1:]:
        for key, v in c.to_dict().items():
            if key not in MEMBER_FIELDS and v != base[key]:
                raise ConfigError(f"TrainConfig.{key}={v!r} differs from the first member's {base[key]!r}: ensemble "
                                  f"members may differ only in {' and '.join(MEMBER_FIELDS)}")
    ids = [_results.run_id(c) for c in configs]
    if len(set(ids)) != len(ids):
        raise ConfigError("configs repeat a (sigma_w, seed) pair: distinct members are accepted")
    return list(configs)


def ensemble_id(configs: list[TrainConfig]) -> str:
    """12 hex digits naming this member set (order-free): the folder its checkpoints live in."""
    ids = sorted(_results.run_id(c) for c in configs)
    return hashlib.sha256(" ".join(ids).encode()).hexdigest()[:12]


def ensemble_dir(out_dir: str | Path, section: str, configs: list[TrainConfig]) -> Path:
    return Path(out_dir) / section / ENSEMBLES / ensemble_id(configs)


# ---------------------------------------------------------------------------------------------------- CPU memory
_MALLOC_TUNED: list[bool] = []


def tune_malloc() -> bool:
    """Make glibc keep freed memory for reuse: every block from the heap (M_MMAP_MAX=0), no trimming below 2 GiB
    (M_TRIM_THRESHOLD). Why: glibc serves a block above its mmap threshold (at most 32 MiB) by a fresh mmap and
    unmaps it on free, so each large activation of each step is page-faulted in anew. A K-member ensemble's
    activations are K times larger and cross that size at width 0.25 already. Measured on one core: ReLU of 48 MiB
    25.5 ms by default, 4.4 ms tuned; ResNet-9 b=128 K=3 ensemble step -14% at width 0.25, -24% at width 0.5 (a
    single run at width 0.5: -10%). The price: the process keeps its peak memory. Process-wide and once; a no-op
    off glibc and under `INITMEM_MALLOC=default`. Returns whether the setting is in force."""
    if not _MALLOC_TUNED:
        ok = False
        if os.environ.get("INITMEM_MALLOC", "") != "default" and platform.libc_ver()[0] == "glibc":
            try:
                libc = ctypes.CDLL("libc.so.6")
                ok = libc.mallopt(-4, 0) == 1 and libc.mallopt(-1, 2**31 - 1) == 1  # M_MMAP_MAX, M_TRIM_THRESHOLD
            except (OSError, AttributeError):
                ok = False
        _MALLOC_TUNED.append(ok)
    return _MALLOC_TUNED[0]


# ---------------------------------------------------------------------------------------------------- training
def _member_losses(out: torch.Tensor, y: torch.Tensor, reduction: str) -> torch.Tensor:
    """Per-member cross-entropy of logits [b, K, C] against labels [b, K] (or [b]): [K] mean or sum."""
    y = y if y.ndim == 2 else y[:, None].expand(-1, out.shape[1])
    losses = F.cross_entropy(out.transpose(1, 2), y, reduction="none")  # [b, K]
    return losses.mean(0) if reduction == "mean" else losses.sum(0)


@torch.no_grad()
def _evaluate(net: nn.Module, x: torch.Tensor, y: torch.Tensor, config: TrainConfig, autocast) -> torch.Tensor:
    """[K, 2] = per-member [mean loss, accuracy], float64 on the device (no host sync), in eval mode."""
    net.eval()
    total = None
    for i in range(0, len(x), config.eval_batch_size):
        xb, yb = x[i : i + config.eval_batch_size], y[i : i + config.eval_batch_size]
        if config.channels_last:
            xb = xb.contiguous(memory_format=torch.channels_last)
        with autocast():
            out = net(xb).float()  # shared 3-channel input: the stem runs with groups=1
        part = torch.stack([_member_losses(out, yb, "sum"), (out.argmax(2) == yb[:, None]).sum(0)], 1).double()
        total = part if total is None else total + part
    return total / len(x)


def _layer_norms(layers: list[nn.Module], k: int) -> torch.Tensor:
    """[K, L] per-member Frobenius norm of every conv/linear weight, in `models.layer_names` order."""
    return torch.stack([torch.linalg.vector_norm(m.weight.reshape(k, -1), dim=1) for m in layers], 1)


@torch.no_grad()
def _silence(model: nn.Module, opt: torch.optim.Optimizer, k: int, member: int) -> None:
    """Zero member's slice of every parameter, BatchNorm stat and optimiser state: finite, zero gradient, inert."""
    for key, t in model.state_dict().items():
        if t.ndim:
            t.unflatten(0, (k, -1))[member] = 1.0 if key.endswith("running_var") else 0.0
    for p, state in opt.state.items():
        for v in state.values():
            if isinstance(v, torch.Tensor) and v.shape == p.shape:
                v.unflatten(0, (k, -1))[member] = 0.0


def train_ensemble(configs: list[TrainConfig], *, out_dir: str | Path | None = None, section: str = "adhoc",
                   progress: bool = True, locked: bool = False) -> list[RunResult]:
    """Train `configs` (differing only in sigma_w and seed) as one batched ensemble; return one RunResult per
    config, in order, equal to what `train(config)` returns up to float rounding. With `out_dir`, every member's
    folder `out_dir/section/run_id/` is locked first (ResultsError naming a run another process holds) and written
    through `results.write_run` as `train` writes it (a stale checkpoints folder is cleared). `wall_time` is the
    ensemble's (all members together); provenance gains `ensemble_members` = K. With `checkpoint_every` the
    ensemble is checkpointed and resumed as one (see the module docstring). `locked=True`: the caller already
    holds every member's run lock (the sweep runner does). A config combination the engine cannot do raises
    ConfigError before anything is trained, so a caller can fall back to `train`."""
    configs = check_members(configs)
    if not isinstance(section, str) or not section or section != Path(section).name or section.startswith("."):
        raise ConfigError(f"section={section!r} is invalid: a plain folder name is accepted")
    _train._resolve_device(configs[0])  # a bad device fails before anything is created on disk
    if out_dir is None:
        return _train_ensemble(configs, None, section, progress)
    _results.check_writable(Path(out_dir) / section)
    if locked:
        return _train_ensemble(configs, out_dir, section, progress)
    with contextlib.ExitStack() as held:
        for c in configs:
            folder = _results.run_dir(out_dir, section, c)
            lock = _locks.try_lock(folder)
            if lock is None:
                raise ResultsError(f"run folder {str(folder)!r} is locked by {_locks.holder(folder)}: that process "
                                   "is training this run; train the ensemble without it (or wait)")
            held.enter_context(lock)
        return _train_ensemble(configs, out_dir, section, progress)


def _train_ensemble(configs: list[TrainConfig], out_dir: str | Path | None, section: str,
                    progress: bool) -> list[RunResult]:
    cfg, k = configs[0], len(configs)
    dev = _train._resolve_device(cfg)
    if dev.type == "cpu":
        tune_malloc()
    members = []
    for c in configs:  # each member initialised exactly as train() initialises it
        torch.manual_seed(c.seed)
        members.append(models.build_model(c.arch, c.sigma_w, c.width))
    model = build_grouped(members, cfg.arch).to(dev)
    layers = models.layer_names(members[0])
    del members
    rids, started_at, prov = [_results.run_id(c) for c in configs], _train._utcnow(), provenance(str(dev))

    synthetic_sizes = (cfg.n_val + (cfg.n_train or 2000), cfg.n_test or 500)
    data = _data.load_cifar10(cfg.data_root, cfg.data, progress=progress, synthetic_sizes=synthetic_sizes)
    splits = _data.make_splits(data, cfg.n_val, cfg.n_train, cfg.n_test, cfg.split_seed, dev, cfg.train_eval_size)
    prov.update(data_source=data.source, data_hash=data.content_hash, ensemble_members=k)
    train_eval = (splits.train_x, splits.train_y) if splits.train_eval_idx is None else (
        splits.train_x[splits.train_eval_idx], splits.train_y[splits.train_eval_idx])

    if cfg.channels_last:
        model = model.to(memory_format=torch.channels_last)
    opt = ensemble_optimizer(cfg, model, k)
    net = torch.compile(model) if cfg.compile else model
    amp = cfg.precision == "bf16"

    def autocast():
        return torch.autocast("cuda", dtype=torch.bfloat16) if amp else contextlib.nullcontext()

    # one order/augmentation generator per distinct seed: members with equal seeds draw the same minibatches
    seeds = sorted({c.seed for c in configs})
    order_gen = {s: torch.Generator().manual_seed(_train._stream_seed(s, "order")) for s in seeds}
    aug_gen = {s: torch.Generator(dev).manual_seed(_train._stream_seed(s, "augment")) for s in seeds}
    clocks = [metrics.ClockAccumulator(c.batch_size, c.weight_decay) for c in configs]
    weighted = [model.get_submodule(name) for name in layers]
    columns = [f"norm:{name}" for name in layers]
    n = len(splits.train_y)
    if cfg.batch_size > n:  # as train(): TrainConfig cannot know the data size
        raise ConfigError(f"TrainConfig.batch_size={cfg.batch_size!r} is invalid: at most the training split's size "
                          f"{n} (n_train) is accepted")
    per_epoch = _data.steps_per_epoch(n, cfg.batch_size)
    total_steps = per_epoch * cfg.epochs
    warmup_steps = min(total_steps, round(cfg.warmup_epochs * per_epoch))
    live = torch.ones(k, device=dev)  # loss mask: 0 for diverged members
    alive, status = list(range(k)), ["complete"] * k
    histories: list[list[dict]] = [[] for _ in range(k)]
    epoch = step = 0
    wall0 = 0.0  # seconds trained before this process took over (a resume)
    folder = None if out_dir is None else _ckpt.folder_of(ensemble_dir(out_dir, section, configs))
    eid, shared = ensemble_id(configs), {key: v for key, v in cfg.to_dict().items()
                                         if key not in MEMBER_FIELDS and key not in _train.RUN_ID_EXCLUDE}

    def state() -> dict:
        return {"model": model.state_dict(), "optimizer": opt.state_dict(),
                "order_gen": {s: g.get_state() for s, g in order_gen.items()},
                "aug_gen": {s: g.get_state() for s, g in aug_gen.items()},
                "clocks": [c.state_dict() for c in clocks], "histories": histories, "alive": alive,
                "status": status, "live": live.clone(), "epoch": epoch, "step": step,
                "wall_time": wall0 + time.perf_counter() - t0}

    def restore(payload: dict) -> None:
        nonlocal epoch, step, wall0, histories, alive, status, started_at
        if payload.get("ensemble_id") != eid or payload.get("run_ids") != rids or payload.get("config") != shared:
            raise CheckpointError(f"checkpoint of ensemble {payload.get('ensemble_id')!r} does not belong to "
                                  f"ensemble {eid} (members or config differ)")
        st = payload["state"]
        fresh, rng = copy.deepcopy((model.state_dict(), opt.state_dict())), _ckpt.rng_state()
        try:
            model.load_state_dict(st["model"])
            opt.load_state_dict(st["optimizer"])
            for s in seeds:
                order_gen[s].set_state(st["order_gen"][s])
                aug_gen[s].set_state(st["aug_gen"][s])
            for c, cs in zip(clocks, st["clocks"], strict=True):
                c.load_state_dict(cs)
            live.copy_(st["live"])
            _ckpt.set_rng_state(payload["rng"])
        except Exception as exc:  # noqa: BLE001 - shapes, devices, missing keys: this checkpoint is unusable here
            model.load_state_dict(fresh[0])
            opt.load_state_dict(fresh[1])
            _ckpt.set_rng_state(rng)
            raise CheckpointError(f"checkpoint of epoch {payload.get('epoch')!r} cannot be restored: "
                                  f"{type(exc).__name__}: {exc}") from None
        histories, alive, status = [list(h) for h in st["histories"]], list(st["alive"]), list(st["status"])
        epoch, step, wall0 = int(st["epoch"]), int(st["step"]), float(st["wall_time"])
        started_at = str(payload.get("started_at") or started_at)

    def measure(train_sums: torch.Tensor | None, lr: float) -> list[dict]:
        """Every member's epoch row, read from the device in one sync."""
        norms = _layer_norms(weighted, k).double()
        nan = torch.full((k, 2), math.nan, device=dev, dtype=torch.float64)
        parts = [nan if train_sums is None else train_sums / n, *(_evaluate(net, x, y, cfg, autocast) for x, y in (
            train_eval, (splits.val_x, splits.val_y), (splits.test_x, splits.test_y))),
            norms.square().sum(1, keepdim=True).sqrt(), norms]
        wall = wall0 + time.perf_counter() - t0
        rows = []
        for i, v in enumerate(torch.cat(parts, 1).tolist()):
            row = dict(epoch=epoch, step=step, lr=lr, train_loss=v[0], train_acc_running=v[1], train_acc=v[3],
                       val_loss=v[4], val_acc=v[5], test_loss=v[6], test_acc=v[7], weight_norm=v[8],
                       **clocks[i].totals(), wall_time=wall)
            row.update(zip(columns, v[9:], strict=True))
            rows.append(row)
        return rows

    mode = _train._progress_mode(progress)
    if mode == "lines":
        print(f"ensemble of {k}: {cfg.arch} width={cfg.width:g} sigma_w={[c.sigma_w for c in configs]} "
              f"seed={[c.seed for c in configs]} {cfg.optimizer} lr={cfg.lr:g} b={cfg.batch_size}, {cfg.epochs} "
              f"epochs x {per_epoch} steps on {dev} ({data.source})", flush=True)
    bar = None
    if mode == "bar":
        from tqdm.auto import tqdm

        bar = tqdm(total=cfg.epochs, desc=f"ensemble of {k}", unit="epoch", dynamic_ncols=True)
    t0 = time.perf_counter()
    hit = None
    if folder is not None and _ckpt.checkpoints(folder):
        hit = _ckpt.load_latest(folder, restore, report=lambda line: print(line, flush=True))
    if hit is None:
        for i, row in enumerate(measure(None, math.nan)):
            histories[i].append(row)
    else:
        t0 = time.perf_counter()
        print(f"ensemble {eid}: resumed from {hit[1]} (epoch {hit[0]}/{cfg.epochs})", flush=True)
        if bar is not None:
            bar.update(epoch)
    try:
        while epoch < cfg.epochs and alive:
            net.train()
            sums = torch.zeros(k, 2, dtype=torch.float64, device=dev)  # per member [loss * batch, correct]
            lr = math.nan
            orders = [_data.batches(n, cfg.batch_size, order_gen[s], device=dev) for s in seeds]
            for idxs in zip(*orders, strict=True):
                factor = optim.lr_factor(cfg.schedule, step, total_steps, warmup_steps, cfg.step_milestones,
                                         cfg.step_gamma)
                optim.set_lr_factor(opt, factor)
                lr = cfg.lr * factor
                xs, ys = {}, {}
                for s, idx in zip(seeds, idxs, strict=True):
                    xs[s], ys[s] = splits.train_x[idx], splits.train_y[idx]
                    if cfg.augment:
                        xs[s] = _data.augment_batch(xs[s], aug_gen[s])
                if len(seeds) == 1:  # one shared batch: stem conv with groups=1
                    x, y = xs[seeds[0]], ys[seeds[0]]
                else:  # member j's images in channels 3j..3j+2, its labels in column j
                    x = torch.cat([xs[c.seed] for c in configs], 1)
                    y = torch.stack([ys[c.seed] for c in configs], 1)
                if cfg.channels_last:
                    x = x.contiguous(memory_format=torch.channels_last)
                with autocast():
                    out = net(x).float()
                losses = _member_losses(out, y, "mean")
                opt.zero_grad(set_to_none=True)
                (losses * live).sum().backward()  # member j's gradient = its own mean loss's gradient
                opt.step()
                sums[:, 0] += losses.detach() * len(out)
                sums[:, 1] += (out.detach().argmax(2) == (y if y.ndim == 2 else y[:, None])).sum(0)
                for j in alive:
                    clocks[j].update(lr)
                step += 1
            epoch += 1
            rows = measure(sums, lr)
            for j in list(alive):
                histories[j].append(rows[j])
                if not all(math.isfinite(rows[j][c]) for c in ("train_loss", "val_loss", "test_loss", "weight_norm")):
                    status[j] = "diverged"
                    alive.remove(j)
                    live[j] = 0.0
                    _silence(model, opt, k, j)
                if mode == "lines":
                    _train._report(mode, None, rows[j], configs[j], rids[j], status[j])
            if folder is not None and cfg.checkpoint_every and epoch % cfg.checkpoint_every == 0 and alive:
                _ckpt.save(folder, epoch, {"ensemble_id": eid, "run_ids": rids, "config": shared, "epoch": epoch,
                                           "rng": _ckpt.rng_state(), "state": state(), "started_at": started_at,
                                           "saved_at": _train._utcnow()})
            if bar is not None:
                best = max((rows[j]["test_acc"] for j in alive), default=math.nan)
                bar.set_postfix(alive=f"{len(alive)}/{k}", best_test=f"{best:.4f}", refresh=False)
                bar.update(1)
    finally:
        if bar is not None:
            bar.close()

    finished_at, out = _train._utcnow(), []
    for j, c in enumerate(configs):
        history = pd.DataFrame(histories[j], columns=[*_results.HISTORY_COLUMNS, *columns])
        summary = metrics.summarize_history(history)
        if status[j] == "diverged":  # as train(): an eval loss may have gone non-finite before the train loss
            summary["diverged_epoch"] = int(history["epoch"].iloc[-1])
        result = RunResult(c, rids[j], status[j], history, summary, None, dict(prov), started_at, finished_at)
        if out_dir is not None:
            result.path = _results.write_run(result, out_dir, section)
            _ckpt.clear(_ckpt.folder_of(result.path))  # as train(): a finished run never resumes
        out.append(result)
    if folder is not None:  # every member's run.json is written: the ensemble never resumes
        _ckpt.clear(folder)
        with contextlib.suppress(OSError):
            folder.parent.rmdir()
            folder.parent.parent.rmdir()  # ensembles/, when no other ensemble is unfinished
    return out
