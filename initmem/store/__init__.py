"""store: run records on disk and reading them back, torch-free (records, results, run folders, provenance,
migration, atomic files)."""

from initmem import lazy_face

API = {
    **dict.fromkeys(["RunResult", "read_run", "verify_run", "find_runs", "load_runs", "load_histories"], ".results"),
    "RunFolders": ".folders",
    **dict.fromkeys(["SCHEMA", "HISTORY_COLUMNS", "verify_record", "read_history"], ".record"),
    **dict.fromkeys(["utcnow", "portable"], ".provenance"),
    "atomic_write": ".files",
}
__all__ = sorted(API)
__getattr__, __dir__ = lazy_face(__name__, API)
