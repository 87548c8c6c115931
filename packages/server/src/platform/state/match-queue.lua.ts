import { CANDIDATE_SCAN_LIMIT, CANDIDATES_PER_TAG, DROPPED_SCAN_LIMIT } from './match-queue.js';

// The Lua scripts of the cluster-mode match queue (match-queue.redis.ts): one per operation.

/**
 * Shared Lua: `remove(uid, entry)` takes a user out of every structure. Keys: `mq:e:<uid>` (the
 * entry, JSON), `mq:t:<tag>` (waiting users by enqueue time), `mq:d` (users by deadline),
 * `mq:depth` (tag → waiting count), `mq:barred` (barred users by the end of their bar), `mq:bar-holders`
 * (barred user → bars not lifted), `mq:full` (users by when their direct-chat slots filled),
 * `mq:cancelled` (users by when `dequeue` ended their search), `mq:restricted` (users by when
 * `endRestricted` ended their search), `mq:o:<uid>` (the entry a pairing has out of the queue, JSON,
 * expiring at its deadline). All under the deployment's prefix (ARGV[1]). The scripts name
 * their keys through ARGV, which a single Redis (not Redis Cluster) allows.
 */
const REMOVE = `
local function remove(p, uid, e)
  for _, tag in ipairs(e.tags) do
    if redis.call('ZREM', p .. 'mq:t:' .. tag, uid) == 1 then
      if tonumber(redis.call('ZINCRBY', p .. 'mq:depth', -1, tag)) <= 0 then redis.call('ZREM', p .. 'mq:depth', tag) end
    end
  end
  redis.call('DEL', p .. 'mq:e:' .. uid)
  redis.call('ZREM', p .. 'mq:d', uid)
end
`;

/** Shared Lua: `insert(uid, entry, raw)` queues a user on every tag (in line by enqueue time) and by deadline. */
const INSERT = `
local function insert(p, uid, e, raw)
  for _, tag in ipairs(e.tags) do
    redis.call('ZADD', p .. 'mq:t:' .. tag, e.enqueuedAt, uid)
    redis.call('ZINCRBY', p .. 'mq:depth', 1, tag)
  end
  redis.call('SET', p .. 'mq:e:' .. uid, raw)
  redis.call('ZADD', p .. 'mq:d', e.deadline, uid)
end
`;

/**
 * Shared Lua: `mark_out(p, uid, e, raw, now)` marks an entry a pairing has out of the queue (it
 * still reads as searching) until its deadline; `out_of(p, uid, now)` answers such a marker before
 * its deadline (raw, and decoded), or nil.
 */
const OUT = `
local function mark_out(p, uid, e, raw, now)
  redis.call('SET', p .. 'mq:o:' .. uid, raw, 'PX', math.max(1, math.floor(e.deadline - now)))
end
local function out_of(p, uid, now)
  local raw = redis.call('GET', p .. 'mq:o:' .. uid)
  if not raw then return nil end
  local e = cjson.decode(raw)
  if e.deadline <= now then return nil end
  return raw, e
end
`;

/**
 * Shared Lua: `take_peer(p, me, entry, now, dropped)` takes the longest-waiting compatible user on
 * the entry's first tag that has one out of the queue (marked out: mark_out) and answers its raw
 * entry and the tag (nil when none). On each tag it looks at up to CANDIDATE_SCAN_LIMIT users in
 * line, a page of CANDIDATES_PER_TAG at a time (one ZRANGE); a user taken out of the line on the
 * way (expired: its raw entry appended to `dropped`, not counted as looked at, up to
 * DROPPED_SCAN_LIMIT; vanished) shifts those behind it, so the next page starts that much earlier.
 * Users the entry excludes are passed over without reading their entries.
 */
const TAKE_PEER = `
local function take_peer(p, me, entry, now, dropped)
  local excluded = {}
  for _, u in ipairs(entry.exclude) do excluded[tostring(u)] = true end
  for _, tag in ipairs(entry.tags) do
    local line = p .. 'mq:t:' .. tag
    local start, looked = 0, 0
    while looked < ${CANDIDATE_SCAN_LIMIT} do
      local want = math.min(${CANDIDATES_PER_TAG}, ${CANDIDATE_SCAN_LIMIT} - looked)
      local candidates = redis.call('ZRANGE', line, start, start + want - 1)
      local counted = 0
      for _, c in ipairs(candidates) do
        local stays, counts = true, true
        if c ~= me and not excluded[c] then
          local craw = redis.call('GET', p .. 'mq:e:' .. c)
          if not craw then
            if redis.call('ZREM', line, c) == 1 then
              stays = false
              redis.call('ZINCRBY', p .. 'mq:depth', -1, tag)
            end
          else
            local ce = cjson.decode(craw)
            if ce.deadline <= now then
              if #dropped < ${DROPPED_SCAN_LIMIT} then
                remove(p, c, ce)
                stays, counts = false, false
                table.insert(dropped, craw)
              end
            else
              local blocked = false
              for _, u in ipairs(ce.exclude) do if tostring(u) == me then blocked = true end end
              if not blocked then
                remove(p, c, ce)
                mark_out(p, c, ce, craw, now)
                return craw, tag
              end
            end
          end
        end
        if counts then counted = counted + 1 end
        if stays then start = start + 1 end
      end
      looked = looked + counted
      if #candidates < want then break end
    end
  end
  return nil
end
`;

/**
 * Enqueue and restore, one script: ARGV[5] is what a queued entry answers, `queued` (enqueue) or
 * `restored` (restore). A barred user, or an entry that began before its user's slots filled
 * (`mq:full`) or before its user may no longer search (`mq:restricted`), is refused; a restore of
 * an entry that began before its user's search was ended (`mq:cancelled`) does nothing
 * (`cancelled`), nor one of a user searching on a newer entry (`already`), nor then one of an
 * entry past its deadline (`expired`); otherwise both pair with a waiting peer or queue the entry. Answers `{kind, peer or '', tag or
 * '', dropped...}`: the raw entries of expired users taken out on the way follow.
 */
export const PLACE = `${REMOVE}${INSERT}${OUT}${TAKE_PEER}
local p, me, raw, now, placed = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4]), ARGV[5]
local entry = cjson.decode(raw)
if placed == 'restored' then
  -- A restored entry is back from its pairing, whatever becomes of it now.
  local _, o = out_of(p, me, now)
  if o and o.enqueuedAt == entry.enqueuedAt then redis.call('DEL', p .. 'mq:o:' .. me) end
end
local barred = redis.call('ZSCORE', p .. 'mq:barred', me)
if barred and tonumber(barred) > now then return {'barred'} end
local full = redis.call('ZSCORE', p .. 'mq:full', me)
if full and entry.enqueuedAt <= tonumber(full) then return {'full'} end
local restricted = redis.call('ZSCORE', p .. 'mq:restricted', me)
if restricted and entry.enqueuedAt <= tonumber(restricted) then return {'restricted'} end
if placed == 'restored' then
  local cancelled = redis.call('ZSCORE', p .. 'mq:cancelled', me)
  if cancelled and entry.enqueuedAt <= tonumber(cancelled) then return {'cancelled'} end
end
if out_of(p, me, now) then return {'already'} end
local existing = redis.call('GET', p .. 'mq:e:' .. me)
local cur = existing and cjson.decode(existing)
if cur and cur.deadline > now then return {'already'} end
-- Only now: a search ended by a dequeue, or replaced, is not told it expired (MemoryMatchQueue.place).
if placed == 'restored' and entry.deadline <= now then return {'expired'} end
-- The user's own finished search, replaced (not dropped: MemoryMatchQueue.place).
if cur then remove(p, me, cur) end
if placed == 'queued' then
  -- A new search stays out of its user's cancelled mark (MemoryMatchQueue.searchesAgain).
  local mark = redis.call('ZSCORE', p .. 'mq:cancelled', me)
  if mark and tonumber(mark) >= entry.enqueuedAt then
    redis.call('ZADD', p .. 'mq:cancelled', entry.enqueuedAt - 1, me)
  end
end
local dropped = {}
local craw, tag = take_peer(p, me, entry, now, dropped)
local out
if craw then
  -- The caller of the pairing that follows (an enqueue's or a restored entry) is out of the
  -- queue too: it reads as searching until released (MemoryMatchQueue.place).
  mark_out(p, me, entry, raw, now)
  out = {'paired', craw, tag}
else
  insert(p, me, entry, raw)
  out = {placed, '', ''}
end
for _, d in ipairs(dropped) do table.insert(out, d) end
return out`;

/**
 * Dequeue, and with ARGV[5] (how long to keep the mark) endRestricted: also marks the user in
 * `mq:restricted` at `now`.
 */
export const DEQUEUE = `${REMOVE}
local p, me, now, keep = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
redis.call('ZREMRANGEBYSCORE', p .. 'mq:cancelled', '-inf', now - keep)
local cur = redis.call('ZSCORE', p .. 'mq:cancelled', me)
if not cur or tonumber(cur) < now then redis.call('ZADD', p .. 'mq:cancelled', now, me) end
if ARGV[5] then
  redis.call('ZREMRANGEBYSCORE', p .. 'mq:restricted', '-inf', now - tonumber(ARGV[5]))
  local r = redis.call('ZSCORE', p .. 'mq:restricted', me)
  if not r or tonumber(r) < now then redis.call('ZADD', p .. 'mq:restricted', now, me) end
end
redis.call('DEL', p .. 'mq:o:' .. me)
local raw = redis.call('GET', p .. 'mq:e:' .. me)
if not raw then return 0 end
remove(p, me, cjson.decode(raw))
return 1`;

export const BAR = `${REMOVE}
local p, me, untilMs, now = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4]
local ended = redis.call('ZRANGEBYSCORE', p .. 'mq:barred', '-inf', now)
for i = 1, #ended, 1000 do
  redis.call('HDEL', p .. 'mq:bar-holders', unpack(ended, i, math.min(i + 999, #ended)))
end
redis.call('ZREMRANGEBYSCORE', p .. 'mq:barred', '-inf', now)
local current = redis.call('ZSCORE', p .. 'mq:barred', me)
if not current or tonumber(current) < untilMs then redis.call('ZADD', p .. 'mq:barred', untilMs, me) end
redis.call('HINCRBY', p .. 'mq:bar-holders', me, 1)
local raw = redis.call('GET', p .. 'mq:e:' .. me)
if not raw then return false end
remove(p, me, cjson.decode(raw))
return raw`;

export const MARK_FULL = `${REMOVE}
local p, since, keep = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', p .. 'mq:full', '-inf', since - keep)
local out = {}
for i = 4, #ARGV do
  local uid = ARGV[i]
  local cur = redis.call('ZSCORE', p .. 'mq:full', uid)
  if not cur or tonumber(cur) < since then redis.call('ZADD', p .. 'mq:full', since, uid) end
  local raw = redis.call('GET', p .. 'mq:e:' .. uid)
  if raw then
    local e = cjson.decode(raw)
    if e.enqueuedAt <= since then
      remove(p, uid, e)
      table.insert(out, raw)
    end
  end
end
return out`;

/** Forgets the out-of-queue markers of (ARGV[2k], ARGV[2k+1]) = (user, enqueuedAt) that are those entries'. */
export const RELEASE = `
local p = ARGV[1]
for i = 2, #ARGV - 1, 2 do
  local raw = redis.call('GET', p .. 'mq:o:' .. ARGV[i])
  if raw and cjson.decode(raw).enqueuedAt == tonumber(ARGV[i + 1]) then redis.call('DEL', p .. 'mq:o:' .. ARGV[i]) end
end
return 1`;

export const UNBAR = `
local p, me = ARGV[1], ARGV[2]
if redis.call('HINCRBY', p .. 'mq:bar-holders', me, -1) <= 0 then
  redis.call('HDEL', p .. 'mq:bar-holders', me)
  redis.call('ZREM', p .. 'mq:barred', me)
end
return 1`;

/**
 * The ARGV[2] deepest tags of `mq:depth`, flat (tag, count, ...), ties by tag in code-unit order:
 * ZREVRANGE gives equal scores in reverse order, so the tags with the last count that made it in
 * are read again in forward order (ZRANGEBYSCORE), only as many as fit. Read-only.
 */
export const TOP_TAGS = `
local depth, n = ARGV[1] .. 'mq:depth', tonumber(ARGV[2])
local top = redis.call('ZREVRANGE', depth, 0, n - 1, 'WITHSCORES')
if #top < 2 * n then return top end
local last = top[#top]
local out = {}
for i = 1, #top, 2 do
  if tonumber(top[i + 1]) > tonumber(last) then
    table.insert(out, top[i])
    table.insert(out, top[i + 1])
  end
end
local ties = redis.call('ZRANGEBYSCORE', depth, last, last, 'WITHSCORES', 'LIMIT', 0, n - #out / 2)
for _, v in ipairs(ties) do table.insert(out, v) end
return out`;

export const POP_EXPIRED = `${REMOVE}
local p, now, limit = ARGV[1], ARGV[2], tonumber(ARGV[3])
local ids = redis.call('ZRANGEBYSCORE', p .. 'mq:d', '-inf', now, 'LIMIT', 0, limit)
local out = {}
for _, uid in ipairs(ids) do
  local raw = redis.call('GET', p .. 'mq:e:' .. uid)
  if raw then
    remove(p, uid, cjson.decode(raw))
    table.insert(out, raw)
  else
    redis.call('ZREM', p .. 'mq:d', uid)
  end
end
return out`;
