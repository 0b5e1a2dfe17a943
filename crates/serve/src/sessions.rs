//! Who holds the MCP sessions of an HTTP address: a cap on all of them and one per client (its
//! peer address), and a short expiry for a session that never did anything after its
//! `initialize`, so a burst of bare `initialize` calls cannot lock everyone else out until the
//! ordinary idle expiry (5 minutes) frees the slots.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use rmcp::transport::streamable_http_server::session::SessionManager as _;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;

/// The header carrying an MCP session's id.
pub const SESSION_HEADER: &str = "mcp-session-id";

/// Why a new session is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Every session slot of the server is taken.
    Server,
    /// This client holds its share already.
    Client,
}

#[derive(Debug)]
struct Owner {
    client: IpAddr,
    opened: Instant,
    used: bool,
}

/// The caps and expiry over rmcp's session manager.
#[derive(Debug)]
pub struct SessionGuard {
    manager: Arc<LocalSessionManager>,
    max_total: usize,
    per_client: usize,
    unused_expiry: Duration,
    owners: Mutex<HashMap<String, Owner>>,
}

impl SessionGuard {
    /// A guard over `manager`: `max_total` sessions at once, `per_client` of them from one peer
    /// address, and a session closed `unused_expiry` after its `initialize` when no request
    /// named it since.
    pub fn new(
        manager: Arc<LocalSessionManager>,
        max_total: usize,
        per_client: usize,
        unused_expiry: Duration,
    ) -> Arc<Self> {
        Arc::new(Self {
            manager,
            max_total,
            per_client,
            unused_expiry,
            owners: Mutex::default(),
        })
    }

    /// Whether `client` may open one more session (initializes arriving together may pass the
    /// caps by their number, as they are counted once created).
    pub async fn admit(&self, client: IpAddr) -> Result<(), Refusal> {
        let live = self.manager.sessions.read().await;
        if live.len() >= self.max_total {
            return Err(Refusal::Server);
        }
        let owners = self.owners.lock().unwrap_or_else(PoisonError::into_inner);
        let held = owners
            .iter()
            .filter(|(id, o)| o.client == client && live.contains_key(id.as_str()))
            .count();
        if held >= self.per_client {
            return Err(Refusal::Client);
        }
        Ok(())
    }

    /// A session was created for `client`.
    pub fn opened(&self, id: &str, client: IpAddr) {
        self.owners
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(
                id.to_string(),
                Owner {
                    client,
                    opened: Instant::now(),
                    used: false,
                },
            );
    }

    /// A request named session `id`: it is in use, and keeps rmcp's ordinary idle expiry.
    pub fn touched(&self, id: &str) {
        if let Some(o) = self
            .owners
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get_mut(id)
        {
            o.used = true;
        }
    }

    /// Closes the sessions unused past the expiry and forgets the ones rmcp closed; returns how
    /// many it closed.
    pub async fn expire_unused(&self) -> usize {
        let stale: Vec<String> = {
            let live = self.manager.sessions.read().await;
            let mut owners = self.owners.lock().unwrap_or_else(PoisonError::into_inner);
            owners.retain(|id, _| live.contains_key(id.as_str()));
            owners
                .iter()
                .filter(|(_, o)| !o.used && o.opened.elapsed() >= self.unused_expiry)
                .map(|(id, _)| id.clone())
                .collect()
        };
        for id in &stale {
            if let Err(e) = self.manager.close_session(&Arc::from(id.as_str())).await {
                tracing::debug!(error = %e, "closing an unused MCP session failed");
            }
            self.owners
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(id);
        }
        if !stale.is_empty() {
            tracing::info!(
                closed = stale.len(),
                "closed MCP sessions unused since their initialize"
            );
        }
        stale.len()
    }

    /// Runs [`Self::expire_unused`] for as long as the server runs.
    pub async fn run_expiry(self: Arc<Self>) {
        let every =
            (self.unused_expiry / 4).clamp(Duration::from_millis(100), Duration::from_secs(5));
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            self.expire_unused().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::transport::streamable_http_server::session::SessionManager;

    #[tokio::test]
    async fn a_flood_of_bare_initializes_holds_its_slots_only_briefly() {
        let manager = Arc::new(LocalSessionManager::default());
        let guard = SessionGuard::new(manager.clone(), 4, 2, Duration::from_millis(50));
        let (flood, other): (IpAddr, IpAddr) =
            ("127.0.0.1".parse().unwrap(), "127.0.0.2".parse().unwrap());
        let mut ids = Vec::new();
        for _ in 0..2 {
            assert_eq!(guard.admit(flood).await, Ok(()));
            let (id, _transport) = manager.create_session().await.unwrap();
            guard.opened(&id, flood);
            ids.push(id);
        }
        assert_eq!(guard.admit(flood).await, Err(Refusal::Client));
        assert_eq!(guard.admit(other).await, Ok(()));
        guard.touched(&ids[0]);
        tokio::time::sleep(Duration::from_millis(80)).await;
        assert_eq!(guard.expire_unused().await, 1);
        assert!(!manager.has_session(&ids[1]).await.unwrap());
        assert!(manager.has_session(&ids[0]).await.unwrap());
        assert_eq!(guard.admit(flood).await, Ok(()));
    }

    /// A guard of `max_total` sessions, `per_client` each, over a fresh manager.
    fn guard(
        max_total: usize,
        per_client: usize,
        unused_expiry: Duration,
    ) -> (Arc<LocalSessionManager>, Arc<SessionGuard>) {
        let manager = Arc::new(LocalSessionManager::default());
        let g = SessionGuard::new(manager.clone(), max_total, per_client, unused_expiry);
        (manager, g)
    }

    /// What the server does for an admitted `initialize`: rmcp creates it, the guard notes it.
    async fn open(m: &LocalSessionManager, g: &SessionGuard, client: IpAddr) -> Arc<str> {
        g.admit(client).await.expect("admitted");
        let (id, _transport) = m.create_session().await.unwrap();
        g.opened(&id, client);
        id
    }

    #[tokio::test]
    async fn the_server_cap_counts_the_sessions_of_every_client() {
        let (m, g) = guard(3, 2, Duration::from_secs(3600));
        let ips: Vec<IpAddr> = ["127.0.0.1", "127.0.0.2", "127.0.0.3", "127.0.0.4"]
            .iter()
            .map(|a| a.parse().unwrap())
            .collect();
        open(&m, &g, ips[0]).await;
        open(&m, &g, ips[1]).await;
        open(&m, &g, ips[2]).await;
        // Each client holds one of its two, yet the server is full: a new client is refused
        // for the server's sake, not its own.
        assert_eq!(g.admit(ips[3]).await, Err(Refusal::Server));
        assert_eq!(g.admit(ips[0]).await, Err(Refusal::Server));
    }

    #[tokio::test]
    async fn sessions_rmcp_closed_no_longer_count_against_their_client() {
        let (m, g) = guard(8, 1, Duration::from_secs(3600));
        let client: IpAddr = "10.0.0.9".parse().unwrap();
        let id = open(&m, &g, client).await;
        assert_eq!(g.admit(client).await, Err(Refusal::Client));
        // The client ended its session (DELETE), or rmcp's idle expiry did.
        m.close_session(&id).await.unwrap();
        assert_eq!(g.admit(client).await, Ok(()));
        // The next sweep forgets it without closing anything.
        assert_eq!(g.expire_unused().await, 0);
        assert_eq!(g.owners.lock().unwrap().len(), 0);
    }

    #[tokio::test]
    async fn only_sessions_never_named_since_their_initialize_expire() {
        // A zero expiry: every unused session is past it, with no waiting in the test.
        let (m, g) = guard(8, 8, Duration::ZERO);
        let client: IpAddr = "::1".parse().unwrap();
        let used = open(&m, &g, client).await;
        let unused = open(&m, &g, client).await;
        g.touched(&used);
        // A request naming a session this guard never saw changes nothing.
        g.touched("no-such-session");
        assert_eq!(g.expire_unused().await, 1);
        assert!(m.has_session(&used).await.unwrap());
        assert!(!m.has_session(&unused).await.unwrap());
        assert_eq!(g.expire_unused().await, 0, "nothing left to close");
    }
}
