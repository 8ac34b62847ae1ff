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
# # 02 — Long training: time alone is not enough
#
# Tests finding **3** of STUDY.md (and the epoch-vs-clock contrast of **7**). Low-learning-rate plain SGD
# (lr 0.01, constant) trains ResNet-9 for a long time — 5,000 epochs in the paper — at every `sigma_w`. The
# test-accuracy **spread** across `sigma_w` is measured as if training had stopped at each of several epoch
# marks (`epoch_marks`): at each mark, each run's test accuracy is read at its best-validation epoch so far. The
# paper finds the spread essentially unchanged from 200 to 5,000 epochs, while `T_SGD = (1/b) sum eta_k^2` grows
# only linearly in epochs and stays tiny. The `cpu` profile also trains Adam (at its own default lr) for as many
# steps: the contrast of an adaptive method given the same time.
#
# The defaults below are a seconds-long smoke run on synthetic data; `params/02_long_training.yaml` holds the
# `smoke`, `cpu` and `paper` profiles.

# %% tags=["parameters"]
# where and what to sweep (notebook-level)
results_dir = "results/adhoc"  # runs go to <results_dir>/<section>/<run_id>/
section = "02_long_training"
sigma_ws = [0.1, 1.0, 2.5]  # the init scales the spread is taken across
seeds = [0]
population = True  # train the missing sigma_w x seed runs as one population (False: one by one)
progress = True
# TrainConfig fields, held fixed across sigma_w
arch = "resnet9"
width = 0.0625
optimizer = "sgd"
lr: float | None = None  # None: the optimiser's STUDY.md default
momentum: float | None = None
weight_decay: float | None = None
schedule = "constant"
batch_size = 128
epochs = 3
epoch_marks = [1, 2, 3]  # the spread is reported as if training stopped at each
checkpoint_every = 0  # epochs between checkpoints (0: none); long runs want them
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

# %%
from initmem import metrics, point_report, table_text, tables
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
# The spread at each epoch mark: finding 3 predicts it stays flat as training goes on, while `T_SGD` grows.

# %%
table_text.display_frame(tables.long_training_table(runs, marks=epoch_marks))  # T2, as figures/ writes it
