"""data: CIFAR-10 from disk (torchvision batches, image folders or their archives, synthetic images) and the
study's splits as device tensors."""

from initmem import lazy_face

API = {
    **dict.fromkeys(["Cifar10", "CIFAR10_CLASSES", "check_dataset"], ".cifar10"),
    **dict.fromkeys(["load_cifar10", "make_synthetic"], ".sources"),
    "load_imagefolder": ".imagefolder",
    "resolve_device": ".device",
    **dict.fromkeys(["Splits", "make_splits", "augment_batch", "batches", "steps_per_epoch"], ".splits"),
}
__all__ = sorted(API)
__getattr__, __dir__ = lazy_face(__name__, API)
