//! Accepting connections without letting idle ones lock everyone out.
//!
//! - A connection must authenticate (make one request that passes
//!   authentication) within [`ConnLimits::authenticate_within`]; until then
//!   it is closed at that deadline whatever it sends. A client that
//!   authenticates does so in its first round trip.
//! - Connections not yet authenticated are bounded per peer address
//!   ([`ConnLimits::unauthenticated_per_address`]) and in all (half of
//!   [`ConnLimits::max_connections`]); past a bound the oldest of them
//!   that has sent nothing (else the oldest) is closed once a second old,
//!   and at `max_connections` whatever its age, so idle sockets cannot
//!   keep out a client, whose connection is always the newest, while a
//!   pool of connections a client opens at once is not cut.
//! - At most [`ConnLimits::max_connections`] are open; when all are
//!   authenticated clients', one more is answered UNAVAILABLE saying so
//!   (not a bare reset) and closed, and the server keeps the descriptors
//!   it needs for its store.
//! - Accept errors (out of descriptors, say) pause the accept loop briefly
//!   instead of ending the server or spinning.
//! - Accepted sockets set TCP_NODELAY: small responses leave at once
//!   instead of waiting on the client's delayed ACK.
//!
//! Authenticated connections stay open while the client keeps them; HTTP/2
//! keepalive pings (see `serve`) close those whose peer has gone.

use std::collections::VecDeque;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::Stream;
use futures::task::AtomicWaker;
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
    /// Most connections from one address not yet authenticated; one more
    /// closes the oldest of them.
    pub unauthenticated_per_address: usize,
    /// How long a streamed answer waits for a client that reads nothing
    /// before it is stopped with DEADLINE_EXCEEDED (the Bigtable face's
    /// `ReadRows`: its read holds a thread and a snapshot while it waits).
    pub stalled_stream: Duration,
}

impl Default for ConnLimits {
    fn default() -> Self {
        ConnLimits {
            max_connections: 512,
            authenticate_within: Duration::from_secs(10),
            unauthenticated_per_address: 8,
            stalled_stream: Duration::from_secs(60),
        }
    }
}

impl ConnLimits {
    /// Most connections not yet authenticated, from all addresses: half
    /// the connections, so the other half is always there for clients
    /// that have authenticated.
    fn unauthenticated(&self) -> usize {
        (self.max_connections / 2).max(1)
    }
}

/// A connection younger than this is not closed to keep within the
/// bounds on unauthenticated connections (only to make room under
/// `max_connections`): a client opening a pool of connections at once is
/// still handshaking on all of them.
const GRACE: Duration = Duration::from_secs(1);

/// What the accept loop and the service share about one connection.
#[derive(Debug)]
struct ConnState {
    accepted: Instant,
    /// Whether the peer has sent anything (a client's HTTP/2 preface).
    heard: AtomicBool,
    authenticated: AtomicBool,
    /// Closed to make room for a newer connection.
    evicted: AtomicBool,
    /// Accepted only to be told the server is full.
    refused: AtomicBool,
    /// Wakes the connection's reader or writer when it is evicted.
    waker: AtomicWaker,
}

impl ConnState {
    fn new() -> Self {
        ConnState {
            accepted: Instant::now(),
            heard: AtomicBool::new(false),
            authenticated: AtomicBool::new(false),
            evicted: AtomicBool::new(false),
            refused: AtomicBool::new(false),
            waker: AtomicWaker::new(),
        }
    }
}

/// What the service knows about the connection a request came on: it
/// marks the connection authenticated, and answers every call on a
/// connection over the limit with UNAVAILABLE.
#[derive(Debug, Clone)]
pub struct ConnInfo {
    state: Arc<ConnState>,
    max_connections: usize,
}

impl ConnInfo {
    /// Lifts the deadline of the connection: it has authenticated.
    pub fn authenticated(&self) {
        self.state.authenticated.store(true, Ordering::Relaxed);
    }

    /// UNAVAILABLE, saying why, when the connection was accepted over the
    /// limit only to tell its client so.
    pub fn refusal(&self) -> Option<tonic::Status> {
        self.state.refused.load(Ordering::Relaxed).then(|| {
            tonic::Status::unavailable(format!(
                "the server has {} connections open, all of them authenticated clients' (its limit, --max-connections); try again shortly",
                self.max_connections
            ))
        })
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
    /// Evicted, or past the deadline without authenticating: the
    /// connection ends. Registers the task to be woken on eviction.
    fn expired(&mut self, cx: &mut Context<'_>) -> bool {
        let state = &self.info.state;
        state.waker.register(cx.waker());
        state.evicted.load(Ordering::Relaxed)
            || (!state.authenticated.load(Ordering::Relaxed)
                && self.deadline.as_mut().poll(cx).is_ready())
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
        let before = buf.filled().len();
        let read = Pin::new(&mut self.stream).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.info.state.heard.store(true, Ordering::Relaxed);
        }
        read
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

/// The connections not yet authenticated, oldest first, with their
/// peers' addresses.
#[derive(Default)]
struct Unauthenticated(VecDeque<(IpAddr, Weak<ConnState>)>);

impl Unauthenticated {
    /// Forgets the connections gone, authenticated or evicted.
    fn prune(&mut self) {
        self.0.retain(|(_, w)| {
            w.upgrade().is_some_and(|s| {
                !s.authenticated.load(Ordering::Relaxed) && !s.evicted.load(Ordering::Relaxed)
            })
        });
    }

    fn from(&self, ip: IpAddr) -> usize {
        self.0.iter().filter(|(a, _)| *a == ip).count()
    }

    /// Closes one (of `ip`, if given): the oldest that has sent nothing,
    /// else the oldest; none younger than [`GRACE`] unless `any_age`.
    /// Whether one was closed.
    fn evict_oldest(&mut self, ip: Option<IpAddr>, any_age: bool) -> bool {
        let now = Instant::now();
        let candidates: Vec<(usize, Arc<ConnState>)> = self
            .0
            .iter()
            .enumerate()
            .filter(|(_, (a, _))| ip.is_none_or(|ip| *a == ip))
            .filter_map(|(i, (_, w))| w.upgrade().map(|s| (i, s)))
            .filter(|(_, s)| any_age || now.duration_since(s.accepted) >= GRACE)
            .collect();
        let chosen = candidates
            .iter()
            .find(|(_, s)| !s.heard.load(Ordering::Relaxed))
            .or_else(|| candidates.first());
        let Some((at, state)) = chosen else {
            return false;
        };
        state.evicted.store(true, Ordering::Relaxed);
        state.waker.wake();
        self.0.remove(*at);
        true
    }
}

/// The connections `listener` accepts, within `limits`. Never yields an
/// error: accept failures are waited out.
///
/// Connections not yet authenticated are bounded per address and in all
/// (half of `max_connections`); past either bound the oldest such
/// connection is closed to make room, so idle sockets, however many,
/// cannot keep a client out: its connection is the newest. When every
/// connection is an authenticated client's, one more is served only to
/// answer UNAVAILABLE saying the server is full, and closed.
pub fn incoming(
    listener: TcpListener,
    limits: ConnLimits,
) -> impl Stream<Item = Result<Conn, io::Error>> + Send + 'static {
    let open = Arc::new(AtomicUsize::new(0));
    let waiting = Unauthenticated::default();
    futures::stream::unfold(
        (listener, open, waiting),
        move |(listener, open, mut waiting)| async move {
            loop {
                let (stream, peer) = match listener.accept().await {
                    Ok(accepted) => accepted,
                    Err(e) => {
                        // A connection that failed while being accepted:
                        // next. Anything else (out of descriptors, of
                        // memory): wait for connections to close rather
                        // than spin or stop serving.
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
                let ip = peer.ip();
                waiting.prune();
                if waiting.from(ip) >= limits.unauthenticated_per_address.max(1) {
                    waiting.evict_oldest(Some(ip), false);
                }
                if waiting.0.len() >= limits.unauthenticated() {
                    waiting.evict_oldest(None, false);
                }
                let state = Arc::new(ConnState::new());
                let mut deadline = limits.authenticate_within;
                if open.load(Ordering::SeqCst) >= limits.max_connections
                    && !waiting.evict_oldest(None, true)
                {
                    // Full of authenticated clients: say so, briefly.
                    state.refused.store(true, Ordering::Relaxed);
                    deadline = deadline.min(Duration::from_secs(2));
                }
                open.fetch_add(1, Ordering::SeqCst);
                let _ = stream.set_nodelay(true);
                if !state.refused.load(Ordering::Relaxed) {
                    waiting.0.push_back((ip, Arc::downgrade(&state)));
                }
                let conn = Conn {
                    stream,
                    info: ConnInfo {
                        state,
                        max_connections: limits.max_connections,
                    },
                    deadline: Box::pin(tokio::time::sleep_until(Instant::now() + deadline)),
                    _slot: Slot(Arc::clone(&open)),
                };
                return Some((Ok(conn), (listener, open, waiting)));
            }
        },
    )
}
