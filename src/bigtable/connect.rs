//! Where the calls go and who they come from: the emulator (plain HTTP/2,
//! no credentials) or Cloud Bigtable (TLS, and an OAuth token from
//! Google's application default credentials on every call).

use std::sync::{Arc, RwLock};
use std::time::Duration;

use tonic::metadata::MetadataValue;
use tonic::transport::{Channel, ClientTlsConfig};

use crate::error::{Error, Result};

/// Cloud Bigtable's data API.
pub const CLOUD_ENDPOINT: &str = "https://bigtable.googleapis.com";
/// Cloud Bigtable's admin API, for the data endpoint above.
const CLOUD_ADMIN_ENDPOINT: &str = "https://bigtableadmin.googleapis.com";
/// What cellar does: read and write data, create and change tables.
const SCOPES: &[&str] = &[
    "https://www.googleapis.com/auth/bigtable.data",
    "https://www.googleapis.com/auth/bigtable.admin.table",
];
/// How often the token is asked for again (the provider answers from its
/// cache until the token is about to expire; tokens last an hour).
const REFRESH: Duration = Duration::from_secs(60);

/// The admin endpoint that goes with a data endpoint.
pub(super) fn admin_endpoint(data: &str) -> &str {
    if data.trim_end_matches('/') == CLOUD_ENDPOINT {
        CLOUD_ADMIN_ENDPOINT
    } else {
        data
    }
}

/// Adds `authorization: Bearer <token>` to every call when there are
/// credentials (Cloud Bigtable); nothing for the emulator.
#[derive(Clone, Default)]
pub(super) struct Auth(Option<Arc<RwLock<String>>>);

impl tonic::service::Interceptor for Auth {
    fn call(
        &mut self,
        mut request: tonic::Request<()>,
    ) -> std::result::Result<tonic::Request<()>, tonic::Status> {
        if let Some(token) = &self.0 {
            let header = token
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clone();
            let value = MetadataValue::try_from(header).map_err(|_| {
                tonic::Status::unauthenticated("the access token is not a valid header value")
            })?;
            request.metadata_mut().insert("authorization", value);
        }
        Ok(request)
    }
}

impl Auth {
    /// Application default credentials, as Google's client libraries
    /// find them: the key file `GOOGLE_APPLICATION_CREDENTIALS` names,
    /// `gcloud auth application-default login`'s file, the metadata
    /// server of a Google Cloud machine, or `gcloud` itself; a first
    /// token fetched now, so that missing or refused credentials are an
    /// error at open, and a task on `runtime` that keeps it fresh.
    pub(super) async fn application_default() -> Result<Auth> {
        let provider = gcp_auth::provider().await.map_err(|e| {
            Error::InvalidArgument(format!(
                "no Google credentials for Cloud Bigtable: set GOOGLE_APPLICATION_CREDENTIALS to \
                 a service account key file, run `gcloud auth application-default login`, or run \
                 on a Google Cloud machine (or set BIGTABLE_EMULATOR_HOST for the emulator): {e}"
            ))
        })?;
        let token = provider.token(SCOPES).await.map_err(|e| Error::Remote {
            call: "getting an access token for Cloud Bigtable".into(),
            code: "Unauthenticated".into(),
            message: e.to_string(),
        })?;
        let header = Arc::new(RwLock::new(format!("Bearer {}", token.as_str())));
        let shared = Arc::downgrade(&header);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(REFRESH).await;
                // The store is gone: stop.
                let Some(header) = shared.upgrade() else {
                    return;
                };
                if let Ok(token) = provider.token(SCOPES).await {
                    *header
                        .write()
                        .unwrap_or_else(std::sync::PoisonError::into_inner) =
                        format!("Bearer {}", token.as_str());
                }
            }
        });
        Ok(Auth(Some(header)))
    }
}

/// A channel to `endpoint`: TLS with the bundled web PKI roots for
/// `https://`, plain HTTP/2 otherwise (the emulator).
pub(super) async fn channel(endpoint: &str) -> Result<Channel> {
    let target = endpoint.to_string();
    let mut builder = Channel::from_shared(target.clone())
        .map_err(|e| Error::InvalidArgument(format!("invalid Bigtable endpoint {target:?}: {e}")))?
        .connect_timeout(Duration::from_secs(10))
        // h2 closes a connection (ENHANCE_YOUR_CALM) whose small DATA
        // frames waiting to be read outgrow half its window: a ReadRows
        // stream of small rows read slower than it arrives did so with the
        // default windows (2 MiB a stream, 5 MiB the connection). Small
        // stream windows and a large connection window keep that budget
        // out of reach.
        .initial_stream_window_size(Some(256 * 1024))
        .initial_connection_window_size(Some(64 * 1024 * 1024));
    if target.starts_with("https://") {
        builder = builder
            .tls_config(ClientTlsConfig::new().with_webpki_roots())
            .map_err(|e| Error::InvalidArgument(format!("TLS for {target}: {e}")))?;
    }
    builder.connect().await.map_err(|e| Error::Remote {
        call: format!("connecting to {target}"),
        code: "Unavailable".into(),
        message: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cloud_endpoint_has_its_admin_endpoint_and_others_their_own() {
        assert_eq!(admin_endpoint(CLOUD_ENDPOINT), CLOUD_ADMIN_ENDPOINT);
        assert_eq!(
            admin_endpoint("https://bigtable.googleapis.com/"),
            CLOUD_ADMIN_ENDPOINT
        );
        assert_eq!(
            admin_endpoint("http://127.0.0.1:8086"),
            "http://127.0.0.1:8086"
        );
    }

    #[test]
    fn calls_carry_the_token_only_when_there_is_one() {
        use tonic::service::Interceptor;
        let mut none = Auth::default();
        let request = none.call(tonic::Request::new(())).unwrap();
        assert!(request.metadata().get("authorization").is_none());
        let mut some = Auth(Some(Arc::new(RwLock::new("Bearer t0k".into()))));
        let request = some.call(tonic::Request::new(())).unwrap();
        assert_eq!(
            request.metadata().get("authorization").unwrap(),
            "Bearer t0k"
        );
    }
}
