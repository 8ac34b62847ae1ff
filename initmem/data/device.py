"""Which torch device a name means here (`resolve_device`): in `data`, the first layer that imports torch, because
the splits are made on the run's device and the engine (`engine.runtime.run_device`) asks the same question."""

import torch

from initmem.errors import ConfigError


def resolve_device(device: str | torch.device) -> torch.device:
    """`auto` → cuda if available else cpu; otherwise torch.device(device), ConfigError if unknown or not here."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ConfigError(f"device={device!r} is invalid: 'auto', 'cpu', 'cuda' or 'cuda:N' is accepted") from exc
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"device={device!r} is invalid here: CUDA is not available; 'auto' or 'cpu' is accepted")
    return dev
