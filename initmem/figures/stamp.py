"""An artefact's provenance stamp (`Stamp`): the data, profile, runs, code and results tree its numbers came from,
printed as its caption and stored in its sidecar JSON."""

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Self

import pandas as pd

from initmem.errors import InitmemError
from initmem.figures.paths import ROOT, display_path, repo_path

PROVENANCE_DOC = "docs/results.md#provenance"  # what a run's provenance records and what a modified tree means
DATA_KINDS = {"imagefolder-tar": "CIFAR-10 (JPEG archive)", "imagefolder": "CIFAR-10 (JPEG folder)",
              "torchvision": "CIFAR-10 (torchvision)"}


def data_name(source: str) -> str:
    """A run's `data_source` as a reader names it, without the machine's path: 'CIFAR-10 (JPEG archive)'."""
    kind, _, rest = source.partition(":")
    if kind in DATA_KINDS:
        return DATA_KINDS[kind]
    return source if "/" not in rest and "\\" not in rest else kind


def tree_profile(runs: pd.DataFrame, results_dir: str | Path, sections: Sequence[str]) -> str:
    """The profile a results tree's runs were swept with (runs do not record it): the tree's folder name where that
    profile holds them all, or where no profile of their sections' params files does (a tree of hand-made runs),
    else the profile that holds them all (`Section.profiles_holding`), e.g. cpu_w025 for results/cpu_w025.
    No `sections`: every section of the runs (a notebook reading the whole tree)."""
    from initmem.study.params import load_section
    name = repo_path(results_dir).name
    try:
        held = [set(load_section(ROOT / "params" / f"{s}.yaml").profiles_holding(set(g["run_id"])))
                for s, g in runs.groupby("section") if not sections or s in sections]
    except (InitmemError, OSError):  # a section without a params file here: nothing to match against
        return name
    common = set.intersection(*held) if held else set()
    return name if name in common or not common else sorted(common)[0]


@dataclass(frozen=True)
class Stamp:
    """Where an artefact's numbers came from: printed as its caption and stored in its sidecar JSON."""

    profile: str
    n_runs: int
    data_sources: tuple[str, ...]
    git_commits: tuple[str, ...]
    results_dir: str
    sections: tuple[str, ...]
    modified: int = 0  # runs trained from a modified working tree
    modified_unknown: int = 0  # ... of which the modification was not recorded (provenance.UNKNOWN_DIFF)
    shared: tuple[str, ...] = ()  # other trees whose runs join results_dir's (an experiment sharing committed runs)
    per_tree: tuple[int, ...] = ()  # runs read from results_dir and from each `shared` tree, in that order

    @classmethod
    def of(cls, runs: pd.DataFrame, results_dir: str | Path, sections: Sequence[str],
           shared: Sequence[str | Path] = (), tree: pd.Series | None = None) -> Self:
        """Profile: the runs' `profile` column, else `tree_profile`; a data source with its `data_hash`; `tree`:
        each run's tree (0 results_dir, i the i-th `shared`), counted per tree in the caption."""
        def values(col: str) -> tuple[str, ...]:
            return tuple(sorted({str(v) for v in runs[col].dropna()})) if col in runs.columns else ()

        def source(row) -> str:
            h = row.get("data_hash")
            return data_name(str(row["data_source"])) + (f" sha256:{h[:12]}" if isinstance(h, str) and h else "")

        sources = tuple(sorted({source(r) for _, r in runs.iterrows() if pd.notna(r["data_source"])})) if (
            "data_source" in runs.columns) else ()
        dirty = runs["git_dirty"].eq(True) if "git_dirty" in runs.columns else pd.Series(False, index=runs.index)
        unknown = dirty & ~runs["git_diff_known"].astype(bool) if "git_diff_known" in runs.columns else dirty
        profile = ", ".join(values("profile")) or tree_profile(runs, results_dir, sections)
        return cls(profile, len(runs), sources, values("git_commit"), display_path(results_dir), tuple(sections),
                   int(dirty.sum()), int(unknown.sum()), tuple(map(display_path, shared)),
                   tuple(int((tree == i).sum()) for i in range(len(shared) + 1)) if tree is not None else ())

    def caption(self) -> str:
        """One line a reader can use: the data (what it is, its hash), profile, runs, code, where the runs are."""
        commits = ", ".join(c[:10] for c in self.git_commits[:3]) or "unknown"
        if len(self.git_commits) > 3:
            commits += f" (+{len(self.git_commits) - 3} more)"
        code = f"code {commits}"
        if self.modified:  # which code made them: the commit, and whether the change on top of it is recorded
            code += f"; {self.modified} of {self.n_runs} runs trained with uncommitted changes" + self._changes()
        trees = (self.results_dir, *self.shared)
        where = " + ".join(f"{t} ({n})" for t, n in zip(trees, self.per_tree, strict=True)) if self.per_tree \
            else " + ".join(trees)
        return (f"data {', '.join(self.data_sources) or 'unknown'} · profile {self.profile}, {self.n_runs} runs "
                f"({', '.join(self.sections) or 'all sections'}) · {code} · {where}")

    def _changes(self) -> str:
        """What a reader can know of the modified-tree runs' code: each change in its run.json, or not recorded
        (`provenance.UNKNOWN_DIFF`: that code is no commit's, said with where to read more)."""
        known = self.modified - self.modified_unknown
        if not self.modified_unknown:
            return ", each recorded in its run.json (provenance.git_diff)"
        return ((f": {known} recorded in run.json, {self.modified_unknown} not, whose" if known
                 else " that were not recorded, so their") + f" code is not exactly these commits ({PROVENANCE_DOC})")

    def sidecar(self, name: str, kind: str, title: str, files: Sequence[str], missing: bool = False,
                description: str = "") -> dict:
        """One artefact's sidecar record (no generation time: the same results give the same bytes); `description`:
        the caption a paper prints beside a figure (its PNG holds only the one-line `title`)."""
        return {"name": name, "kind": kind, "title": title, "description": description, "caption": self.caption(),
                "profile": self.profile,
                "n_runs": self.n_runs, "sections": list(self.sections), "data_sources": list(self.data_sources),
                "git_commits": list(self.git_commits), "modified_tree_runs": self.modified,
                "modified_unknown_runs": self.modified_unknown, "results_dir": self.results_dir,
                "files": list(files), "missing": missing} | (
                    {"shared_dirs": list(self.shared), "runs_per_tree": list(self.per_tree)} if self.shared else {})
