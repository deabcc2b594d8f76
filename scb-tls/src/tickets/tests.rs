//! Ticket keys: tickets read back, refused when altered, read by another process holding
//! the same set, and across rotations for as long as the documentation says.

use super::*;

fn keys_with(set: KeySet, period: Duration) -> TicketKeys {
    TicketKeys {
        set: RwLock::new(Arc::new(set)),
        period,
        shared: false,
    }
}

#[test]
fn a_ticket_is_read_back_and_an_altered_or_foreign_one_is_not() {
    let keys = TicketKeys::local(DEFAULT_PERIOD).unwrap();
    let ticket = keys.encrypt(b"session state").unwrap();
    assert_eq!(
        ticket.len(),
        ID_LEN + NONCE_LEN + b"session state".len() + TAG_LEN
    );
    assert_eq!(keys.decrypt(&ticket).unwrap(), b"session state");
    // Two tickets of one state differ (random nonces).
    assert_ne!(keys.encrypt(b"session state").unwrap(), ticket);
    for at in [0, ID_LEN, ID_LEN + NONCE_LEN, ticket.len() - 1] {
        let mut altered = ticket.clone();
        altered[at] ^= 1;
        assert_eq!(keys.decrypt(&altered), None, "byte {at} altered");
    }
    assert_eq!(keys.decrypt(&ticket[..ticket.len() - 1]), None);
    assert_eq!(keys.decrypt(b"short"), None);
    let other = TicketKeys::local(DEFAULT_PERIOD).unwrap();
    assert_eq!(other.decrypt(&ticket), None);
}

#[test]
fn rotations_keep_tickets_readable_for_one_period_at_least_and_two_at_most() {
    let period = Duration::from_secs(3600);
    let start = now_ms();
    let set = KeySet::new(start).unwrap();
    let keys = keys_with(set, period);
    let ticket = keys.encrypt(b"state").unwrap();
    // One rotation: the key that made it is the previous one.
    let once = keys.set().rotated(start + 3_600_000).unwrap();
    *keys.set.write().unwrap() = Arc::new(once);
    assert_eq!(keys.decrypt(&ticket).unwrap(), b"state");
    // A set rotated ahead (another instance) already knew this set's next key.
    let made_later = keys.encrypt(b"later").unwrap();
    let ahead = keys.set().rotated(start + 7_200_000).unwrap();
    let ahead_keys = keys_with(ahead, period);
    let ahead_ticket = ahead_keys.encrypt(b"ahead").unwrap();
    assert_eq!(keys.decrypt(&ahead_ticket).unwrap(), b"ahead");
    assert_eq!(ahead_keys.decrypt(&made_later).unwrap(), b"later");
    // Two rotations: the first ticket's key is gone.
    assert_eq!(ahead_keys.decrypt(&ticket), None);
}

#[test]
fn local_keys_rotate_when_their_period_is_over() {
    let keys = keys_with(
        KeySet::new(now_ms() - 10_000).unwrap(),
        Duration::from_secs(5),
    );
    let before = keys.set().current().id;
    let ticket = keys.encrypt(b"state").unwrap();
    assert_ne!(
        keys.set().current().id,
        before,
        "the set is 10 s old, the period 5 s"
    );
    assert_eq!(&ticket[..ID_LEN], &keys.set().current().id);
    assert_eq!(keys.lifetime(), 5);
}
