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
 * KEYS: a limiter's counter, its window's identity; ARGV: points, window ms, an identity for a new
 * window. The limiter's spend: opens the key's window if none is open (the counter at 0, both keys
 * ending with it), adds the points, and answers {points spent in the window, ms before it ends,
 * its identity}. A window opened by a limiter that kept no identity (rate-limiter-flexible's, the
 * same counter) is given one.
 */
export const CONSUME_WINDOW = `
local opened = redis.call('SET', KEYS[1], 0, 'PX', ARGV[2], 'NX')
local spent = redis.call('INCRBY', KEYS[1], ARGV[1])
local ttl = redis.call('PTTL', KEYS[1])
if ttl < 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  ttl = tonumber(ARGV[2])
end
local id = (not opened) and redis.call('GET', KEYS[2])
if not id then
  id = ARGV[3]
  redis.call('SET', KEYS[2], id, 'PX', math.max(ttl, 1))
end
return {spent, ttl, id}`;

/**
 * KEYS: a limiter's counter, its window's identity; ARGV: points, the window named. The limiter's
 * give-back: takes the points off the named window while it is the open one, never below nothing
 * spent; a window that has ended (whether or not another has opened since) gets nothing.
 */
export const REFUND_WINDOW = `
if redis.call('GET', KEYS[2]) ~= ARGV[2] then return 0 end
local spent = tonumber(redis.call('GET', KEYS[1]))
if not spent then return 0 end
local back = math.min(tonumber(ARGV[1]), math.max(spent, 0))
if back > 0 then redis.call('DECRBY', KEYS[1], back) end
return back`;
