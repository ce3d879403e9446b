"""cellar through the Python ADBC Flight SQL driver, as an analyst would use it.

Run by tests/flight_python.rs against a server it started:
    python adbc_interop.py grpc://127.0.0.1:PORT USER PASSWORD READER_PASSWORD FILES_DIR OUTSIDE_DIR
USER is an admin; the user rita, with READER_PASSWORD, a reader. FILES_DIR
is the one directory the server lets clients use (read and write);
OUTSIDE_DIR is not. Exits non-zero with a message on the first thing that
does not hold.
"""

import os
import sys

import adbc_driver_flightsql.dbapi as flight_sql
import adbc_driver_manager
import pyarrow as pa

uri, user, password, reader_password, files_dir, outside_dir = sys.argv[1:7]


def connect(pw, name=None):
    return flight_sql.connect(uri, db_kwargs={"username": name or user, "password": pw})


def refused(cur, sql, needle):
    """Runs sql, which must fail with an error containing needle."""
    try:
        cur.execute(sql)
        cur.fetchall()
    except adbc_driver_manager.Error as e:
        return needle in str(e)
    return False


def check(cond, what):
    if not cond:
        raise SystemExit(f"FAILED: {what}")
    print(f"ok: {what}")


# Wrong credentials are refused with UNAUTHENTICATED.
try:
    with connect("not the password") as bad, bad.cursor() as cur:
        cur.execute("SELECT 1")
        cur.fetchall()
    check(False, "a wrong password is refused")
except adbc_driver_manager.Error as e:
    check("Unauthenticated" in str(e) or "UNAUTHENTICATED" in str(e), f"a wrong password is refused ({type(e).__name__})")

with connect(password) as conn, conn.cursor() as cur:
    # DDL and a plain query.
    cur.execute(
        "CREATE TABLE py_meter (ROW KEY (meter TEXT, day INT(8)), FAMILY r, kwh DOUBLE IN r)"
    )
    cur.fetchall()
    cur.execute("SELECT 41 + 1 AS answer")
    check(cur.fetchall() == [(42,)], "a query answers")

    # Ingest a pyarrow table into the existing table.
    meters = [f"m{m:04d}" for m in range(20) for _ in range(30)]
    days = [20240101 + d for _ in range(20) for d in range(30)]
    kwh = [float(i % 97) / 10 for i in range(600)]
    table = pa.table({"meter": meters, "day": days, "kwh": kwh})
    rows = cur.adbc_ingest("py_meter", table, mode="append")
    check(rows in (600, -1), f"ingest appends 600 rows (driver says {rows})")
    cur.execute("SELECT count(*) AS n FROM py_meter")
    check(cur.fetchall() == [(600,)], "the ingested rows are all there")

    # A parameterised query (a prepared statement with bound values).
    cur.execute(
        "SELECT day, kwh FROM py_meter WHERE meter = ? AND day >= ? ORDER BY day",
        ("m0002", 20240128),
    )
    got = cur.fetchall()
    check([d for d, _ in got] == [20240128, 20240129, 20240130], f"parameters bind ({got})")

    # Ingest creating a table: the first column is the row key.
    events = pa.table(
        {
            "id": ["acme#2024-01-01#a", "acme#2024-01-02#b", "zeta#2024-01-01#c"],
            "amount": [10, 20, 30],
            "note": ["x", "y", "z"],
        }
    )
    cur.adbc_ingest("py_events", events, mode="create")
    cur.execute("SELECT id, amount FROM py_events WHERE id LIKE 'acme#%' ORDER BY id")
    got = cur.fetchall()
    check(got == [("acme#2024-01-01#a", 10), ("acme#2024-01-02#b", 20)], f"key-prefix read back ({got})")
    cur.execute("EXPLAIN SELECT id FROM py_events WHERE id LIKE 'acme#%'")
    plan = " ".join(str(r) for r in cur.fetchall())
    check("acme#" in plan, "the key prefix is a range in the scan")

    # Arrow all the way: fetch a result as a pyarrow table.
    cur.execute("SELECT meter, sum(kwh) AS total FROM py_meter GROUP BY meter ORDER BY meter")
    arrow = cur.fetch_arrow_table()
    check(arrow.num_rows == 20 and arrow.column_names == ["meter", "total"], "results arrive as Arrow")

    # Listing objects: catalogs, schemas, tables and their columns.
    objects = conn.adbc_get_objects(depth="all").read_all().to_pylist()
    tables = {
        t["table_name"]: [c["column_name"] for c in (t["table_columns"] or [])]
        for cat in objects
        for schema in cat["catalog_db_schemas"] or []
        for t in schema["db_schema_tables"] or []
    }
    check({"py_meter", "py_events"} <= set(tables), f"get_objects lists the tables ({sorted(tables)})")
    check("kwh" in tables["py_meter"], "get_objects lists the columns")
    check("TABLE" in conn.adbc_get_table_types(), "table types")
    info = conn.adbc_get_info()
    check(info.get("vendor_name") == "cellar", f"server name in info ({info.get('vendor_name')})")

    # Writes run when executed, whether or not the result is fetched.
    cur.execute("CREATE TABLE py_w (FAMILY f, n BIGINT IN f)")
    for i in range(100):
        cur.execute(f"INSERT INTO py_w (_key, n) VALUES ('s{i:03d}', {i})")
    for i in range(100):
        cur.execute("INSERT INTO py_w (_key, n) VALUES (?, ?)", (f"p{i:03d}", i))
    cur.executemany("INSERT INTO py_w (_key, n) VALUES (?, ?)", [(f"m{i:03d}", i) for i in range(50)])
    # A 10 000-row parameter batch is planned once (SHOW STATS counts the
    # statements the server planned) and written in batches.
    def planned():
        cur.execute("SHOW STATS")
        return dict(cur.fetchall())["statements_planned"]

    cur.execute("CREATE TABLE py_many (FAMILY f, n BIGINT IN f, s TEXT IN f)")
    before = planned()
    cur.executemany(
        "INSERT INTO py_many (_key, n, s) VALUES (?, ?, ?)",
        [(f"k{i:05d}", i, f"v{i}") for i in range(10000)],
    )
    after = planned()
    check(after - before <= 3, f"a 10 000-row parameter batch is planned once ({after - before} plans)")
    cur.execute("SELECT count(*), sum(n), max(s) FROM py_many")
    got = cur.fetchall()
    check(got == [(10000, 49995000, "v9999")], f"every parameter row is written ({got})")

    cur.execute("INSERT INTO py_w (_key, n) VALUES ('ctr', 0)")
    for _ in range(30):
        cur.execute("UPDATE py_w SET n = n + 1 WHERE _key = 'ctr'")
    cur.execute("SELECT count(*) FROM py_w")
    got = cur.fetchall()
    check(got == [(251,)], f"unfetched INSERTs all ran ({got})")
    cur.execute("SELECT n FROM py_w WHERE _key = 'ctr'")
    got = cur.fetchall()
    check(got == [(30,)], f"unfetched UPDATEs all ran once ({got})")

    # Bad SQL is an error naming the problem, and the session goes on.
    try:
        cur.execute("SELEC 1")
        check(False, "bad SQL is refused")
    except adbc_driver_manager.Error as e:
        check("syntax" in str(e).lower() or "InvalidArgument" in str(e) or "INVALID_ARGUMENT" in str(e), "bad SQL is refused")
    cur.execute("SELECT count(*) FROM py_events")
    check(cur.fetchall() == [(3,)], "the session survives an error")

# Security: a reader queries and is refused writes naming the role; files
# only inside the directory the server allows; sessions are each client's.
with connect(reader_password, "rita") as conn, conn.cursor() as cur:
    cur.execute("SELECT count(*) FROM py_events")
    check(cur.fetchall() == [(3,)], "a reader queries")
    check(
        refused(cur, "INSERT INTO py_events (id, amount, note) VALUES ('x#1', 1, 'n')", "needs the user role"),
        "a reader's INSERT is refused naming the role",
    )
    check(refused(cur, "DROP TABLE py_events", "needs the admin role"), "a reader's DROP is refused")
    check(
        refused(cur, "COPY (SELECT 1 AS x) TO 'r.csv'", "needs the admin role"),
        "a reader reaches no file",
    )

with connect(password) as one, connect(password) as two, one.cursor() as a, two.cursor() as b:
    outside = os.path.join(outside_dir, "leak.csv")
    check(
        refused(a, f"COPY (SELECT 'x' AS x) TO '{outside}'", "outside the directories"),
        "COPY TO outside --files-dir is refused",
    )
    check(not os.path.exists(outside), "and writes nothing")
    check(
        refused(a, "SELECT * FROM '/etc/hostname'", "/etc/hostname"),
        "a path outside --files-dir is no table",
    )
    a.execute("COPY (SELECT id, amount FROM py_events ORDER BY id) TO 'events.csv'")
    a.fetchall()
    check(os.path.exists(os.path.join(files_dir, "events.csv")), "COPY TO a relative path lands in --files-dir")
    a.execute("CREATE EXTERNAL TABLE ev STORED AS CSV LOCATION 'events.csv' OPTIONS ('format.has_header' 'true')")
    a.fetchall()
    a.execute("SELECT count(*) FROM ev")
    check(a.fetchall() == [(3,)], "an external table inside --files-dir reads")
    check(refused(b, "SELECT count(*) FROM ev", "not found"), "another client's session does not see it")

print("all ADBC checks passed")
