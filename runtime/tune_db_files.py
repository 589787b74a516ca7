"""Moving tuning results between machines: `plait tune --export FILE` / `--import FILE`.

The file is JSON (YAML when its name ends in .yaml or .yml):

    format: plait-tune-results
    version: 1
    runs:                       # one per search: its run key, provenance and candidates
    - {fingerprint, target, driver, bucket, algorithm, sizes, dtypes, default_ms, gpu,
       host, date, results: [{kernel, candidate, ms, rel_err, checked, error, gpu, host,
       date}, ...]}
    digest: <sha256 of the canonical JSON of format, version and runs>

On import every field is checked (its type, a time only where the candidate was checked,
a candidate that is a schedule's keys) and the digest must match: a file edited by hand
or damaged in transit is refused whole, naming the first bad field. The digest guards
against mistakes, not against someone who recomputes it; imported rows are then signed
with this user's secret like rows measured here.
"""
from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import yaml

from plait.dsl.errors import PlaitError

from .tune_db import RESULT_FIELDS, RUN_FIELDS, RUN_KEY, TuneDB

FORMAT = "plait-tune-results"
VERSION = 1
_TEXT_RUN = ("fingerprint", "target", "driver", "bucket", "algorithm", "gpu", "host", "date")
_TEXT_RESULT = ("kernel", "candidate", "gpu", "host", "date")


def _digest(body: dict) -> str:
    text = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def _is_yaml(path: Path) -> bool:
    return path.suffix.lower() in (".yaml", ".yml")


def export_results(db: TuneDB, path: str | Path) -> int:
    """Write every verified search of `db` to `path`; the number of searches written."""
    path = Path(path)
    runs, rows = db.all_rows()
    out = []
    for run in runs:
        key = [run[k] for k in RUN_KEY]
        entry = {f: run[f] for f in RUN_FIELDS}
        entry["sizes"], entry["dtypes"] = json.loads(run["sizes"]), json.loads(run["dtypes"])
        entry["results"] = [{f: r[f] for f in RESULT_FIELDS if f not in RUN_KEY}
                            for r in rows if [r[k] for k in RUN_KEY] == key]
        for r in entry["results"]:
            r["checked"] = bool(r["checked"])
        out.append(entry)
    body = {"format": FORMAT, "version": VERSION, "runs": out}
    doc = {**body, "digest": _digest(body)}
    text = yaml.safe_dump(doc, sort_keys=False) if _is_yaml(path) else \
        json.dumps(doc, indent=1) + "\n"
    path.write_text(text)
    return len(out)


def import_results(db: TuneDB, path: str | Path) -> int:
    """Validate `path` whole, then file its searches in `db` (each replacing the search
    under the same run key); the number imported. A bad file changes nothing."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise PlaitError(f"plait tune --import: cannot read {path}: {e.strerror}") from None
    try:
        doc = yaml.safe_load(text) if _is_yaml(path) else json.loads(text)
    except (ValueError, yaml.YAMLError) as e:
        raise PlaitError(f"{path}: not a {'YAML' if _is_yaml(path) else 'JSON'} file "
                         f"({' '.join(str(e).split())})") from None
    runs, rows = _validated(doc, path)
    db.write_rows(runs, rows)
    return len(runs)


def _validated(doc, path: Path) -> tuple[list[dict], list[dict]]:
    def bad(where: str, why: str):
        raise PlaitError(f"{path}: {where}: {why}; the file is refused whole (edited or "
                         "damaged? export it again)")
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        bad("format", f"not a {FORMAT} file")
    if doc.get("version") != VERSION:
        bad("version", f"{doc.get('version')!r}, this plait reads version {VERSION}")
    if set(doc) != {"format", "version", "runs", "digest"}:
        bad("top level", f"keys {sorted(doc)}, expected format, version, runs, digest")
    if not isinstance(doc["runs"], list):
        bad("runs", "not a list")
    body = {k: doc[k] for k in ("format", "version", "runs")}
    if doc["digest"] != _digest(body):
        bad("digest", "does not match the contents")
    runs, rows = [], []
    for i, entry in enumerate(doc["runs"]):
        where = f"runs[{i}]"
        if not isinstance(entry, dict) or set(entry) != set(RUN_FIELDS) | {"results"}:
            bad(where, f"expected the keys {', '.join(RUN_FIELDS)}, results")
        for f in _TEXT_RUN:
            if not isinstance(entry[f], str) or not entry[f]:
                bad(f"{where}.{f}", "not a non-empty string")
        for f in ("sizes", "dtypes"):
            if not isinstance(entry[f], dict):
                bad(f"{where}.{f}", "not a mapping")
        if not all(isinstance(v, int) and v >= 0 for v in entry["sizes"].values()):
            bad(f"{where}.sizes", "sizes must be non-negative integers")
        if entry["default_ms"] is not None and not _time(entry["default_ms"]):
            bad(f"{where}.default_ms", "not a positive finite time")
        if not isinstance(entry["results"], list):
            bad(f"{where}.results", "not a list")
        run = {f: entry[f] for f in RUN_FIELDS}
        run["sizes"], run["dtypes"] = json.dumps(entry["sizes"]), json.dumps(entry["dtypes"])
        runs.append(run)
        for j, result in enumerate(entry["results"]):
            rows.append(_result_row(result, run, f"{where}.results[{j}]", bad))
    return runs, rows


def _result_row(result, run: dict, where: str, bad) -> dict:
    own = [f for f in RESULT_FIELDS if f not in RUN_KEY]
    if not isinstance(result, dict) or set(result) != set(own):
        bad(where, f"expected the keys {', '.join(own)}")
    for f in _TEXT_RESULT:
        if not isinstance(result[f], str):
            bad(f"{where}.{f}", "not a string")
    try:
        keys = json.loads(result["candidate"])
    except ValueError:
        keys = None
    if not isinstance(keys, dict) or len(keys) != 1 or \
            not isinstance(keys.get("contraction", keys.get("kernels")), dict):
        bad(f"{where}.candidate", "not a schedule's contraction: or kernels: keys")
    if not isinstance(result["checked"], bool):
        bad(f"{where}.checked", "not true or false")
    ms, err = result["ms"], result["rel_err"]
    if result["checked"] != (ms is not None) or (ms is not None and not _time(ms)):
        bad(f"{where}.ms", "a time belongs to a checked candidate and is positive and finite")
    if err is not None and not (isinstance(err, (int, float)) and math.isfinite(err)
                                and err >= 0):
        bad(f"{where}.rel_err", "not a non-negative finite number")
    if result["error"] is not None and not isinstance(result["error"], str):
        bad(f"{where}.error", "not a string")
    if not result["checked"] and result["error"] is None:
        bad(f"{where}.error", "an unchecked candidate must say why")
    return {**{k: run[k] for k in RUN_KEY}, **result, "checked": int(result["checked"])}


def _time(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and \
        math.isfinite(value) and value > 0
