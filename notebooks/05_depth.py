# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     notebook_metadata_filter: -jupytext.text_representation.jupytext_version
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 05 — Depth: deep ResNets fail to train instead
#
# Tests finding **6** of STUDY.md. ResNet-9, ResNet-56 and ResNet-110 (He et al.'s CIFAR ResNets, option-A
# shortcuts) trained with SGD and with Adam at every `sigma_w`. In the deep networks bad forgetting should show
# differently: at large `sigma_w` runs often fail to interpolate (never reach 99.5 % training accuracy) rather than
# interpolating to a worse solution. Besides the spread, the notebook records which runs fail to interpolate.
#
# The defaults below are a seconds-long smoke run on synthetic data (ResNet-20, the shallowest of the family,
# stands in for the deep ones); `params/05_depth.yaml` holds the `smoke`, `cpu` and `paper` profiles.

# %% tags=["parameters"]
# where and what to sweep (notebook-level)
results_dir = "results/adhoc"  # runs go to <results_dir>/<section>/<run_id>/
section = "05_depth"
sigma_ws = [0.1, 1.0, 2.5]  # the init scales the spread is taken across
seeds = [0]
population = True  # train the missing sigma_w x seed runs as one population (False: one by one)
progress = True
# TrainConfig fields, held fixed across sigma_w
arch = "resnet20"  # resnet9 | resnet20 | resnet56 | resnet110
width = 0.25
optimizer = "sgd"
lr: float | None = None  # None: the optimiser's STUDY.md default
momentum: float | None = None
weight_decay: float | None = None
schedule = "constant"
batch_size = 128
epochs = 2
data = "synthetic"
data_root = "data"
n_train: int | None = 256  # None: all 45,000 after the validation split
n_val = 128
n_test: int | None = 128  # None: all 10,000
train_eval_size: int | None = None
split_seed = 0
augment = False
device = "auto"
precision = "fp32"  # fp32 | tf32 (CUDA) | bf16
channels_last = True
compile = False
checkpoint_every = 0  # epochs between checkpoints (0: none); a killed run resumes from the newest

# %%
from initmem import metrics, point_report
from initmem.notebook import refuse_undeclared
from initmem.point import run_point

refuse_undeclared(globals())  # papermill only warns about a parameter this notebook does not declare
runs = run_point(globals())  # the point's runs from the parameters above (config.point_configs), as the sweep builds them

# %% [markdown]
# The point as a researcher reads it: per `sigma_w` (mean ± std over seeds), the test accuracy at the selected
# (best-validation) epoch, the interpolation epoch, the final/initial weight-norm ratio (radial memory), how far the
# network turned from its initialisation (degrees) and the measured forgetting clock Θ; then test accuracy against
# `sigma_w`, and the weight norm and the angle from initialisation over training.

# %%
point_report.point_table(runs)

# %%
point_report.point_figure(runs)

# %% [markdown]
# One row per run: test accuracy at the best-validation epoch, the interpolation epoch, the initial and final
# weight norms (radial memory), the angle from initialisation and the forgetting clocks at the end of training.

# %%
point_report.run_table(runs)

# %% [markdown]
# The point's numbers: the spread across `sigma_w` (pp), which `sigma_w` is best and worst, how many runs
# interpolated or diverged.

# %%
metrics.point_summary(runs)

# %% [markdown]
# Which runs interpolate and which fail to (`failed_to_interpolate`): finding 6 predicts failures at large
# `sigma_w` in the deep networks.

# %%
point_report.interpolation_table(runs)
