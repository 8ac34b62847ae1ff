"""Benchmarks and the device check, run from the repository root as modules (`python -m benchmarks.<name>`):

- `bench_train`: the engine's training speed against a plain DataLoader loop, and a population against its separate
  runs (`make bench`; docs/performance.md);
- `device_check` (its steps: `device_steps`, its parity verdict: `parity`): is the engine right and fast on this
  device, in one budgeted run (`make device-check`; docs/gpu/device_check.md);
- `gpu_sweep`: a profile's grid trained without notebooks on a bare GPU image (docs/gpu/README.md);
- `gpu_prepare.sh`: lays the CIFAR-10 archive for a GPU box and prints the check's command (`make gpu-prepare`);
- `lease` (its steps: `lease_steps`; its preparation: `lease_prepare`): the next GPU lease as one command, the
  unmeasured speeds then section 01's `lease` profile through the notebooks (`make gpu-lease`; docs/gpu/lease.md).

Benchmarks whose question is answered live with their record in docs/experiments/performance/.
"""
