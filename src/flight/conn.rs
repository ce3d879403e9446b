//! Accepting connections without letting idle ones lock everyone out.
//!
//! - A connection must authenticate (make one request that passes
//!   authentication) within [`ConnLimits::authenticate_within`]; until then
//!   it is closed at that deadline whatever it sends. A client that
//!   authenticates does so in its first round trip.
//! - At most [`ConnLimits::max_connections`] are open; one more is
//!   accepted and closed at once, so the client fails fast instead of
//!   hanging, and the server keeps the descriptors it needs for its store.
//! - Accept errors (out of descriptors, say) pause the accept loop briefly
//!   instead of ending the server or spinning.
//! - Accepted sockets set TCP_NODELAY: small responses leave at once
//!   instead of waiting on the client's delayed ACK.
//!
//! Authenticated connections stay open while the client keeps them; HTTP/2
//! keepalive pings (see `serve`) close those whose peer has gone.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::Stream;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::{Instant, Sleep};
use tonic::transport::server::Connected;

/// How many connections a server keeps and how long an unauthenticated one lives.
#[derive(Debug, Clone, Copy)]
pub struct ConnLimits {
    /// Most connections open at once.
    pub max_connections: usize,
    /// How long a connection may stay open before its first authenticated request.
    pub authenticate_within: Duration,
}

impl Default for ConnLimits {
    fn default() -> Self {
        ConnLimits {
            max_connections: 512,
            authenticate_within: Duration::from_secs(30),
        }
    }
}

/// What the service knows about the connection a request came on: it
/// marks the connection authenticated.
#[derive(Debug, Clone)]
pub struct ConnInfo {
    authenticated: Arc<AtomicBool>,
}

impl ConnInfo {
    /// Lifts the deadline of the connection: it has authenticated.
    pub fn authenticated(&self) {
        self.authenticated.store(true, Ordering::Relaxed);
    }
}

/// An accepted connection with its authentication deadline.
pub struct Conn {
    stream: TcpStream,
    info: ConnInfo,
    deadline: Pin<Box<Sleep>>,
    _slot: Slot,
}

/// One of the open-connection slots, given back on drop.
struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Conn {
    /// Past the deadline without authenticating: the connection ends.
    fn expired(&mut self, cx: &mut Context<'_>) -> bool {
        !self.info.authenticated.load(Ordering::Relaxed)
            && self.deadline.as_mut().poll(cx).is_ready()
    }

    fn expired_error() -> io::Error {
        io::Error::new(
            io::ErrorKind::TimedOut,
            "the connection did not authenticate in time",
        )
    }
}

impl AsyncRead for Conn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.expired(cx) {
            return Poll::Ready(Err(Self::expired_error()));
        }
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if self.expired(cx) {
            return Poll::Ready(Err(Self::expired_error()));
        }
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

impl Connected for Conn {
    type ConnectInfo = ConnInfo;

    fn connect_info(&self) -> ConnInfo {
        self.info.clone()
    }
}

/// The connections `listener` accepts, within `limits`. Never yields an
/// error: accept failures are waited out.
pub fn incoming(
    listener: TcpListener,
    limits: ConnLimits,
) -> impl Stream<Item = Result<Conn, io::Error>> + Send + 'static {
    let open = Arc::new(AtomicUsize::new(0));
    futures::stream::unfold((listener, open), move |(listener, open)| async move {
        loop {
            let stream = match listener.accept().await {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // A connection that failed while being accepted: next.
                    // Anything else (out of descriptors, of memory): wait
                    // for connections to close rather than spin or stop
                    // serving.
                    if !matches!(
                        e.kind(),
                        io::ErrorKind::ConnectionAborted
                            | io::ErrorKind::ConnectionReset
                            | io::ErrorKind::Interrupted
                    ) {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    continue;
                }
            };
            if open.fetch_add(1, Ordering::SeqCst) >= limits.max_connections {
                open.fetch_sub(1, Ordering::SeqCst);
                drop(stream);
                continue;
            }
            let _ = stream.set_nodelay(true);
            let conn = Conn {
                stream,
                info: ConnInfo {
                    authenticated: Arc::new(AtomicBool::new(false)),
                },
                deadline: Box::pin(tokio::time::sleep_until(
                    Instant::now() + limits.authenticate_within,
                )),
                _slot: Slot(Arc::clone(&open)),
            };
            return Some((Ok(conn), (listener, open)));
        }
    })
}
