"""The study's optimisers (SGD, SGD+momentum, Adam, AdamW, Muon) and lr schedules. Muon is torch.optim.Muon's step
for step but takes conv kernels and, as `MuonWithAuxAdam`, carries the AdamW part for what Muon must not touch.
Schedules scale every group's `initial_lr` by one factor (`set_lr_factor`), so the two parts' lrs stay in ratio."""

import math

import torch
from torch import nn

from initmem.checks import check_bool, check_int, check_real, check_reals
from initmem.config import NEUTRAL_HPARAMS, NS_DTYPES, OPTIMIZER_DEFAULTS, OPTIMIZER_HPARAMS, OPTIMIZERS, SCHEDULES
from initmem.engine.models import head_parameters
from initmem.errors import ConfigError, invalid


def newton_schulz(G: torch.Tensor, steps: int = 5, eps: float = 1e-7, dtype: str = "bfloat16") -> torch.Tensor:
    """U V^T of each G = U S V^T of a [..., m, n] stack (leading dims: the members), by `steps` quintic Newton-Schulz
    iterations in `dtype` (bfloat16 as torch.optim.Muon does): singular values land in roughly [0.7, 1.2]. Returns
    `dtype`. float32: the same iteration without bfloat16's rounding (20-30x faster without native bfloat16)."""
    if G.ndim < 2:
        raise ConfigError(f"newton_schulz got a tensor of shape {tuple(G.shape)}: a [..., m, n] stack of matrices "
                          "is accepted")
    a, b, c = 3.4445, -4.7750, 2.0315  # torch.optim.Muon's quintic coefficients
    # baddbmm on a batch of one is addmm's arithmetic (bitwise, CPU)
    X = G.to(getattr(torch, dtype)).reshape(-1, *G.shape[-2:])
    tall = G.size(-2) > G.size(-1)
    X = X.mT if tall else X  # so that X X^T is the small Gram matrix
    X = X.div(X.norm(dim=(1, 2), keepdim=True).clamp(min=eps))  # Frobenius >= spectral: spectrum inside [0, 1]
    for _ in range(steps):
        A = X @ X.mT
        B = torch.baddbmm(A, A, A, beta=b, alpha=c)
        X = torch.baddbmm(X, B, X, beta=a)
    return (X.mT if tall else X).reshape(G.shape)


def muon_update(grad: torch.Tensor, momentum_buf: torch.Tensor, beta: float = 0.95, nesterov: bool = True,
                ns_steps: int = 5, members: int = 1, ns_dtype: str = "bfloat16") -> torch.Tensor:
    """Muon's orthogonalised update for one parameter (updates `momentum_buf` in place, as torch.optim.Muon); conv
    kernels flattened to [out, in*k*k]; a parameter of `members` members ([K*out, ...]) orthogonalised per member."""
    momentum_buf.lerp_(grad, 1 - beta)
    u = grad.lerp(momentum_buf, beta) if nesterov else momentum_buf
    u = newton_schulz(u.reshape(members, len(u) // members, -1), ns_steps, dtype=ns_dtype)
    return u.reshape(grad.shape).to(grad.dtype)


# The real hyper-parameters' ranges (`checks.check_real`): an lr, eps and Muon's aux lr > 0, momentum in [0, 1)
_REAL_BOUNDS = {"lr": dict(lo=0, above=True), "momentum": dict(lo=0, hi=1, below=True), "weight_decay": dict(lo=0),
               "eps": dict(lo=0, above=True), "muon_aux_lr": dict(lo=0, above=True)}
_BETA_BOUNDS = dict(lo=0, hi=1, below=True)  # each of Adam's betas in [0, 1)
_MUON_KEYS = {"params", "use_muon", "lr", "momentum", "nesterov", "ns_steps", "ns_dtype", "weight_decay", "initial_lr"}
_ADAM_KEYS = {"params", "use_muon", "lr", "betas", "eps", "weight_decay", "initial_lr"}


def _check_group(group: dict) -> None:
    """Muon groups hold >= 2-D tensors only; every key known; every value in range."""
    keys = _MUON_KEYS if group["use_muon"] else _ADAM_KEYS
    if unknown := set(group) - keys:
        raise ConfigError(f"param group keys {sorted(unknown)} are invalid: {sorted(keys - {'params'})} accepted")
    for key in ("lr", "weight_decay", *(("momentum",) if group["use_muon"] else ("eps",))):
        check_real(key, group[key], **_REAL_BOUNDS[key])
    if group["use_muon"]:
        check_bool("nesterov", group["nesterov"])
        check_int("ns_steps", group["ns_steps"], 1, 99)
        if group["ns_dtype"] not in NS_DTYPES:
            raise invalid("ns_dtype", group["ns_dtype"], "one of " + ", ".join(NS_DTYPES))
        if flat := [p for p in group["params"] if p.ndim < 2]:
            raise ConfigError(f"Muon got a parameter of shape {tuple(flat[0].shape)}: only >= 2-D parameters are "
                              "accepted (give BatchNorm, biases and the head to AdamW: use_muon=False)")
    else:
        check_reals("betas", group["betas"], 2, **_BETA_BOUNDS)


class MuonWithAuxAdam(torch.optim.Optimizer):
    """Muon for the groups with `use_muon=True`, AdamW (torch.optim.AdamW's arithmetic) for the others, as one
    optimiser; a group's missing hyper-parameters take MUON_DEFAULTS or ADAM_DEFAULTS. Weight decay is decoupled."""

    MUON_DEFAULTS = dict(lr=0.02, momentum=0.95, nesterov=True, ns_steps=5, ns_dtype="bfloat16", weight_decay=0.0)
    ADAM_DEFAULTS = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)

    def __init__(self, param_groups: list[dict], members: int = 1, capturable: bool = False):
        self.members = members  # a population's K: each Muon parameter holds K members' matrices
        self.capturable = capturable  # AdamW step counters as device tensors (a compiled step: no host value)
        for g in param_groups:
            if not isinstance(g, dict) or not isinstance(g.get("use_muon"), bool):
                raise ConfigError(f"param group {g!r:.80} is invalid: a dict with use_muon=True/False is accepted")
        super().__init__([{**(self.MUON_DEFAULTS if g["use_muon"] else self.ADAM_DEFAULTS), **g}
                          for g in param_groups], {})

    def add_param_group(self, param_group: dict) -> None:
        super().add_param_group(param_group)
        _check_group(self.param_groups[-1])

    @torch.no_grad()
    def step(self, closure=None):
        with torch.enable_grad():
            loss = None if closure is None else closure()
        self.update([g["lr"] for g in self.param_groups])
        return loss

    def update(self, lrs: list, groups: list[dict] | None = None) -> None:
        """One step, group i at lr `lrs[i]` (a number, or a device tensor: a compiled step's, `engine.capture`, which
        passes its `groups`: `param_groups` without their lrs); without torch's `step` wrapper, whose deliberate graph
        breaks a compiled step must not meet."""
        for group, lr in zip(groups or self.param_groups, lrs, strict=True):
            (self._muon_step if group["use_muon"] else self._adam_step)(group, lr)

    def _muon_step(self, group: dict, lr: float | torch.Tensor) -> None:
        wd = group["weight_decay"]
        for p in group["params"]:
            if p.grad is None:
                continue
            state = self.state[p]
            if "momentum_buffer" not in state:
                state["momentum_buffer"] = torch.zeros_like(p.grad, memory_format=torch.preserve_format)
            u = muon_update(p.grad, state["momentum_buffer"], group["momentum"], group["nesterov"], group["ns_steps"],
                            self.members, group["ns_dtype"])
            p.mul_(1 - lr * wd)
            rows, cols = p.shape[0] // self.members, math.prod(p.shape[1:])
            scale = math.sqrt(max(1.0, rows / cols))  # torch's adjust_lr_fn="original", per member
            if isinstance(lr, torch.Tensor):  # a compiled step's lr: alpha must be a number
                p.sub_(u * (lr * scale))
            else:
                p.add_(u, alpha=-lr * scale)

    def _adam_step(self, group: dict, lr: float | torch.Tensor) -> None:
        # torch.optim.AdamW's multi-tensor arithmetic (capturable=False), so the aux part matches it to rounding.
        params = [p for p in group["params"] if p.grad is not None]
        if not params:
            return
        wd, eps, (beta1, beta2) = group["weight_decay"], group["eps"], group["betas"]
        states = [self.state[p] for p in params]
        for p, s in zip(params, states, strict=True):
            if not s:
                s.update(step=0, exp_avg=torch.zeros_like(p, memory_format=torch.preserve_format),
                         exp_avg_sq=torch.zeros_like(p, memory_format=torch.preserve_format))
            if self.capturable != isinstance(s["step"], torch.Tensor):  # a checkpoint of the other kind
                s["step"] = (torch.tensor(float(s["step"]), dtype=torch.float32, device=p.device) if self.capturable
                             else int(s["step"]))
            s["step"] += 1
        grads = [p.grad for p in params]
        exp_avgs, exp_avg_sqs = [s["exp_avg"] for s in states], [s["exp_avg_sq"] for s in states]
        if wd != 0:
            torch._foreach_mul_(params, 1 - lr * wd)
        torch._foreach_lerp_(exp_avgs, grads, 1 - beta1)
        torch._foreach_mul_(exp_avg_sqs, beta2)
        torch._foreach_addcmul_(exp_avg_sqs, grads, grads, 1 - beta2)
        denom = torch._foreach_sqrt(exp_avg_sqs)
        if self.capturable:  # the bias corrections from device tensors (no host value: nothing to recompile on)
            steps = [s["step"] for s in states]
            torch._foreach_div_(denom, torch._foreach_sqrt(torch._foreach_neg(torch._foreach_sub(
                torch._foreach_pow(beta2, steps), 1))))
            torch._foreach_add_(denom, eps)
            torch._foreach_mul_(denom, torch._foreach_div(torch._foreach_sub(torch._foreach_pow(beta1, steps), 1), lr))
            torch._foreach_addcdiv_(params, exp_avgs, denom)
            return
        step_size = [-lr / (1 - beta1 ** s["step"]) for s in states]
        torch._foreach_div_(denom, [math.sqrt(1 - beta2 ** s["step"]) for s in states])
        torch._foreach_add_(denom, eps)
        torch._foreach_addcdiv_(params, exp_avgs, denom, step_size)


class Muon(MuonWithAuxAdam):
    """Plain Muon over >= 2-D parameters (conv kernels flattened to [out, in*k*k]); see `muon_update`."""

    def __init__(self, params, lr: float = 0.02, momentum: float = 0.95, nesterov: bool = True, ns_steps: int = 5,
                 weight_decay: float = 0.0, ns_dtype: str = "bfloat16"):
        params = list(params)
        groups = params if params and isinstance(params[0], dict) else [{"params": params}]
        hp = dict(lr=lr, momentum=momentum, nesterov=nesterov, ns_steps=ns_steps, ns_dtype=ns_dtype,
                  weight_decay=weight_decay)
        for g in groups:
            if g.get("use_muon", True) is not True:
                raise ConfigError("Muon param group use_muon=False is invalid: use MuonWithAuxAdam for AdamW groups")
        super().__init__([{**hp, **g, "use_muon": True} for g in groups])


def _resolve(name: str, lr: float | None, hparams: dict) -> dict:
    if name not in OPTIMIZER_DEFAULTS:
        raise invalid("optimizer", name, "one of " + ", ".join(OPTIMIZERS))
    if unknown := sorted(set(hparams) - set(NEUTRAL_HPARAMS)):
        raise ConfigError(f"optimizer hyper-parameters {unknown} are invalid: {sorted(NEUTRAL_HPARAMS)} are accepted")
    defaults = OPTIMIZER_DEFAULTS[name]
    hp = {**defaults, **{k: v for k, v in {**hparams, "lr": lr}.items() if v is not None}}
    for key, bounds in _REAL_BOUNDS.items():
        hp[key] = check_real(key, hp[key], **bounds)
    hp["betas"] = check_reals("betas", hp["betas"], 2, **_BETA_BOUNDS)
    hp.update(nesterov=check_bool("nesterov", hp["nesterov"]), amsgrad=check_bool("amsgrad", hp["amsgrad"]),
              ns_steps=check_int("ns_steps", hp["ns_steps"], 1, 99))
    if hp["ns_dtype"] not in NS_DTYPES:
        raise invalid("ns_dtype", hp["ns_dtype"], "one of " + ", ".join(NS_DTYPES))
    inapplicable = [k for k in NEUTRAL_HPARAMS if k not in OPTIMIZER_HPARAMS[name] and hp[k] != defaults[k]]
    if inapplicable:
        raise ConfigError(f"{', '.join(f'{k}={hp[k]!r}' for k in inapplicable)} invalid for optimizer={name!r}: "
                          f"it accepts {', '.join(('lr',) + OPTIMIZER_HPARAMS[name])}")
    if name == "sgd_momentum" and hp["nesterov"] and hp["momentum"] == 0:
        raise invalid("nesterov", True, "False when momentum=0")
    return hp


def build_optimizer(name: str, model: nn.Module, lr: float | None = None, members: int = 1, capturable: bool = False,
                    **hparams) -> torch.optim.Optimizer:
    """The optimiser `name` over `model`'s parameters, the study's default for a hyperparameter left None (one `name`
    does not use only at its neutral value). weight_decay: coupled L2 for sgd, sgd_momentum and adam, decoupled for
    adamw and muon; muon's AdamW part (BatchNorm, biases, the head) runs at muon_aux_lr. Groups keep `initial_lr`.
    Adam and AdamW over CUDA parameters use torch's `fused` kernel, over any other device its `foreach` one.
    `capturable` (a compiled step, `engine.capture`): Muon's AdamW part counts its steps in device tensors."""
    hp = _resolve(name, lr, hparams)
    params = [p for p in model.parameters() if p.requires_grad]
    if name in ("sgd", "sgd_momentum"):
        opt = torch.optim.SGD(params, lr=hp["lr"], momentum=hp["momentum"], nesterov=hp["nesterov"],
                              weight_decay=hp["weight_decay"], foreach=True)
    elif name in ("adam", "adamw"):
        cls = torch.optim.Adam if name == "adam" else torch.optim.AdamW
        # CUDA: torch's fused kernel (one launch for all parameters); elsewhere the multi-tensor one (CPU numerics)
        kernel = dict(fused=True) if params and params[0].device.type == "cuda" else dict(foreach=True)
        opt = cls(params, lr=hp["lr"], betas=hp["betas"], eps=hp["eps"], weight_decay=hp["weight_decay"],
                  amsgrad=hp["amsgrad"], **kernel)
    else:
        head = {id(p) for p in head_parameters(model)}
        hidden = [p for p in params if p.ndim >= 2 and id(p) not in head]
        aux = [p for p in params if not (p.ndim >= 2 and id(p) not in head)]
        opt = MuonWithAuxAdam([
            dict(params=hidden, use_muon=True, lr=hp["lr"], momentum=hp["momentum"], nesterov=hp["nesterov"],
                 ns_steps=hp["ns_steps"], ns_dtype=hp["ns_dtype"], weight_decay=hp["weight_decay"]),
            dict(params=aux, use_muon=False, lr=hp["muon_aux_lr"], betas=hp["betas"], eps=hp["eps"],
                 weight_decay=hp["weight_decay"]),
        ], members=members, capturable=capturable)
    for g in opt.param_groups:
        g["initial_lr"] = g["lr"]
    return opt


def set_lr_factor(optimizer: torch.optim.Optimizer, factor: float) -> None:
    """Set every group's lr to its initial_lr * factor (a group without initial_lr takes its current lr as base)."""
    for g in optimizer.param_groups:
        g["lr"] = g.setdefault("initial_lr", g["lr"]) * factor


def lr_factor(schedule: str, step: int, total_steps: int, warmup_steps: int = 0,
              milestones: tuple[float, ...] = (0.5, 0.75), gamma: float = 0.1) -> float:
    """Multiplier of the base lr at 0-based `step` of `total_steps`: (step + 1) / W during a warm-up of W steps,
    then constant 1; cosine (1 + cos(pi t)) / 2, t = (step - W) / (total_steps - W) (the last step's lr is small,
    not 0); step gamma ** #{m in milestones : step >= m * total_steps}. Steps past the end keep the final value."""
    if schedule not in SCHEDULES:
        raise invalid("schedule", schedule, "one of " + ", ".join(SCHEDULES))
    total_steps = check_int("total_steps", total_steps, 1, 2**62)
    step = check_int("step", step, 0, 2**62)
    warmup_steps = check_int("warmup_steps", warmup_steps, 0, total_steps)
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    if schedule == "cosine":
        t = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
        return 0.5 * (1.0 + math.cos(math.pi * t))
    if schedule == "step":
        for m in milestones:
            check_real("step_milestones", m, 0, 1, above=True)
        return check_real("step_gamma", gamma, 0, above=True) ** sum(step >= m * total_steps for m in milestones)
    return 1.0
