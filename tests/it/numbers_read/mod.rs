//! A read of rows' columns as numbers taken both ways, a row at a time
//! (`next_numbers`) and in runs of rows (`next_number_rows`), for tests
//! to compare.

use cellar::{NumberRow, NumberRows, Numbers, RowStream};

/// A row as a numbers read gives it: its key, each wanted column's
/// timestamps and values (as words), and its misfit.
pub type Read = (Vec<u8>, Vec<(Vec<i64>, Vec<u64>)>, Option<(usize, Vec<u8>)>);

fn of_row(row: &NumberRow, columns: usize) -> Read {
    let columns = (0..columns)
        .map(|c| (row.column(c).0.to_vec(), row.column(c).1.to_vec()))
        .collect();
    let misfit = row.misfit().map(|(c, v)| (c, v.to_vec()));
    (row.key.clone(), columns, misfit)
}

/// The rows of `stream` read a row at a time.
pub fn one_by_one(stream: &mut RowStream, wanted: &[(usize, Vec<u8>)]) -> Vec<Read> {
    let mut row = NumberRow::default();
    let mut out = Vec::new();
    while stream.next_numbers(wanted, &mut row).unwrap() {
        out.push(of_row(&row, wanted.len()));
    }
    out
}

/// The rows of `stream` read in runs of at most `max` where the store
/// gives them so, and how many runs it gave.
pub fn at_once(
    stream: &mut RowStream,
    wanted: &[(usize, Vec<u8>)],
    max: usize,
) -> (Vec<Read>, usize) {
    let (mut row, mut rows) = (NumberRow::default(), NumberRows::default());
    let (mut out, mut runs) = (Vec::new(), 0);
    loop {
        match stream
            .next_number_rows(wanted, max, &mut row, &mut rows)
            .unwrap()
        {
            Numbers::End => return (out, runs),
            Numbers::Row => out.push(of_row(&row, wanted.len())),
            Numbers::Rows => {
                assert!((1..=max).contains(&rows.len()), "at most max rows");
                runs += 1;
                for i in 0..rows.len() {
                    let columns = (0..wanted.len())
                        .map(|c| match rows.column(c) {
                            Some((t, w)) => (vec![t[i]], vec![w[i]]),
                            None => (Vec::new(), Vec::new()),
                        })
                        .collect();
                    out.push((rows.key(i).unwrap().into_owned(), columns, None));
                }
            }
        }
    }
}
