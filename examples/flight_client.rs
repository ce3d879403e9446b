//! Query a `cellar serve` over Arrow Flight SQL from Rust.
//!
//! cellar serve --store ./my-store &
//! cargo run --example flight_client -- "SELECT * FROM my_table LIMIT 5" [http://127.0.0.1:32010]

use arrow_flight::sql::client::FlightSqlServiceClient;
use datafusion::arrow::util::pretty::print_batches;
use futures::TryStreamExt;
use tonic::transport::Channel;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let sql = args.next().unwrap_or_else(|| "SHOW TABLES".to_string());
    let url = args
        .next()
        .unwrap_or_else(|| "http://127.0.0.1:32010".to_string());
    let channel = Channel::from_shared(url)?.connect().await?;
    let mut client = FlightSqlServiceClient::new(channel);
    let info = client.execute(sql, None).await?;
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
