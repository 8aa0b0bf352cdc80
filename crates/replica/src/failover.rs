//! Standing for election as soon as a dead leader's lease is out.
//!
//! openraft 0.9 lets a follower stand only a *leader lease* (the longest
//! election timeout) plus its own election timeout after the last
//! heartbeat, and a voter refuses every candidate while its lease lasts.
//! The second wait is for a leader that is slow, not gone. This module
//! skips it when the leader is known to be gone:
//!
//! 1. a connection on which the leader sent appends closes (its process
//!    exited or was killed, and the kernel closed its sockets; a live
//!    leader also drops connections, after a timeout);
//! 2. no leader speaks to this node for a lease after that;
//! 3. the leader's address refuses connections, or takes none within
//!    100 ms (a live process keeps its listening socket, however busy);
//! 4. a majority of the voters (this node included) answers, none knows
//!    another leader, and this node's log is the most up to date of
//!    theirs (then the lowest id), so exactly one survivor stands.
//!
//! Then it stands, through openraft's own election
//! (`Raft::trigger().elect()`), and again every 25 ms up to four times
//! while it is a candidate nobody answered (a voter whose lease outlasts
//! this node's refuses it). Every safety check, the voters' lease
//! included, stays openraft's: this only chooses when one node asks. If
//! it does not win, openraft's timers elect as they would have.

use crate::network::admin_call;
use crate::shared::Shared;
use crate::types::{AdminReply, AdminRequest, NodeId, TypeConfig};
use openraft::{Raft, ServerState};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long past its own lease this node waits before standing: a voter's
/// lease counts from when it took the last heartbeat, which may be a
/// little after this node took its own.
const PAST_LEASE: Duration = Duration::from_millis(20);
/// How often, and how long apart, a refused candidate stands again.
const STAND_AGAIN_TIMES: usize = 4;
const STAND_AGAIN_AFTER: Duration = Duration::from_millis(25);
/// How long the other voters have to say where their logs end, and the
/// lost leader to take a connection.
const ASK_TIMEOUT: Duration = Duration::from_millis(100);

/// Where a voter's log ends, and its id: the order in which voters stand.
type Standing = (Option<(u64, u64)>, NodeId);

/// Whether `a` should stand before `b`: its log is more up to date
/// (a candidate with a shorter log is refused), then the lower id.
fn stands_before(a: Standing, b: Standing) -> bool {
    a.0 > b.0 || (a.0 == b.0 && a.1 < b.1)
}

/// Notes that a connection on which `leader` sent this node appends has
/// closed, for [`watch`].
pub(crate) fn connection_closed(shared: &Shared, leader: NodeId) {
    *shared.leader_connection_closed.lock() = Some((Instant::now(), leader));
    // A leader has several connections to each follower (replication,
    // heartbeats, votes), which close together: one permit covers them.
    shared.leader_connection_notify.notify_one();
}

/// Runs for the node's life: after each closed leader connection, once
/// the lease since the last append is out, if no leader has spoken since,
/// the leader's port refuses connections, a majority of the voters
/// answers, and this node's log is the most up to date of theirs, stands
/// for election (again, shortly, while a voter's lease refuses it).
pub(crate) async fn watch(raft: Raft<TypeConfig>, shared: Arc<Shared>, lease: Duration) {
    loop {
        shared.leader_connection_notify.notified().await;
        decide(&raft, &shared, lease).await;
    }
}

async fn decide(raft: &Raft<TypeConfig>, shared: &Shared, lease: Duration) {
    let mut heard = *shared.last_append.lock();
    let leader = loop {
        tokio::time::sleep_until((heard + lease + PAST_LEASE).into()).await;
        let Some((closed_at, leader)) = *shared.leader_connection_closed.lock() else { return };
        let last = *shared.last_append.lock();
        if last == heard {
            break leader;
        }
        // A leader spoke since: the closed connection was one it dropped.
        // Watch a little longer, in case it is dying now (a connection
        // closing meanwhile extends the watch: it may be the death).
        if closed_at.elapsed() > 3 * lease {
            return;
        }
        heard = last;
    };
    let nobody_spoke = || *shared.last_append.lock() == heard;
    let metrics = raft.metrics().borrow().clone();
    if metrics.current_leader != Some(leader) {
        // An election is under way, or another leader is known.
        return;
    }
    let membership = metrics.membership_config.membership().clone();
    if !membership.voter_ids().any(|id| id == shared.id) {
        return;
    }
    // A process that is alive keeps its listening socket: if the leader's
    // address still takes connections, it is slow, not gone, and deposing
    // it is left to openraft's own timers. (A refused connection, or none
    // within the timeout, says its process or its machine is down.)
    if let Some(node) = membership.get_node(&leader) {
        let connect = tokio::net::TcpStream::connect(node.addr.as_str());
        if let Ok(Ok(_)) = tokio::time::timeout(ASK_TIMEOUT, connect).await {
            return;
        }
    }
    let mine: Standing = (*shared.last_log.lock(), shared.id);
    let mut asks = tokio::task::JoinSet::new();
    for id in membership.voter_ids().filter(|id| *id != leader && *id != shared.id) {
        if let Some(node) = membership.get_node(&id) {
            let addr = node.addr.clone();
            asks.spawn(async move { admin_call(&addr, AdminRequest::Status, ASK_TIMEOUT).await });
        }
    }
    // This node and every voter that answers: they must make a majority,
    // or a voter too slow to answer might be the one that should stand
    // (or lead already), and standing over it would depose it.
    let mut heard_from = 1;
    while let Some(answer) = asks.join_next().await {
        let Ok(Ok(AdminReply::Status(status))) = answer else { continue };
        if status.leader.as_ref().map(|(id, _)| *id) != Some(leader) {
            return;
        }
        if stands_before((status.last_log_term.zip(status.last_log_index), status.id), mine) {
            return;
        }
        heard_from += 1;
    }
    if heard_from <= membership.voter_ids().count() / 2 || !nobody_spoke() {
        return;
    }
    if raft.metrics().borrow().current_leader != Some(leader) || raft.trigger().elect().await.is_err() {
        return;
    }
    // A voter whose core took the dead leader's last append later than
    // this node did still holds its lease and refuses; openraft would
    // stand again only after a whole election timeout. Stand again
    // shortly while this node is a candidate that nobody has answered.
    for _ in 0..STAND_AGAIN_TIMES {
        tokio::time::sleep(STAND_AGAIN_AFTER).await;
        let metrics = raft.metrics().borrow().clone();
        if metrics.state != ServerState::Candidate || metrics.current_leader.is_some() || !nobody_spoke() {
            return;
        }
        if raft.trigger().elect().await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_most_up_to_date_log_stands_first_then_the_lower_id() {
        assert!(stands_before((Some((3, 10)), 2), (Some((3, 9)), 1)));
        assert!(stands_before((Some((4, 1)), 2), (Some((3, 9)), 1)));
        assert!(!stands_before((Some((3, 9)), 1), (Some((3, 10)), 2)));
        assert!(stands_before((Some((3, 9)), 1), (Some((3, 9)), 2)));
        assert!(!stands_before((Some((3, 9)), 2), (Some((3, 9)), 1)));
        assert!(stands_before((Some((1, 1)), 5), (None, 1)));
    }
}
