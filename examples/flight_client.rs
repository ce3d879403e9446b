//! Query a `cellar serve` over Arrow Flight SQL from Rust.
//!
//! ```sh
//! cellar serve --store ./my-store --user analyst --password-file pw.txt &
//! CELLAR_USER=analyst CELLAR_PASSWORD=... \
//!   cargo run --example flight_client -- "SELECT * FROM t WHERE k = ?" k0001
//! ```
//!
//! Arguments: the SQL, then values for its `?` placeholders (sent as text;
//! the server coerces them). CELLAR_URL picks the server (default
//! http://127.0.0.1:32010; https://... with CELLAR_CA=ca.pem for TLS);
//! CELLAR_USER and CELLAR_PASSWORD log in with the Basic handshake.

use std::sync::Arc;

use arrow_flight::sql::client::FlightSqlServiceClient;
use datafusion::arrow::array::{ArrayRef, RecordBatch, StringArray};
use datafusion::arrow::util::pretty::print_batches;
use futures::TryStreamExt;
use tonic::transport::{Certificate, Channel, ClientTlsConfig};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let sql = args.next().unwrap_or_else(|| "SHOW TABLES".to_string());
    let values: Vec<String> = args.collect();
    let url = std::env::var("CELLAR_URL").unwrap_or_else(|_| "http://127.0.0.1:32010".to_string());

    let mut endpoint = Channel::from_shared(url)?;
    if let Ok(ca) = std::env::var("CELLAR_CA") {
        let tls = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(std::fs::read(ca)?));
        endpoint = endpoint.tls_config(tls)?;
    }
    let mut client = FlightSqlServiceClient::new(endpoint.connect().await?);
    if let (Ok(user), Ok(password)) = (
        std::env::var("CELLAR_USER"),
        std::env::var("CELLAR_PASSWORD"),
    ) {
        // Later calls carry the bearer token the server answers with.
        client.handshake(&user, &password).await?;
    }

    let info = if values.is_empty() {
        client.execute(sql, None).await?
    } else {
        // A prepared statement with one row of parameters.
        let mut statement = client.prepare(sql, None).await?;
        let columns: Vec<(String, ArrayRef)> = values
            .into_iter()
            .enumerate()
            .map(|(i, v)| {
                let column: ArrayRef = Arc::new(StringArray::from(vec![v]));
                (format!("${}", i + 1), column)
            })
            .collect();
        statement.set_parameters(RecordBatch::try_from_iter(columns)?)?;
        statement.execute().await?
    };
    let mut batches = Vec::new();
    for endpoint in info.endpoint {
        if let Some(ticket) = endpoint.ticket {
            let stream = client.do_get(ticket).await?;
            batches.extend(stream.try_collect::<Vec<_>>().await?);
        }
    }
    print_batches(&batches)?;
    Ok(())
}
