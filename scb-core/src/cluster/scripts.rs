//! The Lua scripts the cluster runs in Redis: each is one round trip and atomic there.

use std::sync::LazyLock;

use redis::Script;

/// Takes a lock if nobody holds it. KEYS: the lock, the fence counter. ARGV: this
/// instance's name, the lease in milliseconds. Returns `{1, fence, token}` when taken,
/// `{0, milliseconds left, holder's token}` when held.
pub(super) static ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local holder = redis.call('GET', KEYS[1])
if holder then return {0, redis.call('PTTL', KEYS[1]), holder} end
local fence = redis.call('INCR', KEYS[2])
local token = ARGV[1] .. '/' .. fence
redis.call('SET', KEYS[1], token, 'PX', ARGV[2])
return {1, fence, token}
",
    )
});

/// Extends a lease still held by `token`. KEYS: the lock. ARGV: the token, the lease in
/// milliseconds. Returns 1, or 0 when the lock is no longer this token's.
pub(super) static RENEW: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
",
    )
});

/// Releases a lock held by `token`. KEYS: the lock. ARGV: the token.
pub(super) static RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
",
    )
});

/// Writes hash fields only while `token` holds the lock (the fencing check, made where
/// the data lives), then bumps the version counter others watch. KEYS: the lock, the
/// hash, the version counter. ARGV: the token, then field, value, field, value...
/// Returns the new version, or 0 when the lock was lost.
pub(super) static FENCED_HSET: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
local args = {}
for i = 2, #ARGV do args[#args + 1] = ARGV[i] end
redis.call('HSET', KEYS[2], unpack(args))
return redis.call('INCR', KEYS[3])
",
    )
});

/// Takes up to `want` tokens of a GCRA bucket, on Redis's clock. KEYS: the bucket.
/// ARGV: the interval and the tolerance (interval times burst) in microseconds, `want`.
/// Returns `{granted, microseconds until one is free}`.
pub(super) static TAKE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = tonumber(ARGV[1])
local tolerance = tonumber(ARGV[2])
local want = tonumber(ARGV[3])
local tat = tonumber(redis.call('GET', KEYS[1])) or now
if tat < now then tat = now end
local free = math.floor((now + tolerance - tat) / interval)
if free < 1 then return {0, tat + interval - tolerance - now} end
local granted = math.min(want, free)
tat = tat + granted * interval
redis.call('SET', KEYS[1], string.format('%d', tat), 'PX', math.ceil((tat - now) / 1000) + 1)
return {granted, 0}
",
    )
});
