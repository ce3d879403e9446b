//! Generated hostile input, bounded in time: SQL text through parse and
//! plan, and Flight request bodies through the server. Nothing may panic,
//! crash or hang; errors are fine. The number of cases is set by
//! PROPTEST_CASES (default below), so CI runs a bounded fuzz.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test should fail loudly at the failing call"
)]

use arrow_flight::flight_service_client::FlightServiceClient;
use arrow_flight::{Action, FlightDescriptor, Ticket};
use cellar::flight::{CellarFlightSql, ServeOptions};
use cellar::{SqlSession, Store};
use proptest::prelude::*;

/// Pieces SQL is made of, hostile ones included.
fn fragment() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("SELECT".to_string()),
        Just("FROM".to_string()),
        Just("t".to_string()),
        Just("WHERE".to_string()),
        Just("_key".to_string()),
        Just("v".to_string()),
        Just("s".to_string()),
        Just("host".to_string()),
        Just("n".to_string()),
        Just("(".to_string()),
        Just(")".to_string()),
        Just(",".to_string()),
        Just("+".to_string()),
        Just("-".to_string()),
        Just("*".to_string()),
        Just("/".to_string()),
        Just("||".to_string()),
        Just("=".to_string()),
        Just("<".to_string()),
        Just("AND".to_string()),
        Just("OR".to_string()),
        Just("NOT".to_string()),
        Just("IN".to_string()),
        Just("LIKE".to_string()),
        Just("BETWEEN".to_string()),
        Just("IS NULL".to_string()),
        Just("CASE WHEN".to_string()),
        Just("THEN".to_string()),
        Just("ELSE".to_string()),
        Just("END".to_string()),
        Just("ORDER BY".to_string()),
        Just("GROUP BY".to_string()),
        Just("LIMIT".to_string()),
        Just("?".to_string()),
        Just("$1".to_string()),
        Just("count(*)".to_string()),
        Just("CAST(".to_string()),
        Just("AS BIGINT)".to_string()),
        Just("'x'".to_string()),
        Just("'a#00001'".to_string()),
        Just("X'ff00'".to_string()),
        Just("9223372036854775807".to_string()),
        Just("-9223372036854775808".to_string()),
        Just("1e308".to_string()),
        Just("NULL".to_string()),
        Just("MAP {'v': 1}".to_string()),
        Just("versions('t')".to_string()),
        Just("cells('t', 'f')".to_string()),
        Just("INSERT INTO t (_key, v) VALUES".to_string()),
        Just("UPDATE t SET v =".to_string()),
        Just("DELETE FROM t".to_string()),
        Just("CREATE TABLE u (FAMILY f GC".to_string()),
        Just("MAX_VERSIONS".to_string()),
        Just("MAX_AGE '1d'".to_string()),
        Just(";".to_string()),
        "[a-z_]{1,8}",
        "[0-9]{1,20}",
        "'[^']{0,12}'",
        any::<char>().prop_map(|c| c.to_string()),
    ]
}

fn statement() -> impl Strategy<Value = String> {
    let flat = prop::collection::vec(fragment(), 1..40).prop_map(|parts| parts.join(" "));
    // Long chains and deep nesting, where parsers and planners recurse.
    let chain = (
        fragment(),
        1usize..3000,
        prop_oneof![Just("+"), Just(" OR "), Just("||"), Just(" AND ")],
    )
        .prop_map(|(term, n, op)| format!("SELECT {}", vec![term; n].join(op)));
    let nested = (
        1usize..3000,
        prop_oneof![Just("("), Just("abs("), Just("(SELECT ")],
    )
        .prop_map(|(n, open)| format!("SELECT {}1{}", open.repeat(n), ")".repeat(n)));
    prop_oneof![6 => flat, 2 => chain, 1 => nested]
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn setup(runtime: &tokio::runtime::Runtime) -> (tempfile::TempDir, SqlSession) {
    let dir = tempfile::tempdir().unwrap();
    let session = SqlSession::new(Store::open(dir.path()).unwrap());
    runtime.block_on(async {
        session
            .query(
                "CREATE TABLE t (ROW KEY (host TEXT, n INT(5)), FAMILY f, v BIGINT IN f, s TEXT IN f)",
            )
            .await
            .unwrap();
        session
            .query("INSERT INTO t (host, n, v, s) VALUES ('a', 1, 10, 'x'), ('b', 2, 20, 'y')")
            .await
            .unwrap();
    });
    (dir, session)
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(200),
        ..ProptestConfig::default()
    })]

    /// Any text: planned (and the plan's shape asked for) without a
    /// panic or a stack overflow. Writes are not run.
    #[test]
    fn sql_text_never_crashes_the_planner(sql in statement()) {
        thread_local! {
            static STATE: (tokio::runtime::Runtime, tempfile::TempDir, SqlSession) = {
                let rt = runtime();
                let (dir, session) = setup(&rt);
                (rt, dir, session)
            };
        }
        if let Ok(path) = std::env::var("CELLAR_FUZZ_LOG") {
            // What ran last, should a crash end the process.
            std::fs::write(path, &sql).unwrap();
        }
        STATE.with(|(rt, _dir, session)| {
            rt.block_on(async {
                let _ = session.statement_shape(&sql).await;
                if !sql.to_ascii_uppercase().contains("CREATE")
                    && !sql.to_ascii_uppercase().contains("INSERT")
                    && !sql.to_ascii_uppercase().contains("UPDATE")
                    && !sql.to_ascii_uppercase().contains("DELETE")
                    && !sql.to_ascii_uppercase().contains("DROP")
                    && !sql.to_ascii_uppercase().contains("ALTER")
                    && let Ok(df) = session.sql(&sql).await
                {
                    let _ = df.create_physical_plan().await;
                }
            });
        });
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(100),
        ..ProptestConfig::default()
    })]

    /// Random bytes where Flight expects a ticket, a command or an action
    /// body: an error status, and the server answers the next request.
    #[test]
    fn flight_request_bodies_never_crash_the_server(
        body in prop::collection::vec(any::<u8>(), 0..512),
        action in prop_oneof![
            Just("CreatePreparedStatement".to_string()),
            Just("ClosePreparedStatement".to_string()),
            Just("CancelFlightInfo".to_string()),
            Just("BeginTransaction".to_string()),
            "[a-zA-Z]{0,12}",
        ],
    ) {
        thread_local! {
            static SERVER: (tokio::runtime::Runtime, tempfile::TempDir, std::net::SocketAddr) = {
                let rt = runtime();
                let (dir, session) = setup(&rt);
                let addr = rt.block_on(async {
                    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
                    let addr = listener.local_addr().unwrap();
                    let service = CellarFlightSql::new(session);
                    tokio::spawn(async move {
                        cellar::flight::serve_service(service, listener, &ServeOptions::default()).await
                    });
                    addr
                });
                (rt, dir, addr)
            };
        }
        SERVER.with(|(rt, _dir, addr)| {
            rt.block_on(async {
                let channel = tonic::transport::Channel::from_shared(format!("http://{addr}"))
                    .unwrap()
                    .connect()
                    .await
                    .unwrap();
                let mut client = FlightServiceClient::new(channel);
                let bytes = prost::bytes::Bytes::from(body.clone());
                // Errors say what is wrong, as the client's problem.
                for status in [
                    client.do_get(Ticket { ticket: bytes.clone() }).await.err(),
                    client
                        .get_flight_info(FlightDescriptor::new_cmd(bytes.clone()))
                        .await
                        .err(),
                ]
                .into_iter()
                .flatten()
                {
                    assert_ne!(status.code(), tonic::Code::Internal, "{status:?}");
                    assert!(!status.message().contains("DecodeError"), "{status:?}");
                }
                let _ = client
                    .do_action(Action {
                        r#type: action.clone(),
                        body: bytes,
                    })
                    .await;
                // Still serving.
                let mut sql = arrow_flight::sql::client::FlightSqlServiceClient::new(
                    tonic::transport::Channel::from_shared(format!("http://{addr}"))
                        .unwrap()
                        .connect()
                        .await
                        .unwrap(),
                );
                let info = sql.execute("SELECT count(*) FROM t".into(), None).await.unwrap();
                assert_eq!(info.endpoint.len(), 1);
            });
        });
    }
}
