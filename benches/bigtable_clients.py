"""Google's Python Bigtable client against one server (BIGTABLE_EMULATOR_HOST):
MutateRows of N cells (a row each, in calls of 10 000 entries), then a
ReadRows of the N rows. Prints one JSON line: seconds for each and a digest
of what was read, so that two servers' answers can be checked equal.
Run by scripts/bench-bigtable-clients, which starts the servers."""

import hashlib
import json
import sys
import time

from google.cloud.bigtable import Client
from google.cloud.bigtable.data import (
    BigtableDataClient,
    ReadRowsQuery,
    RowMutationEntry,
    SetCell,
)

rows = int(sys.argv[1])
table_id = "bench"
admin = Client(project="p", admin=True)
instance = admin.instance("i")
table = instance.table(table_id)
if table.exists():
    table.delete()
table.create(column_families={"cf": None})

client = BigtableDataClient(project="p")
target = client.get_table("i", table_id)

start = time.perf_counter()
batch = 10_000
for first in range(0, rows, batch):
    entries = [
        RowMutationEntry(
            b"row#%08d" % n,
            [SetCell("cf", b"v", b"value-%010d" % (n * 7919 % 1_000_003), timestamp_micros=1000)],
        )
        for n in range(first, min(first + batch, rows))
    ]
    target.bulk_mutate_rows(entries)
mutate = time.perf_counter() - start

start = time.perf_counter()
digest = hashlib.sha256()
count = 0
for row in target.read_rows_stream(ReadRowsQuery()):
    count += 1
    digest.update(row.row_key)
    for cell in row.cells:
        digest.update(cell.value)
read = time.perf_counter() - start

table.delete()
client.close()
print(
    json.dumps(
        {
            "mutate_s": round(mutate, 3),
            "read_s": round(read, 3),
            "rows_read": count,
            "digest": digest.hexdigest()[:16],
        }
    )
)
