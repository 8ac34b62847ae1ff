"""initmem: how much does a trained network remember the scale of its random initialisation?

Reproducible research package for "Do Deep Networks Forget Initialization?" (Das et al., 2026).
See README.md and docs/architecture.md.
"""

__version__ = "0.1.0"
