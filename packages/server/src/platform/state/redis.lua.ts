// The Lua scripts of the cluster-mode state store (redis.ts): each one atomic in Redis.

/** ARGV: now, deadline, members…; drops the passed ones, adds, answers {count, earliest deadline}. */
export const ADD_EXPIRING = `
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
local args = {}
for i = 3, #ARGV do
  args[#args + 1] = ARGV[2]
  args[#args + 1] = ARGV[i]
end
if #args > 0 then redis.call('ZADD', KEYS[1], unpack(args)) end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
local top = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
if top[2] then redis.call('PEXPIREAT', KEYS[1], top[2]) end
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
return {redis.call('ZCARD', KEYS[1]), first[2] or ARGV[2]}`;

/** KEYS[1]; ARGV: expected. Deletes the key while it holds `expected`; answers 1 when it did. */
export const DEL_IF = `
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0`;

/** KEYS[1]; ARGV: expected, value, ttl ms. Replaces the value while it is `expected`; 1 when it did. */
export const REPLACE_IF = `
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return 1
end
return 0`;

/** KEYS[1]; ARGV: now. Answers the members whose deadline is after `now`, and deletes the set. */
export const TAKE_EXPIRING = `
local members = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. ARGV[1], '+inf')
redis.call('DEL', KEYS[1])
return members`;

/**
 * KEYS: key, set; ARGV: value, ttl ms, now, deadline, member, max. setIfAbsentCounted: answers {0}
 * when the key exists, {2, earliest deadline} when the member does not fit, else sets both and {1}.
 */
export const SET_IF_ABSENT_COUNTED = `
if redis.call('EXISTS', KEYS[1]) == 1 then return {0} end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', ARGV[3])
if not redis.call('ZSCORE', KEYS[2], ARGV[5]) and redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[6]) then
  local first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
  return {2, first[2] or ARGV[4]}
end
redis.call('ZADD', KEYS[2], ARGV[4], ARGV[5])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', ARGV[3])
local top = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
if top[2] then redis.call('PEXPIREAT', KEYS[2], top[2]) end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return {1}`;

/**
 * KEYS[1]: a limiter's counter; ARGV: points. The limiter's give-back: takes the points off the
 * window still open, never below nothing spent, and leaves an ended window ended (rate-limiter-
 * flexible's `reward` would open a new window at minus the points: a credit the next one keeps).
 */
export const REFUND_OPEN = `
local spent = tonumber(redis.call('GET', KEYS[1]))
if not spent then return 0 end
local back = math.min(tonumber(ARGV[1]), math.max(spent, 0))
if back > 0 then redis.call('DECRBY', KEYS[1], back) end
return back`;
