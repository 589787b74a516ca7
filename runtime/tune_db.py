"""The tuning database: every candidate `plait tune` measured, kept in SQLite.

    db = TuneDB()                      # <cache folder>/tune.sqlite (runtime/cache.py's folder)
    db.store(result, meta)             # a finished search: its trials and provenance
    db.result(meta)                    # the same search answered again, or None
    db.best_keys(graph, target, sizes) # the fastest checked schedule keys for a shape bucket

A row is keyed by (algorithm fingerprint, kernel, target, driver version, shape bucket,
candidate) and holds the measured time, whether it was checked against the float64
reference, and where it was measured (GPU, host, date). The kernel is `contraction` for a
`contraction:` candidate (it sets every contraction kernel) and the streamed kernels' names
for a `kernels:` one; the candidate is its schedule keys as JSON. A finished search is
also kept as a `runs` row (its default time, exact sizes and dtypes), so that a repeated
`plait tune` of the same algorithm, target, driver and bucket answers from here: no
compile, no timing (a search its budget cut short is no answer: it runs again).

The algorithm fingerprint is sha256 of the traced graph's text (which holds its dtypes)
and of the compiler's source fingerprint: a changed algorithm or compiler is tuned again.

The shape bucket: each axis size rounded up to a power of two (0 and 1 stay as they are),
written in the algorithm's axis order, e.g. `M=4096,N=4096,K=4096` for M=4000,N=4095,K=4096.
Shapes in one bucket share their results (tiles that suit 4000 suit 4095).

Tamper rules are the compile cache's: the folder is the user's own (0700), the file is
no symlink and is owned by the user; each row carries an HMAC under the cache's per-user
secret, and a row that fails it is dropped as if never measured (its search runs again).
"""
from __future__ import annotations

import datetime
import hashlib
import hmac
import json
import os
import socket
import sqlite3
import stat
from dataclasses import dataclass
from pathlib import Path

from plait.dsl.errors import PlaitError

from .tune import Trial, TuneResult

DB_NAME = "tune.sqlite"
RUN_KEY = ("fingerprint", "target", "driver", "bucket")
RUN_FIELDS = RUN_KEY + ("algorithm", "sizes", "dtypes", "default_ms", "gpu", "host", "date")
RESULT_FIELDS = ("fingerprint", "kernel", "target", "driver", "bucket", "candidate", "ms",
                 "rel_err", "checked", "error", "gpu", "host", "date")
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS runs (fingerprint TEXT, target TEXT, driver TEXT, "
    "bucket TEXT, algorithm TEXT, sizes TEXT, dtypes TEXT, default_ms REAL, gpu TEXT, "
    "host TEXT, date TEXT, mac TEXT, PRIMARY KEY (fingerprint, target, driver, bucket))",
    "CREATE TABLE IF NOT EXISTS results (fingerprint TEXT, kernel TEXT, target TEXT, "
    "driver TEXT, bucket TEXT, candidate TEXT, ms REAL, rel_err REAL, checked INTEGER, "
    "error TEXT, gpu TEXT, host TEXT, date TEXT, mac TEXT, PRIMARY KEY (fingerprint, kernel, "
    "target, driver, bucket, candidate))",
)


def bucket(sizes: dict, axis_order=None) -> str:
    """Each size rounded up to a power of two, in axis order: 'M=4096,N=4096,K=4096'."""
    order = list(axis_order or sizes)
    return ",".join(f"{a}={_pow2(sizes[a])}" for a in order if a in sizes)


def _pow2(n: int) -> int:
    return n if n <= 1 else 1 << (int(n) - 1).bit_length()


def fingerprint(graph) -> str:
    """The algorithm (its graph, dtypes included) and the compiler that lowers it."""
    from .api import compiler_fingerprint
    return hashlib.sha256((graph.text() + "\n" + compiler_fingerprint()).encode()).hexdigest()


@dataclass
class TuneMeta:
    """What one search is filed under, and where it was measured."""
    fingerprint: str
    target: str
    driver: str
    bucket: str
    algorithm: str
    sizes: dict
    dtypes: dict
    gpu: str = "unknown"
    host: str = ""
    date: str = ""

    @classmethod
    def of(cls, graph, algorithm: str, sizes: dict, dtypes: dict, target: str,
           driver: str = "none", gpu: str = "unknown") -> "TuneMeta":
        return cls(fingerprint(graph), target, str(driver), bucket(sizes, graph.axis_order),
                   algorithm, dict(sizes), {k: str(v) for k, v in dtypes.items()}, gpu,
                   socket.gethostname(), datetime.date.today().isoformat())


def candidate_of(trial: Trial) -> tuple[str, str]:
    """(kernel, candidate): the kernel(s) a trial's keys set, and the keys as JSON."""
    if trial.contraction is not None:
        kernel = "contraction"
    else:
        kernel = ",".join(sorted(trial.kernels or {}))
    return kernel, json.dumps(trial.keys)    # key order kept: a recalled winner is
                                              # written as the file measured was


class TuneDB:
    """One SQLite file; every method opens, does its work and closes (no open handle is
    kept across a fork or a spawn)."""

    def __init__(self, directory: str | os.PathLike | None = None):
        from .cache import ProgramCache, cache_dir
        self.directory = Path(directory) if directory is not None else cache_dir()
        self._cache = ProgramCache(self.directory)     # for its folder rules and secret
        self.path = self.directory / DB_NAME

    # ---- safety -----------------------------------------------------------------------
    def _secret(self) -> bytes:
        secret = self._cache.secret()
        if secret is None:
            raise PlaitError(f"plait tune: the tuning database needs the cache folder "
                             f"{self.directory} (the user's own, writable); set "
                             "PLAIT_CACHE_DIR to one")
        return secret

    def _connect(self) -> sqlite3.Connection:
        secret = self._secret()
        try:
            st = os.lstat(self.path)
        except FileNotFoundError:
            st = None
        if st is not None and (not stat.S_ISREG(st.st_mode) or
                               (hasattr(os, "getuid") and st.st_uid != os.getuid())):
            raise PlaitError(f"plait tune: {self.path} is not a regular file of the current "
                             "user (a symlink, a folder or someone else's); the tuning "
                             "database is never read from it: remove it")
        if st is None:        # created 0600 before SQLite opens it
            os.close(os.open(self.path, os.O_CREAT | os.O_WRONLY | getattr(os, "O_NOFOLLOW", 0),
                             0o600))
        con = sqlite3.connect(self.path, timeout=30)
        for statement in _SCHEMA:
            con.execute(statement)
        self._key = secret
        return con

    def _mac(self, table: str, row: dict, fields) -> str:
        text = json.dumps([table] + [row[f] for f in fields], default=str)
        return hmac.new(self._key, text.encode(), hashlib.sha256).hexdigest()

    def _verified(self, con, table: str, fields, where: str, args) -> tuple[list[dict], bool]:
        """(the rows matching `where` that pass their HMAC, whether any failed). A failing
        row (edited by hand, or copied from another user) is deleted."""
        rows = con.execute(f"SELECT rowid, {', '.join(fields)}, mac FROM {table} WHERE {where} "
                           "ORDER BY rowid",
                           args).fetchall()
        good, bad = [], []
        for r in rows:
            d = dict(zip(fields, r[1:-1]))
            ok = hmac.compare_digest(r[-1] or "", self._mac(table, d, fields))
            if ok:
                good.append(d)
            else:
                bad.append((r[0], d))
        if bad:   # and the search a dropped result belonged to: it is no longer whole
            con.executemany(f"DELETE FROM {table} WHERE rowid = ?", [(b,) for b, _ in bad])
            where_run = " AND ".join(f"{k} = ?" for k in RUN_KEY)
            con.executemany(f"DELETE FROM runs WHERE {where_run}",
                            [[d[k] for k in RUN_KEY] for _, d in bad])
            con.commit()
        return good, bool(bad)

    # ---- writing ----------------------------------------------------------------------
    def store(self, result: TuneResult, meta: TuneMeta) -> None:
        """File a finished search (replacing an earlier one under the same run key)."""
        run = {**meta.__dict__, "sizes": json.dumps(meta.sizes), "dtypes": json.dumps(meta.dtypes),
               "default_ms": result.default_ms}
        rows = []
        for trial in result.trials:
            kernel, candidate = candidate_of(trial)
            rows.append({**{f: run[f] for f in RUN_KEY}, "kernel": kernel,
                         "candidate": candidate, "ms": trial.ms, "rel_err": trial.rel_err,
                         "checked": int(trial.ms is not None), "error": trial.error,
                         "gpu": meta.gpu, "host": meta.host, "date": meta.date})
        self.write_rows([run], rows)

    def write_rows(self, runs: list[dict], rows: list[dict]) -> None:
        """Put runs and their result rows in, each run's earlier rows replaced."""
        con = self._connect()
        try:
            with con:
                for run in runs:
                    where = " AND ".join(f"{k} = ?" for k in RUN_KEY)
                    args = [run[k] for k in RUN_KEY]
                    con.execute(f"DELETE FROM runs WHERE {where}", args)
                    con.execute(f"DELETE FROM results WHERE {where}", args)
                    self._insert(con, "runs", RUN_FIELDS, run)
                for row in rows:
                    self._insert(con, "results", RESULT_FIELDS, row)
        finally:
            con.close()

    def _insert(self, con, table: str, fields, row: dict) -> None:
        con.execute(f"INSERT OR REPLACE INTO {table} ({', '.join(fields)}, mac) VALUES "
                    f"({', '.join('?' * (len(fields) + 1))})",
                    [row[f] for f in fields] + [self._mac(table, row, fields)])

    def forget(self, meta: TuneMeta) -> None:
        """Drop one search (`plait tune --fresh` measures it again)."""
        con = self._connect()
        try:
            with con:
                where = " AND ".join(f"{k} = ?" for k in RUN_KEY)
                args = [getattr(meta, k) for k in RUN_KEY]
                con.execute(f"DELETE FROM runs WHERE {where}", args)
                con.execute(f"DELETE FROM results WHERE {where}", args)
        finally:
            con.close()

    # ---- reading ----------------------------------------------------------------------
    def result(self, meta: TuneMeta) -> TuneResult | None:
        """The search filed under meta's run key, rebuilt; None when there is none or a
        row of it fails its check."""
        if not self.path.exists():
            return None
        con = self._connect()
        try:
            where = " AND ".join(f"{k} = ?" for k in RUN_KEY)
            args = [getattr(meta, k) for k in RUN_KEY]
            runs, bad_run = self._verified(con, "runs", RUN_FIELDS, where, args)
            rows, bad_rows = self._verified(con, "results", RESULT_FIELDS, where, args)
            if not runs or bad_run or bad_rows:     # a partly forged search is no answer
                return None
            if any((r["error"] or "").startswith("not tried") for r in rows):
                return None                          # cut short by its budget: measure again
        finally:
            con.close()
        run = runs[0]
        result = TuneResult(run["algorithm"], run["target"], json.loads(run["sizes"]),
                            run["default_ms"])
        for row in rows:
            keys = json.loads(row["candidate"])
            result.trials.append(Trial(keys.get("contraction"), row["error"], row["rel_err"],
                                       row["ms"], keys.get("kernels")))
        return result

    def best_keys(self, graph, target: str, sizes: dict) -> dict | None:
        """The fastest checked candidate's schedule keys for this algorithm, target and
        shape bucket, over every driver (the schedule is valid on any)."""
        if not self.path.exists():
            return None
        con = self._connect()
        try:
            where = "fingerprint = ? AND target = ? AND bucket = ? AND checked = 1"
            rows, _ = self._verified(con, "results", RESULT_FIELDS, where,
                                     [fingerprint(graph), target,
                                      bucket(sizes, graph.axis_order)])
        finally:
            con.close()
        timed = [r for r in rows if r["ms"] is not None]
        if not timed:
            return None
        return json.loads(min(timed, key=lambda r: (r["ms"], r["candidate"]))["candidate"])

    def all_rows(self) -> tuple[list[dict], list[dict]]:
        """Every verified run and result row (for export); rows failing the check are left out."""
        if not self.path.exists():
            return [], []
        con = self._connect()
        try:
            runs, _ = self._verified(con, "runs", RUN_FIELDS, "1 = 1", [])
            rows, _ = self._verified(con, "results", RESULT_FIELDS, "1 = 1", [])
        finally:
            con.close()
        return runs, rows
