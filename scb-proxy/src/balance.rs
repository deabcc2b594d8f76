//! Choosing an upstream for each try: weighted round robin, least connections, the better of
//! two random choices, or rendezvous hashing on a header or the client address.
//!
//! Every policy only considers upstreams that are available (actively up, not in a passive
//! cool-down) and not already tried for this request, and the state is atomics shared by
//! all workers, so picking never takes a lock or allocates.

use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use http::{HeaderMap, HeaderName};

use crate::upstream::UpstreamState;

/// Longest round-robin cycle. Weights summing to more are scaled down to about this sum
/// (each weight stays at least 1): the cycle is precomputed, and 10 000 slots keep it within
/// 80 KiB while still giving weights three significant digits.
const MAX_SCHEDULE: u64 = 10_000;

/// How a proxy spreads requests over its upstreams.
///
/// Defaults to [`Balance::RoundRobin`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Balance {
    /// Each upstream in turn, `weight` times per cycle of `sum(weights)` requests, interleaved
    /// rather than in runs (the order nginx's smooth weighted round robin gives). An upstream
    /// that is out hands its turns to the others at random, in proportion to their weights.
    #[default]
    RoundRobin,
    /// The upstream with the fewest requests in flight per unit of weight, counted across all
    /// workers; ties are taken in turn, so an idle pool goes round robin.
    LeastConn,
    /// Two different upstreams drawn at random (in proportion to their weights), then the one
    /// with fewer requests in flight per unit of weight ("the power of two choices": nearly
    /// as even as `LeastConn` without every request scanning every count).
    RandomTwo,
    /// Rendezvous (highest random weight) hashing of a request key: the same key goes to the
    /// same upstream while it is available, keys spread in proportion to the weights, and
    /// when an upstream goes out only its own keys move. The mapping depends on the upstreams'
    /// addresses, not their order in the list. Requests without the key are sent round robin.
    Hash(HashKey),
}

/// What [`Balance::Hash`] hashes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HashKey {
    /// The first value of this request header, byte for byte.
    Header(HeaderName),
    /// The client's IP address; an IPv4-mapped IPv6 address counts as the IPv4 address, so a
    /// client hashes the same on a dual-stack listener.
    ClientIp,
}

/// Per-proxy balancing state, shared by all workers.
#[derive(Debug)]
pub(crate) struct Balancer {
    policy: Balance,
    /// One round-robin cycle as upstream indices; used by `RoundRobin` and by `Hash` for
    /// requests without a key.
    schedule: Box<[usize]>,
    /// Per-upstream rendezvous seed, hashed from the address so that a key's upstream does
    /// not change when the list is reordered or another upstream is added or removed.
    seeds: Box<[u64]>,
    /// Round-robin position, and `LeastConn`'s rotating start.
    next: AtomicUsize,
}

impl Balancer {
    /// The policy it was built with.
    pub(crate) fn policy(&self) -> &Balance {
        &self.policy
    }

    pub(crate) fn new(policy: Balance, upstreams: &[UpstreamState]) -> Self {
        let weights: Vec<u32> = upstreams.iter().map(weight).collect();
        Self {
            policy,
            schedule: schedule(&weights),
            seeds: upstreams
                .iter()
                .map(|state| hash_bytes(state.upstream.authority.as_str().as_bytes()))
                .collect(),
            next: AtomicUsize::new(0),
        }
    }

    /// The policy's key for a request: a hash of the header's first value or of the client
    /// address. `None` for policies that do not hash, or when the request has no key (then
    /// [`pick`](Self::pick) goes round robin).
    pub(crate) fn key(&self, headers: &HeaderMap, client: Option<IpAddr>) -> Option<u64> {
        let Balance::Hash(key) = &self.policy else {
            return None;
        };
        match key {
            HashKey::Header(name) => headers.get(name).map(|value| hash_bytes(value.as_bytes())),
            HashKey::ClientIp => client.map(|ip| match ip.to_canonical() {
                IpAddr::V4(v4) => hash_bytes(&v4.octets()),
                IpAddr::V6(v6) => hash_bytes(&v6.octets()),
            }),
        }
    }

    /// The index of the upstream for the next try: one that is available at `now` and not
    /// in `tried`. `None` when no such upstream is left.
    ///
    /// `upstreams` must be the slice the balancer was built with.
    pub(crate) fn pick(
        &self,
        upstreams: &[UpstreamState],
        key: Option<u64>,
        tried: &[usize],
        now: Instant,
    ) -> Option<usize> {
        debug_assert_eq!(
            upstreams.len(),
            self.seeds.len(),
            "built for other upstreams"
        );
        let eligible = |i: usize| !tried.contains(&i) && upstreams[i].health.is_available(now);
        match (&self.policy, key) {
            (Balance::RoundRobin, _) | (Balance::Hash(_), None) => {
                self.round_robin(upstreams, &eligible)
            }
            (Balance::Hash(_), Some(key)) => self.rendezvous(upstreams, key, &eligible),
            (Balance::LeastConn, _) => self.least_conn(upstreams, &eligible),
            (Balance::RandomTwo, _) => random_two(upstreams, &eligible),
        }
    }

    /// The upstream to try when [`pick`](Self::pick) finds none available: of those not
    /// in `tried`, the one whose passive mark ends first, that is the least recently
    /// failed (one that only active checks call down has no mark and comes first). `None`
    /// when every upstream was tried.
    ///
    /// Marks order the tries; they never refuse one (see
    /// [`PassiveHealth`](crate::PassiveHealth)).
    pub(crate) fn least_recently_failed(
        &self,
        upstreams: &[UpstreamState],
        tried: &[usize],
    ) -> Option<usize> {
        (0..upstreams.len())
            .filter(|i| !tried.contains(i))
            .min_by_key(|&i| upstreams[i].health.marked_until())
    }

    fn round_robin(
        &self,
        upstreams: &[UpstreamState],
        eligible: &impl Fn(usize) -> bool,
    ) -> Option<usize> {
        let len = self.schedule.len();
        if len == 0 {
            return None;
        }
        let scheduled = self.schedule[self.next.fetch_add(1, Ordering::Relaxed) % len];
        if eligible(scheduled) {
            return Some(scheduled);
        }
        // Going on to the next slot would hand all of this upstream's turns to whichever
        // upstream follows it in the cycle (double load on one neighbour during an outage);
        // a weighted draw spreads them over the rest as their weights say.
        weighted_draw(upstreams, eligible, None)
    }

    fn least_conn(
        &self,
        upstreams: &[UpstreamState],
        eligible: &impl Fn(usize) -> bool,
    ) -> Option<usize> {
        let mut best: Option<usize> = None;
        let mut ties = 0;
        for i in 0..upstreams.len() {
            if !eligible(i) {
                continue;
            }
            match best {
                Some(b) if !less_loaded(&upstreams[i], &upstreams[b]) => {
                    if !less_loaded(&upstreams[b], &upstreams[i]) {
                        ties += 1;
                    }
                }
                _ => {
                    best = Some(i);
                    ties = 1;
                }
            }
        }
        let first = best?;
        if ties == 1 {
            return Some(first);
        }
        // An idle pool is all ties: taking the first would send everything to one upstream,
        // and a rotating start would favour whichever tie follows a busy one. Taking the
        // tied upstreams in turn splits them exactly.
        let mut nth = self.next.fetch_add(1, Ordering::Relaxed) % ties;
        for i in first..upstreams.len() {
            let tied = eligible(i)
                && !less_loaded(&upstreams[i], &upstreams[first])
                && !less_loaded(&upstreams[first], &upstreams[i]);
            if tied {
                if nth == 0 {
                    return Some(i);
                }
                nth -= 1;
            }
        }
        // Loads moved between the two passes (other workers): the first pass's answer stands.
        Some(first)
    }

    fn rendezvous(
        &self,
        upstreams: &[UpstreamState],
        key: u64,
        eligible: &impl Fn(usize) -> bool,
    ) -> Option<usize> {
        let mut best: Option<(usize, f64)> = None;
        for (i, (state, &seed)) in upstreams.iter().zip(&self.seeds).enumerate() {
            if !eligible(i) {
                continue;
            }
            let score = rendezvous_score(key, seed, weight(state));
            if best.is_none_or(|(_, top)| score > top) {
                best = Some((i, score));
            }
        }
        best.map(|(i, _)| i)
    }
}

/// Two distinct upstreams drawn by weight, the less loaded of them; the first drawn on a tie.
fn random_two(upstreams: &[UpstreamState], eligible: &impl Fn(usize) -> bool) -> Option<usize> {
    let a = weighted_draw(upstreams, eligible, None)?;
    let Some(b) = weighted_draw(upstreams, eligible, Some(a)) else {
        return Some(a);
    };
    Some(if less_loaded(&upstreams[b], &upstreams[a]) {
        b
    } else {
        a
    })
}

/// An eligible upstream other than `except`, drawn with probability proportional to its
/// weight.
fn weighted_draw(
    upstreams: &[UpstreamState],
    eligible: &impl Fn(usize) -> bool,
    except: Option<usize>,
) -> Option<usize> {
    let candidate = |i: usize| Some(i) != except && eligible(i);
    let total: u64 = (0..upstreams.len())
        .filter(|&i| candidate(i))
        .map(|i| u64::from(weight(&upstreams[i])))
        .sum();
    if total == 0 {
        return None;
    }
    let mut ticket = fastrand::u64(..total);
    let mut last = None;
    for (i, state) in upstreams.iter().enumerate() {
        if !candidate(i) {
            continue;
        }
        let w = u64::from(weight(state));
        if ticket < w {
            return Some(i);
        }
        ticket -= w;
        last = Some(i);
    }
    // Another worker changed an upstream's health between the two passes: any candidate
    // still seen is as good an answer as the draw would have been.
    last
}

/// Whether `a` has fewer requests in flight per unit of weight than `b`, cross-multiplied
/// (`a / wa < b / wb`) so it needs no division and is exact.
fn less_loaded(a: &UpstreamState, b: &UpstreamState) -> bool {
    let load = |s: &UpstreamState, other: &UpstreamState| {
        s.in_flight() as u128 * u128::from(weight(other))
    };
    load(a, b) < load(b, a)
}

fn weight(state: &UpstreamState) -> u32 {
    // `Upstream::weight` never stores 0; the guard keeps a 0 from dividing anything by zero.
    state.upstream.weight.max(1)
}

/// One round-robin cycle: upstream `i` appears `w_i` times, interleaved with the others.
///
/// Turn `k` of upstream `i` is placed at time `(k + 1/2) / w_i`, and the cycle is all turns
/// in time order (ties to the lower index). Each upstream's turns are thus evenly spaced,
/// which is the spread nginx's smooth weighted round robin produces step by step (for weights
/// 1, 2, 3 both give `c b a c b c`), but computed once instead of per request under a lock.
fn schedule(weights: &[u32]) -> Box<[usize]> {
    let sum: u64 = weights.iter().map(|&w| u64::from(w.max(1))).sum();
    let scaled = |w: u32| {
        let w = u64::from(w.max(1));
        if sum > MAX_SCHEDULE {
            (w * MAX_SCHEDULE / sum).max(1)
        } else {
            w
        }
    };
    // (2k + 1, w, i): turn time (2k + 1) / 2w, compared cross-multiplied to stay exact.
    let mut turns: Vec<(u64, u64, usize)> = Vec::new();
    for (i, &w) in weights.iter().enumerate() {
        let w = scaled(w);
        turns.extend((0..w).map(|k| (2 * k + 1, w, i)));
    }
    turns.sort_unstable_by(|a, b| {
        (u128::from(a.0) * u128::from(b.1))
            .cmp(&(u128::from(b.0) * u128::from(a.1)))
            .then(a.2.cmp(&b.2))
    });
    turns.into_iter().map(|(_, _, i)| i).collect()
}

/// Weighted rendezvous score of `key` on the upstream with `seed` and `weight`:
/// `weight / -ln(u)` with `u` uniform in (0, 1) from hashing key and seed (the logarithmic
/// method of Schindelhauer and Schomaker). The highest score wins; each upstream wins a key
/// with probability `weight / sum(weights)`, and since an upstream's score does not depend on
/// the others, taking one out moves only the keys it won.
///
/// With equal weights the order is that of `u`, so the choice is exact integer arithmetic;
/// with unequal weights it goes through `ln`, the same on every run of a given build.
fn rendezvous_score(key: u64, seed: u64, weight: u32) -> f64 {
    let h = mix(key ^ seed);
    // The top 53 bits, centred in their interval, are exact as an f64 and never 0 or 1.
    let u = ((h >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
    f64::from(weight) / -u.ln()
}

/// FNV-1a, then [`mix`]: fixed (the same key maps the same way in every process and release,
/// unlike std's randomly keyed `DefaultHasher`), and FNV alone leaves the high bits of short
/// inputs such as IPv4 addresses poorly mixed.
fn hash_bytes(bytes: &[u8]) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    mix(bytes
        .iter()
        .fold(OFFSET, |h, &b| (h ^ u64::from(b)).wrapping_mul(PRIME)))
}

/// The splitmix64 finalizer: a bijection on `u64` in which every input bit affects every
/// output bit.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use std::net::{Ipv4Addr, Ipv6Addr};
    use std::time::Duration;

    use http::HeaderValue;

    use super::*;
    use crate::health::PassiveHealth;
    use crate::upstream::Upstream;

    fn upstreams(weights: &[u32]) -> Vec<UpstreamState> {
        weights
            .iter()
            .enumerate()
            .map(|(i, &w)| {
                let upstream = Upstream::new(&format!("10.0.0.{}:8080", i + 1)).unwrap();
                UpstreamState::new(upstream.weight(w))
            })
            .collect()
    }

    /// Puts `state` in a passive cool-down that lasts an hour past `now`.
    fn take_down(state: &UpstreamState, now: Instant) {
        let policy = PassiveHealth::new()
            .max_fails(1)
            .fail_timeout(Duration::from_secs(3600));
        state.health.record_failure(now, &policy, &state.metrics);
        assert!(!state.health.is_available(now));
    }

    /// How often each upstream is picked in `picks` picks.
    fn counts(
        balancer: &Balancer,
        upstreams: &[UpstreamState],
        picks: usize,
        key: Option<u64>,
        tried: &[usize],
    ) -> Vec<usize> {
        let now = Instant::now();
        let mut counts = vec![0; upstreams.len()];
        for _ in 0..picks {
            counts[balancer.pick(upstreams, key, tried, now).unwrap()] += 1;
        }
        counts
    }

    fn set_in_flight(upstreams: &[UpstreamState], loads: &[usize]) {
        for (state, &load) in upstreams.iter().zip(loads) {
            state.in_flight.store(load, Ordering::Relaxed);
        }
    }

    fn header_key(balancer: &Balancer, value: &str) -> Option<u64> {
        let mut headers = HeaderMap::new();
        headers.insert("x-user", HeaderValue::from_str(value).unwrap());
        balancer.key(&headers, None)
    }

    fn hash_on_header() -> Balance {
        Balance::Hash(HashKey::Header(HeaderName::from_static("x-user")))
    }

    #[test]
    fn round_robin_gives_each_upstream_exactly_its_weight_per_cycle() {
        let ups = upstreams(&[1, 2, 3]);
        let balancer = Balancer::new(Balance::RoundRobin, &ups);
        assert_eq!(counts(&balancer, &ups, 600, None, &[]), [100, 200, 300]);
    }

    #[test]
    fn round_robin_interleaves_instead_of_sending_runs() {
        let ups = upstreams(&[1, 2, 3]);
        let balancer = Balancer::new(Balance::RoundRobin, &ups);
        let now = Instant::now();
        let cycle: Vec<usize> = (0..12)
            .map(|_| balancer.pick(&ups, None, &[], now).unwrap())
            .collect();
        // The same order nginx's smooth weighted round robin gives, cycle after cycle.
        assert_eq!(cycle, [2, 1, 0, 2, 1, 2, 2, 1, 0, 2, 1, 2]);
    }

    #[test]
    fn round_robin_scales_huge_weights_down_to_a_bounded_cycle() {
        let ups = upstreams(&[u32::MAX, u32::MAX / 2, 1]);
        let balancer = Balancer::new(Balance::RoundRobin, &ups);
        assert!(balancer.schedule.len() as u64 <= MAX_SCHEDULE + 3);
        let per_cycle = counts(&balancer, &ups, balancer.schedule.len(), None, &[]);
        assert_eq!(
            per_cycle[2], 1,
            "a small weight still gets a turn: {per_cycle:?}"
        );
        assert!(
            per_cycle[0].abs_diff(2 * per_cycle[1]) <= 2,
            "{per_cycle:?}"
        );
    }

    #[test]
    fn round_robin_spreads_an_unavailable_upstreams_turns_over_the_others() {
        fastrand::seed(1);
        let ups = upstreams(&[1, 1, 1, 1]);
        let balancer = Balancer::new(Balance::RoundRobin, &ups);
        take_down(&ups[1], Instant::now());
        let counts = counts(&balancer, &ups, 1200, None, &[]);
        assert_eq!(counts[1], 0);
        // 300 each plus a third of upstream 1's 300; next-slot fallback would give 600 to 2.
        for i in [0, 2, 3] {
            assert!((330..=470).contains(&counts[i]), "{counts:?}");
        }
    }

    #[test]
    fn least_conn_picks_the_fewest_in_flight() {
        let ups = upstreams(&[1, 1, 1]);
        let balancer = Balancer::new(Balance::LeastConn, &ups);
        set_in_flight(&ups, &[3, 1, 2]);
        assert_eq!(counts(&balancer, &ups, 30, None, &[]), [0, 30, 0]);
    }

    #[test]
    fn least_conn_divides_in_flight_by_weight() {
        let ups = upstreams(&[1, 3]);
        let balancer = Balancer::new(Balance::LeastConn, &ups);
        // 1 per weight against 2/3 per weight.
        set_in_flight(&ups, &[1, 2]);
        assert_eq!(counts(&balancer, &ups, 10, None, &[]), [0, 10]);
        // 1 against 4/3.
        set_in_flight(&ups, &[1, 4]);
        assert_eq!(counts(&balancer, &ups, 10, None, &[]), [10, 0]);
    }

    #[test]
    fn least_conn_rotates_through_ties() {
        let ups = upstreams(&[1, 1, 1]);
        let balancer = Balancer::new(Balance::LeastConn, &ups);
        assert_eq!(counts(&balancer, &ups, 30, None, &[]), [10, 10, 10]);
        set_in_flight(&ups, &[5, 0, 0]);
        assert_eq!(counts(&balancer, &ups, 30, None, &[]), [0, 15, 15]);
        set_in_flight(&ups, &[0, 2, 0]);
        assert_eq!(counts(&balancer, &ups, 30, None, &[]), [15, 0, 15]);
    }

    #[test]
    fn random_two_spreads_evenly_over_equal_upstreams() {
        fastrand::seed(7);
        let ups = upstreams(&[1, 1, 1, 1]);
        let balancer = Balancer::new(Balance::RandomTwo, &ups);
        let counts = counts(&balancer, &ups, 4000, None, &[]);
        // Expected 1000 each; the binomial spread is about 27, so this holds for any seed.
        for count in &counts {
            assert!((850..=1150).contains(count), "{counts:?}");
        }
    }

    #[test]
    fn random_two_follows_weights() {
        fastrand::seed(11);
        let ups = upstreams(&[1, 3]);
        let balancer = Balancer::new(Balance::RandomTwo, &ups);
        // With two upstreams both are always drawn; with equal loads the first drawn wins.
        let counts = counts(&balancer, &ups, 4000, None, &[]);
        assert!((850..=1150).contains(&counts[0]), "{counts:?}");
    }

    #[test]
    fn random_two_never_picks_the_most_loaded() {
        fastrand::seed(3);
        let ups = upstreams(&[1, 1, 1]);
        let balancer = Balancer::new(Balance::RandomTwo, &ups);
        set_in_flight(&ups, &[0, 9, 1]);
        let counts = counts(&balancer, &ups, 3000, None, &[]);
        assert_eq!(counts[1], 0, "{counts:?}");
        // 0 wins whenever it is drawn (2 of 3 pairs); 2 only against 1.
        assert!((1800..=2200).contains(&counts[0]), "{counts:?}");
    }

    #[test]
    fn hash_sends_the_same_key_to_the_same_upstream() {
        let ups = upstreams(&[1, 1, 1, 1]);
        let balancer = Balancer::new(hash_on_header(), &ups);
        let now = Instant::now();
        for user in ["alice", "bob", "carol", ""] {
            let key = header_key(&balancer, user);
            assert!(key.is_some());
            let first = balancer.pick(&ups, key, &[], now);
            for _ in 0..20 {
                assert_eq!(balancer.pick(&ups, key, &[], now), first, "{user}");
            }
            // A second balancer over the same addresses, as another process would build it.
            let again = Balancer::new(hash_on_header(), &ups);
            assert_eq!(again.pick(&ups, key, &[], now), first);
        }
    }

    #[test]
    fn hash_spreads_keys_by_weight() {
        let ups = upstreams(&[1, 1, 1, 1]);
        let balancer = Balancer::new(hash_on_header(), &ups);
        let now = Instant::now();
        let mut counts = [0; 4];
        for user in 0..4000 {
            let key = header_key(&balancer, &format!("user-{user}"));
            counts[balancer.pick(&ups, key, &[], now).unwrap()] += 1;
        }
        for count in counts {
            assert!((850..=1150).contains(&count), "{counts:?}");
        }

        let ups = upstreams(&[1, 3]);
        let balancer = Balancer::new(hash_on_header(), &ups);
        let mut counts = [0; 2];
        for user in 0..4000 {
            let key = header_key(&balancer, &format!("user-{user}"));
            counts[balancer.pick(&ups, key, &[], now).unwrap()] += 1;
        }
        assert!((850..=1150).contains(&counts[0]), "{counts:?}");
    }

    #[test]
    fn hash_moves_only_the_keys_of_an_upstream_that_goes_out() {
        let ups = upstreams(&[1, 1, 1, 1, 1]);
        let balancer = Balancer::new(hash_on_header(), &ups);
        let now = Instant::now();
        let keys: Vec<_> = (0..2000)
            .map(|user| header_key(&balancer, &format!("user-{user}")))
            .collect();
        let before: Vec<_> = keys
            .iter()
            .map(|&key| balancer.pick(&ups, key, &[], now).unwrap())
            .collect();
        take_down(&ups[2], now);
        let mut moved = [0; 5];
        for (&key, &was) in keys.iter().zip(&before) {
            let now_on = balancer.pick(&ups, key, &[], now).unwrap();
            if was == 2 {
                moved[now_on] += 1;
            } else {
                assert_eq!(now_on, was, "a key not on the downed upstream moved");
            }
        }
        // Upstream 2's keys spread over all the others rather than onto one neighbour.
        assert_eq!(moved[2], 0);
        for i in [0, 1, 3, 4] {
            assert!(moved[i] > 40, "{moved:?}");
        }
    }

    #[test]
    fn hash_does_not_depend_on_the_order_of_the_upstreams() {
        let ups = upstreams(&[1, 1, 1, 1]);
        let mut reversed = upstreams(&[1, 1, 1, 1]);
        reversed.reverse();
        let balancer = Balancer::new(hash_on_header(), &ups);
        let other = Balancer::new(hash_on_header(), &reversed);
        let now = Instant::now();
        for user in 0..200 {
            let key = header_key(&balancer, &format!("user-{user}"));
            let a = balancer.pick(&ups, key, &[], now).unwrap();
            let b = other.pick(&reversed, key, &[], now).unwrap();
            assert_eq!(ups[a].upstream, reversed[b].upstream);
        }
    }

    #[test]
    fn hash_without_a_key_goes_round_robin() {
        let ups = upstreams(&[1, 2, 3]);
        let balancer = Balancer::new(hash_on_header(), &ups);
        assert_eq!(balancer.key(&HeaderMap::new(), None), None);
        assert_eq!(counts(&balancer, &ups, 600, None, &[]), [100, 200, 300]);
    }

    #[test]
    fn keys_come_from_the_first_header_value_or_the_canonical_client_ip() {
        let ups = upstreams(&[1]);
        let on_header = Balancer::new(hash_on_header(), &ups);
        assert_eq!(header_key(&on_header, "a"), header_key(&on_header, "a"));
        assert_ne!(header_key(&on_header, "a"), header_key(&on_header, "b"));
        let mut headers = HeaderMap::new();
        headers.append("x-user", HeaderValue::from_static("a"));
        headers.append("x-user", HeaderValue::from_static("b"));
        assert_eq!(on_header.key(&headers, None), header_key(&on_header, "a"));

        let on_ip = Balancer::new(Balance::Hash(HashKey::ClientIp), &ups);
        let v4 = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 7));
        let mapped = IpAddr::V6(Ipv4Addr::new(192, 0, 2, 7).to_ipv6_mapped());
        let v6 = IpAddr::V6(Ipv6Addr::LOCALHOST);
        assert!(on_ip.key(&HeaderMap::new(), Some(v4)).is_some());
        assert_eq!(
            on_ip.key(&headers, Some(v4)),
            on_ip.key(&headers, Some(mapped))
        );
        assert_ne!(on_ip.key(&headers, Some(v4)), on_ip.key(&headers, Some(v6)));
        assert_eq!(on_ip.key(&headers, None), None);

        for policy in [Balance::RoundRobin, Balance::LeastConn, Balance::RandomTwo] {
            let balancer = Balancer::new(policy, &ups);
            assert_eq!(balancer.key(&headers, Some(v4)), None);
        }
    }

    #[test]
    fn every_policy_skips_tried_and_unavailable_upstreams() {
        let now = Instant::now();
        for policy in [
            Balance::RoundRobin,
            Balance::LeastConn,
            Balance::RandomTwo,
            hash_on_header(),
        ] {
            let ups = upstreams(&[1, 1, 1, 1]);
            let balancer = Balancer::new(policy.clone(), &ups);
            take_down(&ups[3], now);
            for user in 0..50 {
                let key = header_key(&balancer, &format!("user-{user}"));
                let picked = balancer.pick(&ups, key, &[0, 2], now);
                assert_eq!(picked, Some(1), "{policy:?}");
                let picked = balancer.pick(&ups, key, &[1], now).unwrap();
                assert!(picked == 0 || picked == 2, "{policy:?} picked {picked}");
            }
        }
    }

    #[test]
    fn when_all_are_marked_down_the_least_recently_failed_untried_one_is_next() {
        let ups = upstreams(&[1, 1, 1]);
        let balancer = Balancer::new(Balance::RoundRobin, &ups);
        let now = Instant::now();
        take_down(&ups[1], now);
        take_down(&ups[2], now + Duration::from_secs(1));
        take_down(&ups[0], now + Duration::from_secs(2));
        assert_eq!(balancer.pick(&ups, None, &[], now), None);
        assert_eq!(balancer.least_recently_failed(&ups, &[]), Some(1));
        assert_eq!(balancer.least_recently_failed(&ups, &[1]), Some(2));
        assert_eq!(balancer.least_recently_failed(&ups, &[1, 2]), Some(0));
        assert_eq!(balancer.least_recently_failed(&ups, &[0, 1, 2]), None);
        // One that is merely not chosen (no mark) comes before any marked one.
        let fresh = upstreams(&[1, 1]);
        take_down(&fresh[0], now);
        assert_eq!(balancer.least_recently_failed(&fresh, &[]), Some(1));
    }

    #[test]
    fn every_policy_gives_none_when_nothing_is_left() {
        let now = Instant::now();
        for policy in [
            Balance::RoundRobin,
            Balance::LeastConn,
            Balance::RandomTwo,
            hash_on_header(),
        ] {
            let ups = upstreams(&[1, 2, 3]);
            let balancer = Balancer::new(policy.clone(), &ups);
            let key = header_key(&balancer, "alice");
            assert_eq!(
                balancer.pick(&ups, key, &[0, 1, 2], now),
                None,
                "{policy:?}"
            );
            take_down(&ups[1], now);
            assert_eq!(balancer.pick(&ups, key, &[0, 2], now), None, "{policy:?}");
            take_down(&ups[0], now);
            take_down(&ups[2], now);
            assert_eq!(balancer.pick(&ups, key, &[], now), None, "{policy:?}");
            // The cool-downs end an hour later.
            let later = now + Duration::from_secs(3600);
            assert!(balancer.pick(&ups, key, &[], later).is_some(), "{policy:?}");

            let empty = Balancer::new(policy.clone(), &[]);
            assert_eq!(empty.pick(&[], key, &[], now), None, "{policy:?}");
        }
    }
}
