use cellar::{SqlSession, Store};
use std::time::Instant;
#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let a: Vec<String> = std::env::args().collect();
    let session = SqlSession::new(Store::open(&a[1]).unwrap());
    let n: usize = a[3].parse().unwrap();
    let out = session.query(&a[2]).await.unwrap();
    println!(
        "{}",
        datafusion::arrow::util::pretty::pretty_format_batches(&out).unwrap()
    );
    let mut times = Vec::new();
    for _ in 0..n {
        let t = Instant::now();
        session.query(&a[2]).await.unwrap();
        times.push(t.elapsed().as_secs_f64() * 1e6);
    }
    times.sort_by(|a, b| a.partial_cmp(b).unwrap());
    println!(
        "median {:.1} us, mean {:.1} us, min {:.1}",
        times[n / 2],
        times.iter().sum::<f64>() / n as f64,
        times[0]
    );
}
