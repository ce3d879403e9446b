"""The comparison bench's peers: SQLite and DuckDB load the readings from
the bench's Parquet file and answer the same questions.

Usage: peers.py JOB.json OUT.json. The job names the Parquet file, a
working directory and the queries (over a table `readings(key, pressure,
temperature, humidity, altitude)`); the output holds, per engine, the
ingest time and bytes on disk, and per query the median time and the rows.
A job naming `events` (a Parquet file of series events: region, balloon,
ts, four measures) loads those into a table `events` instead, keyed by
(region, balloon, ts), for the series layouts section; one with `again`
set asks its queries once more of the databases such a job loaded.
"""

import json
import os
import sqlite3
import sys
import time

import duckdb
import pyarrow.parquet as pq

COLUMNS = ["key", "pressure", "temperature", "humidity", "altitude"]


def measure(run, sql, job):
    """The warm-up run's rows and the median of the timed runs."""
    rows = run(sql)
    times = []
    started = time.perf_counter()
    while len(times) < job["min_runs"] or (
        len(times) < job["max_runs"] and time.perf_counter() - started < job["budget"]
    ):
        t = time.perf_counter()
        run(sql)
        times.append(time.perf_counter() - t)
    times.sort()
    return {"seconds": times[len(times) // 2], "rows": [list(r) for r in rows]}


def answer_all(db, job, engine=None):
    """Every query of the job on a connection: name -> measurement. A
    query gives one SQL text, or one per engine (`sqlite`, `duckdb`)."""
    run = lambda sql: db.execute(sql).fetchall()
    return {q["name"]: measure(run, q.get(engine) or q["sql"], job) for q in job["queries"]}


def sqlite(job):
    path = os.path.join(job["dir"], "readings.sqlite")
    started = time.perf_counter()
    db = sqlite3.connect(path)
    db.execute(
        "CREATE TABLE readings (key TEXT PRIMARY KEY, pressure REAL, temperature REAL, "
        "humidity REAL, altitude REAL) WITHOUT ROWID"
    )
    with db:
        for batch in pq.ParquetFile(job["parquet"]).iter_batches(columns=COLUMNS):
            columns = [batch.column(c).to_pylist() for c in COLUMNS]
            db.executemany("INSERT INTO readings VALUES (?, ?, ?, ?, ?)", zip(*columns))
    ingest = time.perf_counter() - started
    result = {"ingest": {"seconds": ingest, "bytes": os.path.getsize(path)}}
    result["queries"] = answer_all(db, job)
    db.close()
    return result


def duck(job):
    path = os.path.join(job["dir"], "readings.duckdb")
    started = time.perf_counter()
    db = duckdb.connect(path)
    db.execute(
        "CREATE TABLE readings AS SELECT key, pressure, temperature, humidity, altitude "
        "FROM read_parquet(?)",
        [job["parquet"]],
    )
    db.execute("CHECKPOINT")
    ingest = time.perf_counter() - started
    result = {"ingest": {"seconds": ingest, "bytes": os.path.getsize(path)}}
    result["queries"] = answer_all(db, job)
    db.close()
    return result


EVENT_COLUMNS = ["region", "balloon", "ts", "pressure", "temperature", "humidity", "altitude"]


def sqlite_events(job):
    """The events of a series, keyed by (region, balloon, ts) as SQLite's
    primary key: times as integer microseconds."""
    path = os.path.join(job["dir"], "events.sqlite")
    started = time.perf_counter()
    db = sqlite3.connect(path)
    db.execute(
        "CREATE TABLE events (region TEXT, balloon INTEGER, ts INTEGER, pressure REAL, "
        "temperature REAL, humidity REAL, altitude REAL, PRIMARY KEY (region, balloon, ts)) "
        "WITHOUT ROWID"
    )
    with db:
        for batch in pq.ParquetFile(job["events"]).iter_batches(columns=EVENT_COLUMNS):
            columns = [batch.column(c) for c in EVENT_COLUMNS]
            columns[2] = columns[2].cast("int64")
            columns = [c.to_pylist() for c in columns]
            db.executemany("INSERT INTO events VALUES (?, ?, ?, ?, ?, ?, ?)", zip(*columns))
    ingest = time.perf_counter() - started
    result = {"ingest": {"seconds": ingest, "bytes": os.path.getsize(path)}}
    result["queries"] = answer_all(db, job, "sqlite")
    db.close()
    return result


def duck_events(job):
    path = os.path.join(job["dir"], "events.duckdb")
    started = time.perf_counter()
    db = duckdb.connect(path)
    db.execute("CREATE TABLE events AS SELECT * FROM read_parquet(?)", [job["events"]])
    db.execute("CHECKPOINT")
    ingest = time.perf_counter() - started
    result = {"ingest": {"seconds": ingest, "bytes": os.path.getsize(path)}}
    result["queries"] = answer_all(db, job, "duckdb")
    db.close()
    return result


def events_again(job):
    """Another round of the job's queries on the events databases a first
    job loaded (the bench's rounds of per-series questions)."""
    sqlite_db = sqlite3.connect(os.path.join(job["dir"], "events.sqlite"))
    duck_db = duckdb.connect(os.path.join(job["dir"], "events.duckdb"), read_only=True)
    out = {
        "SQLite": {"queries": answer_all(sqlite_db, job, "sqlite")},
        "DuckDB": {"queries": answer_all(duck_db, job, "duckdb")},
    }
    sqlite_db.close()
    duck_db.close()
    return out


def main():
    job_path, out_path = sys.argv[1], sys.argv[2]
    with open(job_path) as f:
        job = json.load(f)
    if job.get("again"):
        out = events_again(job)
    elif "events" in job:
        out = {"SQLite": sqlite_events(job), "DuckDB": duck_events(job)}
    else:
        out = {"SQLite": sqlite(job), "DuckDB": duck(job)}
    with open(out_path, "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
