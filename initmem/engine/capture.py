"""The whole training step as one compiled graph (`compile=True`): forward, loss, backward, the instruments (their
fused reductions) and the optimiser step, traced by dynamo without a graph break, so that CUDA graphs replay it as one
launch. What keeps it one graph: the backward is traced (`trace_autograd_ops`); the optimiser's update is torch's
functional SGD or Adam(W) on the state the first, eager step made (torch's `step` wraps itself in deliberate graph
breaks), or Muon's `update`; every lr is a device tensor argument (a new lr is new data, not a recompilation); Adam's
step counters are tensors (Muon's with `build_optimizer(capturable=True)`); gradients are cleared and the host
counters (the loop's step, the instruments' `steps`) advanced outside it. The graph is compiled once per process and
shape (`runtime.compiled_once`): a later population of the same shape reuses it. `benchmarks.graph_breaks` counts
the breaks per optimiser."""

from collections.abc import Callable, Sequence

import torch
from torch.optim.adam import adam as _adam
from torch.optim.sgd import sgd as _sgd

from initmem.config import TrainConfig
from initmem.engine import members, optim, runtime
from initmem.engine.instruments import Instruments

Result = tuple[torch.Tensor, torch.Tensor]  # the members' losses and the outputs, detached


def update(opt: torch.optim.Optimizer, groups: list[dict], lrs: Sequence[torch.Tensor]) -> None:
    """One step of `opt` with no graph break, group i (`groups[i]`: `opt.param_groups[i]` without its lrs, which dynamo
    would guard on) at lr `lrs[i]`: torch's SGD and Adam(W) as their functional form on the state their first step made,
    Muon by its `update`. Both run torch's multi-tensor form whatever their eager kernel (dynamo does not trace torch's
    fused kernels: a graph break; inductor fuses the multi-tensor arithmetic instead), Adam(W) `capturable` (its bias
    corrections from the step tensors, which CUDA's fused Adam keeps on the device)."""
    if isinstance(opt, optim.MuonWithAuxAdam):
        opt.update(lrs, groups)
        return
    for g, lr in zip(groups, lrs, strict=True):
        params = [p for p in g["params"] if p.grad is not None]
        grads = [p.grad for p in params]
        if isinstance(opt, torch.optim.SGD):  # plain SGD keeps no state (reading it would make some)
            bufs = [opt.state[p]["momentum_buffer"] for p in params] if g["momentum"] else [None] * len(params)
            _sgd(params, grads, bufs, foreach=True, fused=False, weight_decay=g["weight_decay"], momentum=g["momentum"],
                 lr=lr, dampening=g["dampening"], nesterov=g["nesterov"], maximize=False)
        else:
            states = [opt.state[p] for p in params]
            _adam(params, grads, [s["exp_avg"] for s in states], [s["exp_avg_sq"] for s in states],
                  [s["max_exp_avg_sq"] for s in states] if g["amsgrad"] else [], [s["step"] for s in states],
                  foreach=True, capturable=True, fused=False,
                  decoupled_weight_decay=g["decoupled_weight_decay"], amsgrad=g["amsgrad"], beta1=g["betas"][0],
                  beta2=g["betas"][1], lr=lr, weight_decay=g["weight_decay"], eps=g["eps"], maximize=False)


def whole_step(cfg: TrainConfig, dev: torch.device, pop: members.PlainPopulation, opt: torch.optim.Optimizer,
               instruments: Instruments, x: torch.Tensor, y: torch.Tensor, live: torch.Tensor,
               groups: list[dict] | None = None, lrs: Sequence[torch.Tensor] = ()) -> Result:
    """One optimiser step on (x, y) with the loss mask `live`, the instruments measured around it: `opt.step()`
    without `groups` (eager), else `update(opt, groups, lrs)` (what `compiled` traces)."""
    with runtime.autocast(cfg, dev):
        out = pop.model(x).float()
    losses = pop.losses(out, y)
    (losses * live).sum().backward()  # member j's gradient = its own mean loss's gradient
    with torch.no_grad():
        instruments.before_step()
        opt.step() if groups is None else update(opt, groups, lrs)
        instruments.add_step()
    return losses.detach(), out.detach()


def step_key(network_key: tuple, cfg: TrainConfig, opt: torch.optim.Optimizer) -> tuple:
    """What makes two loops' steps one compiled graph: the network's shape (`runtime.network_key`), the batch, the
    precision and the optimiser with every hyperparameter of its groups but the lr (a tensor argument)."""
    groups = tuple(tuple(sorted((k, v) for k, v in g.items() if k not in ("params", "lr", "initial_lr")))
                   for g in opt.param_groups)
    return network_key, cfg.batch_size, cfg.precision, type(opt).__name__, groups


def compiled(dev: torch.device) -> Callable[..., Result]:
    """`whole_step` compiled (dynamic=False: one graph per shape; on CUDA replayed as CUDA graphs) with its backward
    traced."""
    inner = torch.compile(whole_step, dynamic=False, mode="reduce-overhead" if dev.type == "cuda" else None)

    def run(*args) -> Result:
        with torch._dynamo.config.patch(trace_autograd_ops=True):
            return inner(*args)

    return run


class Capture:
    """A loop's compiled whole step: `(x, y, live)` -> (losses, outputs). A full batch after the loop's first step
    (since it was built or restored) runs compiled; that first step (which makes the optimiser's state, or converts a
    restored one) and a partial last batch run eagerly (a compiled one would compile and record its CUDA graphs a
    second time for one step an epoch). The lr tensors are filled from the groups' lrs when those change.

    Compiled once per process and `step_key` (`runtime.compiled_once`), with the optimiser and instruments it was
    traced with (dynamo guards on their identity, as on the network's): a later population of that key trains with
    those (`opt`, `instruments`), reset to its own fresh ones' state."""

    def __init__(self, cfg: TrainConfig, dev: torch.device, pop: members.PlainPopulation,
                 opt: torch.optim.Optimizer, instruments: Instruments, network_key: tuple):
        step, self.opt, self.instruments = runtime.compiled_once(
            "step", step_key(network_key, cfg, opt), lambda: (compiled(dev), opt, instruments))
        if self.opt is not opt:
            self.opt.load_state_dict(opt.state_dict())
            self.instruments.load_state_dict(instruments.state_dict())
        self.step, self.parts = step, (cfg, dev, pop, self.opt, self.instruments)
        self.groups = [{k: v for k, v in g.items() if k not in ("lr", "initial_lr")} for g in self.opt.param_groups]
        self.lrs = [torch.zeros((), dtype=torch.float32, device=dev) for _ in opt.param_groups]
        self.filled: list[float | None] = [None] * len(self.lrs)
        self.warm = False  # an eager step has run since the loop was built or restored

    def __call__(self, x: torch.Tensor, y: torch.Tensor, live: torch.Tensor) -> Result:
        cfg, _, _, opt, instruments = self.parts
        opt.zero_grad(set_to_none=True)
        if self.warm and len(x) == cfg.batch_size:
            for i, g in enumerate(opt.param_groups):
                if self.filled[i] != g["lr"]:
                    self.lrs[i].fill_(g["lr"])
                    self.filled[i] = g["lr"]
            out = self.step(*self.parts, x, y, live, self.groups, self.lrs)
        else:
            out = whole_step(*self.parts, x, y, live)
            self.warm = True
            self._pin()
        instruments.steps += 1
        return out

    def _pin(self) -> None:
        """On CUDA, every tensor the compiled step changes in place (the optimiser's state, which an eager step may
        have made anew, and the instruments' buffers) or reads (the lrs) marked as a static address: CUDA graphs
        replay a mutated input only at a fixed address (else inductor skips them), and re-record where one moved."""
        _, dev, _, opt, instruments = self.parts
        if dev.type != "cuda":
            return
        state = [t for s in opt.state.values() for t in s.values() if isinstance(t, torch.Tensor)]
        for t in (*self.lrs, *state, *instruments.step_tensors()):
            torch._dynamo.mark_static_address(t, guard=False)
