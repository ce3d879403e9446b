"""Google's Python Bigtable client against cellar's Bigtable face.

Run by tests/it/bigtable_face.rs with BIGTABLE_EMULATOR_HOST pointing at
`cellar serve --bigtable-addr`. Each step checks what the client got; the
last line printed is "ok" when all passed.
"""

import datetime

from google.api_core import exceptions
from google.cloud import bigtable
from google.cloud.bigtable import column_family, row_filters
from google.cloud.bigtable.row_set import RowSet


def main():
    client = bigtable.Client(project="p", admin=True)
    instance = client.instance("i")
    table = instance.table("py")
    table.create(
        column_families={
            "cf": column_family.MaxVersionsGCRule(2),
            "meta": column_family.MaxAgeGCRule(datetime.timedelta(days=7)),
        }
    )
    families = table.list_column_families()
    assert sorted(families) == ["cf", "meta"], families
    assert families["cf"].gc_rule == column_family.MaxVersionsGCRule(2), families["cf"].gc_rule
    assert [t.table_id for t in instance.list_tables()] == ["py"]

    # One row at a time, then a batch.
    row = table.direct_row(b"user#1")
    row.set_cell("cf", b"name", b"Ada")
    row.set_cell("cf", b"lang", b"en")
    row.commit()
    rows = []
    for i in range(2, 12):
        r = table.direct_row(f"user#{i}".encode())
        r.set_cell("cf", b"name", f"n{i}".encode())
        r.set_cell("meta", b"seen", str(i).encode())
        rows.append(r)
    statuses = table.mutate_rows(rows)
    assert all(s.code == 0 for s in statuses), statuses

    got = table.read_row(b"user#1")
    assert got.cells["cf"][b"name"][0].value == b"Ada", got.cells
    assert table.read_row(b"nobody") is None

    # Filters: a chain of a key regex, a family and the latest cell.
    chain = row_filters.RowFilterChain(
        filters=[
            row_filters.RowKeyRegexFilter(b"user#1.*"),
            row_filters.FamilyNameRegexFilter("cf"),
            row_filters.ColumnQualifierRegexFilter(b"name"),
            row_filters.CellsColumnLimitFilter(1),
        ]
    )
    names = {r.row_key: r.cells["cf"][b"name"][0].value for r in table.read_rows(filter_=chain)}
    assert names == {b"user#1": b"Ada", b"user#10": b"n10", b"user#11": b"n11"}, names

    # A row set of a range, a limit; an interleave with labels.
    row_set = RowSet()
    row_set.add_row_range_from_keys(start_key=b"user#2", end_key=b"user#5")
    keys = [r.row_key for r in table.read_rows(row_set=row_set, limit=2)]
    assert keys == [b"user#2", b"user#3"], keys
    interleave = row_filters.RowFilterUnion(
        filters=[
            row_filters.RowFilterChain(
                filters=[
                    row_filters.FamilyNameRegexFilter("meta"),
                    row_filters.ApplyLabelFilter("m"),
                ]
            ),
            row_filters.RowFilterChain(
                filters=[
                    row_filters.ColumnQualifierRegexFilter(b"name"),
                    row_filters.StripValueTransformerFilter(True),
                ]
            ),
        ]
    )
    r = table.read_row(b"user#3", filter_=interleave)
    assert r.cells["meta"][b"seen"][0].labels == ["m"], r.cells
    assert r.cells["cf"][b"name"][0].value == b"", r.cells

    # Versions: GC keeps two, the filter asks for one. Each write gets its
    # own millisecond (Bigtable's granularity): two writes in the same
    # millisecond are one version, the later replacing the earlier.
    base = datetime.datetime.now(datetime.timezone.utc)
    for i, v in enumerate([b"v1", b"v2", b"v3"]):
        row = table.direct_row(b"versions")
        row.set_cell("cf", b"q", v, timestamp=base + datetime.timedelta(milliseconds=i))
        row.commit()
    cells = table.read_row(b"versions").cells["cf"][b"q"]
    assert [c.value for c in cells] == [b"v3", b"v2"], cells

    # Check-and-mutate and read-modify-write.
    cond = table.conditional_row(
        b"user#1", filter_=row_filters.ValueRegexFilter(b"Ada")
    )
    cond.set_cell("cf", b"checked", b"yes", state=True)
    cond.set_cell("cf", b"checked", b"no", state=False)
    assert cond.commit() is True
    assert table.read_row(b"user#1").cells["cf"][b"checked"][0].value == b"yes"
    counter = table.append_row(b"counter")
    counter.increment_cell_value("cf", b"n", 5)
    counter.commit()
    counter = table.append_row(b"counter")
    counter.increment_cell_value("cf", b"n", 2)
    counter.append_cell_value("cf", b"log", b"+2")
    result = counter.commit()
    assert result["cf"][b"n"][0][0] == (7).to_bytes(8, "big"), result

    # Samples, a dropped prefix, a missing table, a deleted table.
    samples = list(table.sample_row_keys())
    assert samples and samples[-1].row_key == b"", samples
    table.drop_by_prefix(b"user#1")
    left = sorted(r.row_key for r in table.read_rows())
    assert b"user#1" not in left and b"user#10" not in left and b"user#2" in left, left
    try:
        instance.table("nosuch").read_row(b"k")
        raise AssertionError("a missing table was read")
    except exceptions.NotFound as e:
        assert "nosuch" in str(e), e
    table.delete()
    assert list(instance.list_tables()) == []
    print("ok")


if __name__ == "__main__":
    main()
