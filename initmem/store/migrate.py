"""Upgrading old run records to the schema `initmem.store.results` verifies (`initmem migrate PATH`)."""

from pathlib import Path

from initmem.config import TrainConfig
from initmem.errors import ConfigError, ResultsError
from initmem.store import record as rec
from initmem.store.files import atomic_write
from initmem.store.provenance import portable, portable_config
from initmem.store.record import SCHEMA, V1_KEYS, record_error, verify_record
from initmem.store.results import find_runs

V1_NEW_FIELDS = frozenset({"eval_every", "deterministic", "precision"})  # config fields added after schema 1
AMP = {"off": "fp32", "bf16": "bf16"}  # schema 1's config field `amp` → `precision`


def _upgrade(record: dict, file: Path) -> dict:
    """The schema-2 record of a schema-1 one (`amp` → `precision`, new fields at their defaults), verified."""
    if sorted(record) != sorted(V1_KEYS) or not isinstance(record["config"], dict):
        raise record_error(file, f"is not a schema-1 run record: keys {sorted(record)}, a config dict and {V1_KEYS} "
                          "are expected")
    config = dict(record["config"])
    if "amp" in config:
        amp = config.pop("amp")
        if amp not in AMP or config.get("precision", AMP[amp]) != AMP[amp]:
            raise record_error(file, f"has config amp={amp!r}: 'off' or 'bf16' (and no other precision) is expected")
        config["precision"] = AMP[amp]
    if lacking := sorted(set(rec.CONFIG_FIELDS) - set(config) - V1_NEW_FIELDS):
        raise record_error(file, f"has a config without the fields {lacking}")
    try:
        new_config = TrainConfig.from_dict(config).to_dict()
    except ConfigError as exc:
        raise record_error(file, f"has an invalid config: {exc}") from None
    if changed := [k for k, v in config.items() if new_config[k] != v]:
        raise record_error(file, f"has config values TrainConfig would change: {changed}")
    new = {**record, "schema": SCHEMA, "config": portable_config(new_config),
           "history": rec.history_meta(file.parent), "provenance": portable(record["provenance"])}
    new = {k: new[k] for k in rec.RECORD_TYPES}  # the key order RunFolders.write writes
    verify_record(file.parent, new)
    return new


def migrate(path: str | Path) -> list[Path]:
    """Upgrade schema-1 run.json files under `path`, and provenance and data_root to `portable*`, in place (every
    number and history.csv kept), all checked before any is written; the paths rewritten ([] the second time)."""
    plan = []
    for folder in find_runs(path):
        file = folder / "run.json"
        record = rec.parse_record(file)
        if record.get("schema") == SCHEMA:
            new = {**record, "provenance": portable(record.get("provenance")),  # as kept now; the rest as was
                   "config": portable_config(record["config"]) if isinstance(record.get("config"), dict) else
                   record.get("config")}
            if new != record:
                verify_record(folder, new)
                plan.append((file, new))
            continue
        if record.get("schema") != 1:
            raise record_error(file, f"has schema {record.get('schema')!r}: migrate upgrades schema 1 to {SCHEMA}")
        plan.append((file, _upgrade(record, file)))
    for file, record in plan:
        try:
            atomic_write(file, rec.dumps_record(record))
        except OSError as exc:
            raise ResultsError(f"cannot write {str(file)!r}: {exc.strerror or exc}") from None
    return [file for file, _ in plan]
