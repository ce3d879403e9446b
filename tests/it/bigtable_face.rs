//! cellar's Bigtable face (`cellar serve --bigtable-addr`) through Google's
//! generated clients, call by call: RowFilter end to end and the chunked
//! ReadRows protocol, writes, check-and-mutate, read-modify-write and
//! aggregates, the admin calls, roles, hostile and bad requests, and one
//! store seen by both faces (SQL and Bigtable) at once. The Bigtable
//! backend's tests (`bigtable.rs`) run against this face too; Google's own
//! tools and client tests against the binary are `bigtable_clients.rs`.

#![cfg(feature = "bigtable")]

use std::collections::HashMap;

use cellar::flight::{Credentials, ServeOptions, TokenEntry};
use cellar::{Role, SqlSession, Store};
use datafusion::arrow::util::pretty::pretty_format_batches;
use googleapis_tonic_google_bigtable_admin_v2::google::bigtable::admin::v2 as admin;
use googleapis_tonic_google_bigtable_v2::google::bigtable::v2 as data;

use admin::bigtable_table_admin_client::BigtableTableAdminClient;
use data::bigtable_client::BigtableClient;
use data::mutation::{Mutation as M, SetCell};
use data::row_filter::{Chain, Condition, Filter as F, Interleave};
use tonic::transport::Channel;

const INSTANCE: &str = "projects/p/instances/i";

fn table(name: &str) -> String {
    format!("{INSTANCE}/tables/{name}")
}

/// A face serving `store` on a free port of this test's runtime.
struct Face {
    addr: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Face {
    async fn start(store: Store, credentials: Credentials) -> Face {
        let options = ServeOptions {
            credentials,
            ..Default::default()
        };
        Face::start_with(store, options).await
    }

    async fn start_with(store: Store, options: ServeOptions) -> Face {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(async move {
            cellar::bigtable_server::serve_until(store, listener, &options, async {
                let _ = stopped.await;
            })
            .await
            .unwrap();
        });
        Face {
            addr,
            stop: Some(stop),
        }
    }

    async fn channel(&self) -> Channel {
        Channel::from_shared(format!("http://{}", self.addr))
            .unwrap()
            .connect()
            .await
            .unwrap()
    }

    async fn data(&self) -> BigtableClient<Channel> {
        BigtableClient::new(self.channel().await).max_decoding_message_size(64 << 20)
    }

    async fn admin(&self) -> BigtableTableAdminClient<Channel> {
        BigtableTableAdminClient::new(self.channel().await)
    }
}

impl Drop for Face {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

fn f(filter: F) -> data::RowFilter {
    data::RowFilter {
        filter: Some(filter),
    }
}

fn chain(filters: Vec<data::RowFilter>) -> data::RowFilter {
    f(F::Chain(Chain { filters }))
}

fn set(family: &str, qualifier: &str, ts: i64, value: impl Into<Vec<u8>>) -> data::Mutation {
    data::Mutation {
        mutation: Some(M::SetCell(SetCell {
            family_name: family.into(),
            column_qualifier: qualifier.as_bytes().to_vec(),
            timestamp_micros: ts,
            value: value.into(),
        })),
    }
}

fn entry(key: &str, mutations: Vec<data::Mutation>) -> data::mutate_rows_request::Entry {
    data::mutate_rows_request::Entry {
        row_key: key.as_bytes().to_vec(),
        mutations,
        idempotency: None,
    }
}

/// A cell as read: `family:qualifier@ts=value[label]`.
type Cells = Vec<String>;

/// A cell as read, exactly.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ReadCell {
    pub family: String,
    pub qualifier: Vec<u8>,
    pub timestamp: i64,
    pub value: Vec<u8>,
    pub labels: Vec<String>,
}

/// Rows as read: each key with its cells in the order they came.
pub type ReadRows = Vec<(Vec<u8>, Vec<ReadCell>)>;

/// Reads with the chunk protocol's rules (a chunk names what changed; a
/// split value is joined; a row ends at commit), checking them as it goes.
/// Also the most pieces one value came in.
pub async fn read_exactly(
    client: &mut BigtableClient<Channel>,
    request: data::ReadRowsRequest,
) -> Result<(ReadRows, usize), tonic::Status> {
    let mut stream = client.read_rows(request).await?.into_inner();
    let mut rows = Vec::new();
    let (mut key, mut family, mut qualifier) = (None::<Vec<u8>>, String::new(), Vec::new());
    let (mut cells, mut value, mut pieces, mut most) = (Vec::new(), Vec::new(), 0, 0);
    let (mut timestamp, mut labels) = (0i64, Vec::new());
    while let Some(response) = stream.message().await? {
        for chunk in response.chunks {
            // A chunk may repeat its row's key (Google's emulator does).
            if !chunk.row_key.is_empty() && key.as_ref() != Some(&chunk.row_key) {
                assert!(key.is_none(), "a row began before the last was committed");
                key = Some(chunk.row_key.clone());
            }
            assert!(key.is_some(), "a chunk outside a row");
            if let Some(name) = chunk.family_name {
                assert!(chunk.qualifier.is_some(), "a family without a qualifier");
                family = name;
            }
            if let Some(q) = chunk.qualifier {
                qualifier = q;
            }
            if pieces == 0 {
                timestamp = chunk.timestamp_micros;
                labels = chunk.labels.clone();
            }
            value.extend_from_slice(&chunk.value);
            pieces += 1;
            if chunk.value_size > 0 {
                continue;
            }
            most = most.max(pieces);
            pieces = 0;
            cells.push(ReadCell {
                family: family.clone(),
                qualifier: qualifier.clone(),
                timestamp,
                value: std::mem::take(&mut value),
                labels: std::mem::take(&mut labels),
            });
            if let Some(data::read_rows_response::cell_chunk::RowStatus::CommitRow(true)) =
                chunk.row_status
            {
                rows.push((key.take().unwrap(), std::mem::take(&mut cells)));
            }
        }
    }
    assert!(key.is_none(), "the stream ended inside a row");
    Ok((rows, most))
}

/// `read_exactly` with each cell as text (`Cells`).
async fn read(
    client: &mut BigtableClient<Channel>,
    request: data::ReadRowsRequest,
) -> Result<(Vec<(String, Cells)>, usize), tonic::Status> {
    let (rows, most) = read_exactly(client, request).await?;
    let rows = rows
        .into_iter()
        .map(|(key, cells)| {
            let cells = cells
                .iter()
                .map(|c| {
                    let label = c
                        .labels
                        .first()
                        .map(|l| format!("[{l}]"))
                        .unwrap_or_default();
                    let value = if c.value.len() > 64 {
                        format!("<{} bytes>", c.value.len())
                    } else {
                        String::from_utf8_lossy(&c.value).into_owned()
                    };
                    format!(
                        "{}:{}@{}={value}{label}",
                        c.family,
                        String::from_utf8_lossy(&c.qualifier),
                        c.timestamp
                    )
                })
                .collect();
            (String::from_utf8_lossy(&key).into_owned(), cells)
        })
        .collect();
    Ok((rows, most))
}

fn request(table_name: &str) -> data::ReadRowsRequest {
    data::ReadRowsRequest {
        table_name: table(table_name),
        ..Default::default()
    }
}

fn sum_family() -> admin::ColumnFamily {
    use admin::r#type::{Aggregate, Int64, Kind, aggregate::Aggregator, aggregate::Sum};
    let int64 = || {
        Some(Box::new(admin::Type {
            kind: Some(Kind::Int64Type(Int64::default())),
        }))
    };
    admin::ColumnFamily {
        gc_rule: None,
        value_type: Some(admin::Type {
            kind: Some(Kind::AggregateType(Box::new(Aggregate {
                input_type: int64(),
                state_type: int64(),
                aggregator: Some(Aggregator::Sum(Sum {})),
            }))),
        }),
    }
}

async fn create(face: &Face, name: &str) {
    let mut families = HashMap::new();
    families.insert(
        "cf".to_string(),
        admin::ColumnFamily {
            gc_rule: Some(admin::GcRule {
                rule: Some(admin::gc_rule::Rule::MaxNumVersions(3)),
            }),
            value_type: None,
        },
    );
    families.insert("agg".to_string(), sum_family());
    let made = face
        .admin()
        .await
        .create_table(admin::CreateTableRequest {
            parent: INSTANCE.into(),
            table_id: name.into(),
            table: Some(admin::Table {
                column_families: families,
                ..Default::default()
            }),
            initial_splits: vec![],
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(made.name, table(name));
    assert_eq!(made.column_families.len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filters_chunks_and_writes_answer_as_bigtable_does() {
    let dir = tempfile::tempdir().unwrap();
    let face = Face::start(Store::open(dir.path()).unwrap(), Credentials::default()).await;
    create(&face, "t").await;
    let mut client = face.data().await;
    let big = vec![b'x'; 3 << 20];
    let written = client
        .mutate_rows(data::MutateRowsRequest {
            table_name: table("t"),
            entries: vec![
                entry(
                    "r1",
                    vec![set("cf", "a", 1000, "w"), set("cf", "b", 2000, "x")],
                ),
                entry(
                    "r2",
                    vec![set("cf", "a", 1000, "y"), set("cf", "a", 3000, "z")],
                ),
                entry("r3", vec![set("cf", "big", 1000, big.clone())]),
                entry("r4", vec![set("nope", "a", 1000, "bad")]),
                entry("r5", vec![set("cf", "b", 5000, "v")]),
            ],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .message()
        .await
        .unwrap()
        .unwrap();
    let codes: Vec<i32> = written
        .entries
        .iter()
        .map(|e| e.status.as_ref().unwrap().code)
        .collect();
    // The entry naming a missing family fails alone, saying which.
    assert_eq!(codes, [0, 0, 0, tonic::Code::NotFound as i32, 0]);
    assert!(
        written.entries[3]
            .status
            .as_ref()
            .unwrap()
            .message
            .contains("nope")
    );

    // Everything: the 3 MiB value comes in pieces and is joined.
    let (rows, most) = read(&mut client, request("t")).await.unwrap();
    assert_eq!(rows.len(), 4);
    assert_eq!(rows[1].1, ["cf:a@3000=z", "cf:a@1000=y"]);
    assert_eq!(rows[2].1, [format!("cf:big@1000=<{} bytes>", big.len())]);
    assert!(most >= 3, "{most}");

    // The proto's Sink example: labelled copies beside what passes on.
    let sink = chain(vec![
        f(F::FamilyNameRegexFilter("cf".into())),
        f(F::Interleave(Interleave {
            filters: vec![
                f(F::PassAllFilter(true)),
                chain(vec![
                    f(F::ApplyLabelTransformer("foo".into())),
                    f(F::Sink(true)),
                ]),
            ],
        })),
        f(F::ColumnQualifierRegexFilter(b"b".to_vec())),
    ]);
    let (rows, _) = read(
        &mut client,
        data::ReadRowsRequest {
            rows: Some(data::RowSet {
                row_keys: vec![b"r1".to_vec()],
                row_ranges: vec![],
            }),
            filter: Some(sink),
            ..request("t")
        },
    )
    .await
    .unwrap();
    assert_eq!(
        rows,
        [(
            "r1".to_string(),
            vec![
                "cf:a@1000=w[foo]".to_string(),
                "cf:b@2000=x".to_string(),
                "cf:b@2000=x[foo]".to_string()
            ]
        )]
    );

    // The limit counts rows the filter leaves, in reverse, over a row set
    // of a key and a range; stripped values.
    let (rows, _) = read(
        &mut client,
        data::ReadRowsRequest {
            rows: Some(data::RowSet {
                row_keys: vec![b"r5".to_vec()],
                row_ranges: vec![data::RowRange {
                    start_key: Some(data::row_range::StartKey::StartKeyClosed(b"r1".to_vec())),
                    end_key: Some(data::row_range::EndKey::EndKeyOpen(b"r3".to_vec())),
                }],
            }),
            filter: Some(chain(vec![
                f(F::ColumnQualifierRegexFilter(b"b".to_vec())),
                f(F::StripValueTransformer(true)),
            ])),
            rows_limit: 2,
            reversed: true,
            ..request("t")
        },
    )
    .await
    .unwrap();
    assert_eq!(
        rows,
        [
            ("r5".to_string(), vec!["cf:b@5000=".to_string()]),
            ("r1".to_string(), vec!["cf:b@2000=".to_string()])
        ]
    );

    // A condition on a value, and the newest cell of each column.
    let condition = f(F::Condition(Box::new(Condition {
        predicate_filter: Some(Box::new(f(F::ValueRegexFilter(b"z".to_vec())))),
        true_filter: Some(Box::new(f(F::CellsPerColumnLimitFilter(1)))),
        false_filter: Some(Box::new(f(F::BlockAllFilter(true)))),
    })));
    let (rows, _) = read(
        &mut client,
        data::ReadRowsRequest {
            filter: Some(condition),
            ..request("t")
        },
    )
    .await
    .unwrap();
    assert_eq!(rows, [("r2".to_string(), vec!["cf:a@3000=z".to_string()])]);

    // Check-and-mutate: atomic on the row, each branch by the predicate.
    for (value, matched) in [("z", true), ("nothing", false)] {
        let answer = client
            .check_and_mutate_row(data::CheckAndMutateRowRequest {
                table_name: table("t"),
                row_key: b"r2".to_vec(),
                predicate_filter: Some(f(F::ValueRegexFilter(value.as_bytes().to_vec()))),
                true_mutations: vec![set("cf", "seen", 7000, "yes")],
                false_mutations: vec![set("cf", "seen", 8000, "no")],
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(answer.predicate_matched, matched);
    }
    let (rows, _) = read(
        &mut client,
        data::ReadRowsRequest {
            rows: Some(data::RowSet {
                row_keys: vec![b"r2".to_vec()],
                row_ranges: vec![],
            }),
            filter: Some(f(F::ColumnQualifierRegexFilter(b"seen".to_vec()))),
            ..request("t")
        },
    )
    .await
    .unwrap();
    assert_eq!(rows[0].1, ["cf:seen@8000=no", "cf:seen@7000=yes"]);

    // Read-modify-write answers the cells it wrote; aggregates add.
    let rmw = |rule| data::ReadModifyWriteRowRequest {
        table_name: table("t"),
        row_key: b"counter".to_vec(),
        rules: vec![data::ReadModifyWriteRule {
            family_name: "cf".into(),
            column_qualifier: b"n".to_vec(),
            rule: Some(rule),
        }],
        ..Default::default()
    };
    use data::read_modify_write_rule::Rule;
    client
        .read_modify_write_row(rmw(Rule::IncrementAmount(5)))
        .await
        .unwrap();
    let row = client
        .read_modify_write_row(rmw(Rule::IncrementAmount(-2)))
        .await
        .unwrap()
        .into_inner()
        .row
        .unwrap();
    assert_eq!(
        row.families[0].columns[0].cells[0].value,
        3i64.to_be_bytes()
    );
    for n in [5i64, 7] {
        client
            .mutate_row(data::MutateRowRequest {
                table_name: table("t"),
                row_key: b"sums".to_vec(),
                mutations: vec![data::Mutation {
                    mutation: Some(M::AddToCell(data::mutation::AddToCell {
                        family_name: "agg".into(),
                        column_qualifier: Some(data::Value {
                            r#type: None,
                            kind: Some(data::value::Kind::RawValue(b"total".to_vec())),
                        }),
                        timestamp: Some(data::Value {
                            r#type: None,
                            kind: Some(data::value::Kind::RawTimestampMicros(0)),
                        }),
                        input: Some(data::Value {
                            r#type: None,
                            kind: Some(data::value::Kind::IntValue(n)),
                        }),
                    })),
                }],
                ..Default::default()
            })
            .await
            .unwrap();
    }
    let (rows, _) = read(
        &mut client,
        data::ReadRowsRequest {
            rows: Some(data::RowSet {
                row_keys: vec![b"sums".to_vec()],
                row_ranges: vec![],
            }),
            ..request("t")
        },
    )
    .await
    .unwrap();
    let twelve = String::from_utf8_lossy(&12i64.to_be_bytes()).into_owned();
    assert_eq!(rows[0].1, [format!("agg:total@0={twelve}")]);

    // The samples end with the empty key.
    let mut samples = client
        .sample_row_keys(data::SampleRowKeysRequest {
            table_name: table("t"),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let mut last = None;
    while let Some(sample) = samples.message().await.unwrap() {
        last = Some(sample.row_key);
    }
    assert_eq!(last, Some(Vec::new()));

    // DropRowRange by prefix, then everything.
    let mut admin = face.admin().await;
    admin
        .drop_row_range(admin::DropRowRangeRequest {
            name: table("t"),
            target: Some(admin::drop_row_range_request::Target::RowKeyPrefix(
                b"r".to_vec(),
            )),
        })
        .await
        .unwrap();
    let (rows, _) = read(&mut client, request("t")).await.unwrap();
    let keys: Vec<&str> = rows.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys, ["counter", "sums"]);
    admin
        .drop_row_range(admin::DropRowRangeRequest {
            name: table("t"),
            target: Some(admin::drop_row_range_request::Target::DeleteAllDataFromTable(true)),
        })
        .await
        .unwrap();
    assert!(read(&mut client, request("t")).await.unwrap().0.is_empty());
}

/// A request carrying `who`'s bearer token (none for "").
fn with<T>(who: &str, message: T) -> tonic::Request<T> {
    let mut req = tonic::Request::new(message);
    if !who.is_empty() {
        req.metadata_mut().insert(
            "authorization",
            format!("Bearer {who}-secret").parse().unwrap(),
        );
    }
    req
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn roles_bad_requests_and_hostile_ones_get_bigtables_codes() {
    let dir = tempfile::tempdir().unwrap();
    let token = |name: &str, role| TokenEntry {
        name: name.into(),
        token: format!("{name}-secret"),
        role,
    };
    let credentials = Credentials {
        tokens: vec![
            token("rita", Role::Reader),
            token("uma", Role::User),
            token("ada", Role::Admin),
        ],
        ..Default::default()
    };
    let face = Face::start(Store::open(dir.path()).unwrap(), credentials).await;
    let create = |who: &str| {
        with(
            who,
            admin::CreateTableRequest {
                parent: INSTANCE.into(),
                table_id: "t".into(),
                table: Some(admin::Table {
                    column_families: HashMap::from([(
                        "cf".to_string(),
                        admin::ColumnFamily::default(),
                    )]),
                    ..Default::default()
                }),
                initial_splits: vec![],
            },
        )
    };
    let mut admin = face.admin().await;
    let mut client = face.data().await;
    // No token, a user's: refused; an admin's: made.
    let anon = admin.create_table(create("")).await.unwrap_err();
    assert_eq!(anon.code(), tonic::Code::Unauthenticated);
    let user = admin.create_table(create("uma")).await.unwrap_err();
    assert_eq!(user.code(), tonic::Code::PermissionDenied);
    assert!(user.message().contains("uma") && user.message().contains("admin"));
    admin.create_table(create("ada")).await.unwrap();
    let again = admin.create_table(create("ada")).await.unwrap_err();
    assert_eq!(again.code(), tonic::Code::AlreadyExists);
    // A reader reads but does not write; a user writes.
    let mutate = |who: &str| {
        with(
            who,
            data::MutateRowRequest {
                table_name: table("t"),
                row_key: b"k".to_vec(),
                mutations: vec![set("cf", "q", 1000, "v")],
                ..Default::default()
            },
        )
    };
    let reader = client.mutate_row(mutate("rita")).await.unwrap_err();
    assert_eq!(reader.code(), tonic::Code::PermissionDenied);
    client.mutate_row(mutate("uma")).await.unwrap();
    let read_as = |who: &str, req: data::ReadRowsRequest| with(who, req);
    let rows = client
        .read_rows(read_as("rita", request("t")))
        .await
        .unwrap()
        .into_inner()
        .message()
        .await
        .unwrap()
        .unwrap();
    assert_eq!(rows.chunks.len(), 1);

    // Bad and hostile requests: each its code and what was wrong.
    let refused = |req: data::ReadRowsRequest| {
        let mut client = client.clone();
        let req = read_as("rita", req);
        async move {
            match client.read_rows(req).await {
                Err(status) => status,
                Ok(response) => response.into_inner().message().await.unwrap_err(),
            }
        }
    };
    let missing = refused(request("nosuch")).await;
    assert_eq!(missing.code(), tonic::Code::NotFound);
    assert!(missing.message().contains("nosuch"));
    let bad_name = refused(data::ReadRowsRequest {
        table_name: "t".into(),
        ..Default::default()
    })
    .await;
    assert_eq!(bad_name.code(), tonic::Code::InvalidArgument);
    let nested = |depth: usize| {
        let mut deep = f(F::PassAllFilter(true));
        for _ in 0..depth {
            deep = chain(vec![deep, f(F::PassAllFilter(true))]);
        }
        deep
    };
    let deep = refused(data::ReadRowsRequest {
        filter: Some(nested(40)),
        ..request("t")
    })
    .await;
    assert_eq!(deep.code(), tonic::Code::InvalidArgument);
    assert!(deep.message().contains("deeper"), "{}", deep.message());
    // Deeper than protobuf decodes: gRPC's INTERNAL for an unparsable
    // request (its status code rules), and nothing else happens.
    let undecodable = refused(data::ReadRowsRequest {
        filter: Some(nested(200)),
        ..request("t")
    })
    .await;
    assert_eq!(undecodable.code(), tonic::Code::Internal);
    assert!(
        undecodable.message().contains("recursion"),
        "{}",
        undecodable.message()
    );
    let regex = refused(data::ReadRowsRequest {
        filter: Some(f(F::ValueRegexFilter(b"(a{1000}){1000}".to_vec()))),
        ..request("t")
    })
    .await;
    assert_eq!(regex.code(), tonic::Code::InvalidArgument);
    assert!(regex.message().contains("a{1000}"), "{}", regex.message());
    let huge = refused(data::ReadRowsRequest {
        rows: Some(data::RowSet {
            row_keys: vec![b"k".to_vec(); 200_000],
            row_ranges: vec![],
        }),
        ..request("t")
    })
    .await;
    assert_eq!(huge.code(), tonic::Code::InvalidArgument);
    let long_key = client
        .mutate_row(with(
            "uma",
            data::MutateRowRequest {
                table_name: table("t"),
                row_key: vec![b'k'; 5000],
                mutations: vec![set("cf", "q", 1000, "v")],
                ..Default::default()
            },
        ))
        .await
        .unwrap_err();
    assert_eq!(long_key.code(), tonic::Code::InvalidArgument);
    assert!(
        long_key.message().contains("5000"),
        "{}",
        long_key.message()
    );
    // What cellar does not serve says so by name.
    let backup = admin
        .create_backup(with("ada", admin::CreateBackupRequest::default()))
        .await
        .unwrap_err();
    assert_eq!(backup.code(), tonic::Code::Unimplemented);
    assert!(backup.message().contains("CreateBackup"));
    // The server still answers after all of it.
    client.mutate_row(mutate("uma")).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_store_has_two_faces() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let session = SqlSession::new(store.clone());
    let face = Face::start(store, Credentials::default()).await;
    // A table made through the Bigtable API is a table in SQL.
    create(&face, "made_by_api").await;
    let mut client = face.data().await;
    client
        .mutate_row(data::MutateRowRequest {
            table_name: table("made_by_api"),
            row_key: b"user#7".to_vec(),
            mutations: vec![set("cf", "name", 1000, "Ada")],
            ..Default::default()
        })
        .await
        .unwrap();
    let got = pretty_format_batches(
        &session
            .query(
                "SELECT _key, family, qualifier, CAST(value AS VARCHAR) AS value \
                 FROM cells('made_by_api')",
            )
            .await
            .unwrap(),
    )
    .unwrap()
    .to_string();
    assert!(
        got.contains("| user#7 | cf     | name      | Ada   |"),
        "{got}"
    );
    // Its row key and typed columns can be declared afterwards.
    for sql in [
        "ALTER TABLE made_by_api SET ROW KEY (kind TEXT, id TEXT) DELIMITER '#'",
        "ALTER TABLE made_by_api ADD COLUMN name TEXT IN cf",
    ] {
        session.query(sql).await.unwrap();
    }
    let got = pretty_format_batches(
        &session
            .query("SELECT kind, id, name FROM made_by_api WHERE kind = 'user' AND id = '7'")
            .await
            .unwrap(),
    )
    .unwrap()
    .to_string();
    assert!(got.contains("| user | 7  | Ada  |"), "{got}");
    // A table made in SQL, with a row key schema and typed columns, is
    // rows, families and qualifiers to a Bigtable client, as the guides
    // lay them out; and rows written by either face are the other's.
    session
        .query(
            "CREATE TABLE readings (ROW KEY (sensor TEXT, day TEXT) DELIMITER '#', \
             FAMILY m, note TEXT IN m)",
        )
        .await
        .unwrap();
    session
        .query("INSERT INTO readings (sensor, day, note) VALUES ('s1', '2026-01-01', 'ok')")
        .await
        .unwrap();
    client
        .mutate_row(data::MutateRowRequest {
            table_name: table("readings"),
            row_key: b"s2#2026-01-02".to_vec(),
            mutations: vec![set("m", "note", -1, "from-bigtable")],
            ..Default::default()
        })
        .await
        .unwrap();
    let (rows, _) = read(&mut client, request("readings")).await.unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0].0, "s1#2026-01-01");
    assert!(rows[0].1[0].starts_with("m:note@") && rows[0].1[0].ends_with("=ok"));
    let got = pretty_format_batches(
        &session
            .query("SELECT sensor, day, note FROM readings ORDER BY sensor")
            .await
            .unwrap(),
    )
    .unwrap()
    .to_string();
    assert!(
        got.contains("| s2     | 2026-01-02 | from-bigtable |"),
        "{got}"
    );
    // GetTable and ListTables see both; DeleteTable ends one for SQL too.
    let mut admin = face.admin().await;
    let listed = admin
        .list_tables(admin::ListTablesRequest {
            parent: INSTANCE.into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let names: Vec<&str> = listed.tables.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, [table("made_by_api"), table("readings")]);
    admin
        .delete_table(admin::DeleteTableRequest {
            name: table("made_by_api"),
        })
        .await
        .unwrap();
    let gone = session
        .query("SELECT * FROM cells('made_by_api')")
        .await
        .unwrap_err()
        .to_string();
    assert!(gone.contains("made_by_api"), "{gone}");
}

/// A client that opens a read and then reads nothing: the read waits
/// `stalled_stream` for room and stops; the client, reading again, gets
/// the responses sent ahead and then DEADLINE_EXCEEDED (never an end that
/// looks like the whole answer), and the server reads for others after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_whose_client_stops_reading_ends_with_deadline_exceeded() {
    let dir = tempfile::tempdir().unwrap();
    let options = ServeOptions {
        limits: cellar::flight::ConnLimits {
            stalled_stream: std::time::Duration::from_millis(500),
            ..Default::default()
        },
        ..Default::default()
    };
    let face = Face::start_with(Store::open(dir.path()).unwrap(), options).await;
    create(&face, "t").await;
    let mut client = face.data().await;
    // 12.5 MiB in 200 rows: far more than the responses a read sends ahead
    // and HTTP/2's windows hold.
    for batch in 0..10 {
        let entries = (0..20)
            .map(|i| {
                entry(
                    &format!("r{:03}", batch * 20 + i),
                    vec![set("cf", "q", 1000, vec![b'v'; 64 << 10])],
                )
            })
            .collect();
        client
            .mutate_rows(data::MutateRowsRequest {
                table_name: table("t"),
                entries,
                ..Default::default()
            })
            .await
            .unwrap();
    }
    let mut stream = client.read_rows(request("t")).await.unwrap().into_inner();
    assert!(stream.message().await.unwrap().is_some());
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    let mut responses = 1;
    let stopped = loop {
        match stream.message().await {
            Ok(Some(_)) => responses += 1,
            Ok(None) => panic!("the read ended as if whole after {responses} responses"),
            Err(status) => break status,
        }
    };
    assert_eq!(stopped.code(), tonic::Code::DeadlineExceeded, "{stopped}");
    assert!(stopped.message().contains("read nothing"), "{stopped}");
    // Whole when read at once.
    let (rows, _) = read(&mut face.data().await, request("t")).await.unwrap();
    assert_eq!(rows.len(), 200);
}
