"""Lua scripts: each operation of the saver is one atomic script call.

Scripts use only commands Redis 5.0 has and take every key prefix from
`langgraph_checkpoint_plainredis._keys`; they append ``N .. ':' .. tail`` to a
per-kind prefix exactly as the layout there describes. Members of the per-timeline
``keys`` zset are ``c<checkpoint id>``, ``w<checkpoint id>`` and ``b<blob suffix>``.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field

__all__ = ["SCRIPTS", "Script"]

_PRELUDE = r"""
local function nsread(s, pos)
  local colon = string.find(s, ':', pos, true)
  if not colon then return nil, #s + 1 end
  local n = tonumber(string.sub(s, pos, colon - 1))
  -- A cut or damaged field is no field: its bytes must all be there, then the ','.
  if not n or n < 0 or string.byte(s, colon + n + 1) ~= 44 then return nil, #s + 1 end
  return string.sub(s, colon + 1, colon + n), colon + n + 2
end

-- The position after the netstring at `pos` of `s`, or nil: its bytes are not copied.
local function nsskip(s, pos)
  local colon = string.find(s, ':', pos, true)
  if not colon then return nil end
  local n = tonumber(string.sub(s, pos, colon - 1))
  if not n or n < 0 or string.byte(s, colon + n + 1) ~= 44 then return nil end
  return colon + n + 2
end

-- Whether a checkpoint payload's metadata names the counters of a DeltaChannel, which
-- LangGraph writes in every checkpoint of a graph that has one: a search of its bytes (the
-- serializer's map keys), without decoding. The client decodes the metadata first; this
-- catches a checkpoint written since, so it may refuse more, never less.
local function delta_marked(payload)
  local pos = 2
  for _ = 1, 6 do  -- parent, run, refs, checkpoint type and bytes, metadata type
    pos = nsskip(payload, pos)
    if not pos then return false end
  end
  return string.find(payload, 'counters_since_delta_snapshot', pos, true) ~= nil
    or string.find(payload, 'delta_writes_versioned', pos, true) ~= nil
end

-- The escaped run id and the blob suffixes a checkpoint payload references, and whether
-- the payload read as one (a damaged one yields what could be read, and false).
local function header(payload)
  if string.byte(payload, 1) ~= 1 then return '', {}, false end
  local parent, pos = nsread(payload, 2)
  local run, refsblob
  run, pos = nsread(payload, pos)
  refsblob, pos = nsread(payload, pos)
  local refs, intact = {}, parent ~= nil and run ~= nil and refsblob ~= nil
  if refsblob then
    local p = 1
    while p <= #refsblob do
      local r
      r, p = nsread(refsblob, p)
      if r then refs[#refs + 1] = r else intact = false end
    end
  end
  return run or '', refs, intact
end

-- The parent id of a checkpoint payload ('' for none), or nil for a damaged one.
local function parent_of(payload)
  if string.byte(payload, 1) ~= 1 then return nil end
  return (nsread(payload, 2))
end

-- Whether a blob value holds a value: one of type 'empty' (code 'e', compressed or not) is
-- none, as a missing key is (a DeltaChannel between snapshots).
local function holds_value(v)
  local head = string.byte(v, 1)
  return not (string.byte(v, 2) == 101 and (head == 1 or head == 17))
end

-- The escaped channel of a blob ref (``CH:V``).
local function ref_channel(r)
  local colon = string.find(r, ':', 1, true)
  return colon and string.sub(r, 1, colon - 1)
end

-- The escaped run id alone: the payload's second field, without reading the refs.
local function run_of(payload)
  if string.byte(payload, 1) ~= 1 then return '' end
  local _, pos = nsread(payload, 2)
  return (nsread(payload, pos)) or ''
end

-- The key-index member naming the run that wrote checkpoint `cid` ('' = none), so that
-- deleting a thread finds every run set without reading a checkpoint payload.
local function run_marker(run, cid)
  return 'r' .. run .. ':' .. cid
end

-- The escaped run and the checkpoint id of a run marker (escaped runs hold no ':').
local function marker_parts(m)
  local colon = string.find(m, ':', 2, true)
  if not colon then return nil, nil end
  return string.sub(m, 2, colon - 1), string.sub(m, colon + 1)
end

-- The server's clock in ms, as a decimal string. Expiry scores are written and read against
-- it alone: clients whose clocks disagree, or jump, never take a live key for an expired one.
-- '%.0f': exact below 2^53, where '%d' goes through a C long (32 bits on some builds).
local function now_ms()
  local t = redis.call('TIME')
  return string.format('%.0f', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
end

-- The expiry score of a key written at `now` to live `ttl` ms (0: for ever).
local function expiry(now, ttl)
  if ttl > 0 then return string.format('%.0f', tonumber(now) + ttl) end
  return 'inf'
end

local function wrongtype(key, found, expected)
  return redis.error_reply('PLAINREDIS_WRONGTYPE ' .. found .. ' ' .. expected .. ' ' .. key)
end

-- Returns an error reply when key exists with a type other than expected.
local function check(key, expected)
  local t = redis.call('TYPE', key)['ok']
  if t ~= 'none' and t ~= expected then return wrongtype(key, t, expected) end
  return nil
end

local function check_registry(key)
  local t = redis.call('TYPE', key)['ok']
  if t == 'hash' then return redis.error_reply('PLAINREDIS_LEGACY ' .. key) end
  if t ~= 'none' and t ~= 'zset' then return wrongtype(key, t, 'zset') end
  return nil
end

-- A failed read is a wrong type only when Redis says so; anything else (a missing ACL
-- permission, say) is passed on as it came.
local function read_error(key, reply, expected)
  if string.find(reply.err, 'WRONGTYPE', 1, true) then
    return wrongtype(key, redis.call('TYPE', key)['ok'], expected)
  end
  return redis.error_reply(reply.err)
end

local function get_string(key)
  local v = redis.pcall('GET', key)
  if type(v) == 'table' and v.err then return nil, read_error(key, v, 'string') end
  return v, nil
end

local function get_hash(key)
  local v = redis.pcall('HGETALL', key)
  if v.err then return nil, read_error(key, v, 'hash') end
  return v, nil
end

-- A field reindex() marked complete in the index `marker` since the saver read it, and that
-- the saver does not index (ARGV[from..to] are the fields it does): a write by `what` would
-- be missing from that index. Returns the refusal, made before anything is written, or nil.
local function unindexed(marker, from, to, what)
  local marked = redis.pcall('HKEYS', marker)
  if marked.err then return read_error(marker, marked, 'hash') end
  if #marked == 0 then return nil end
  local mine = {}
  for i = from, to do mine[ARGV[i]] = true end
  for _, field in ipairs(marked) do
    if not mine[field] then
      return redis.error_reply('PLAINREDIS_UNINDEXED ' .. what .. ' ' .. field)
    end
  end
  return nil
end

-- Walks what LangGraph reads to rebuild the DeltaChannels `channels` (escaped, as blob refs
-- name them) of checkpoint `cid` (its payload) of timeline `n` (get_delta_channel_history):
-- that checkpoint and its ancestors back to the nearest one holding a value of each, that one
-- included (its writes count too). A channel the checkpoint has no version of is none to
-- rebuild (LangGraph replays only those it has: one never written would never find a value,
-- and the walk would read every ancestor). Calls visit(id, payload) for each. A missing or
-- damaged ancestor ends the walk, as it ends LangGraph's. Returns an error reply, or nil.
local function delta_chain(n, cid, payload, channels, cp_prefix, blob_prefix, visit)
  local wanted, open, count = {}, {}, 0
  for _, ch in ipairs(channels) do wanted[ch] = true end
  local _, refs, intact = header(payload)
  for _, r in ipairs(refs) do
    local ch = ref_channel(r)
    if ch and wanted[ch] and not open[ch] then
      open[ch] = true
      count = count + 1
    end
  end
  while true do
    visit(cid, payload)
    _, refs, intact = header(payload)
    if not intact then return nil end
    for _, r in ipairs(refs) do
      local ch = ref_channel(r)
      if ch and open[ch] then
        local key = blob_prefix .. n .. ':' .. r
        local head = redis.pcall('GETRANGE', key, 0, 1)  -- a value's first bytes say enough
        if type(head) == 'table' and head.err then return read_error(key, head, 'string') end
        if head ~= '' and holds_value(head) then
          open[ch] = nil
          count = count - 1
        end
      end
    end
    cid = parent_of(payload)
    if count == 0 or not cid or cid == '' then return nil end
    local err
    payload, err = get_string(cp_prefix .. n .. ':' .. cid)
    if err then return err end
    if not payload then return nil end
  end
end

-- The newest checkpoint of a timeline whose payload still exists. Reading the timeline is
-- its type check.
local function latest(idx, cp_prefix, n)
  local start = 0
  while true do
    local ids = redis.pcall('ZREVRANGE', idx, start, start + 7)
    if ids.err then return nil, nil, read_error(idx, ids, 'zset') end
    if #ids == 0 then return nil, nil, nil end
    for _, c in ipairs(ids) do
      local payload, err = get_string(cp_prefix .. n .. ':' .. c)
      if err then return nil, nil, err end
      if payload then return c, payload, nil end
    end
    start = start + 8
  end
end

-- Checkpoint `cid` of timeline `n` ('' = the newest whose payload still exists): its id and
-- payload (nil when there is none), or an error reply.
local function checkpoint_at(idx, cp_prefix, n, cid)
  if cid == '' then return latest(idx, cp_prefix, n) end
  local payload, err = get_string(cp_prefix .. n .. ':' .. cid)
  return cid, payload, err
end

-- Gives a run set at least `ttl` ms to live, unless it must live for ever: a run set is shared
-- by every thread the run wrote, so one kept for ever (a thread without a TTL is in it) stays
-- so, unless the member just added is its only one. `left`: its PTTL, when already read.
local function expire_run(key, ttl, left)
  left = left or redis.call('PTTL', key)
  if left == -1 then
    local members = redis.pcall('SCARD', key)  -- a foreign value: leave it as it is
    if type(members) ~= 'number' or members > 1 then return end
  end
  if left < ttl then redis.call('PEXPIRE', key, ttl) end
end

-- Gives `key` at least `ttl` ms to live and its key-index entry `member` the matching
-- `score`, never shortening a life: a key kept for ever, or by a writer with a longer TTL,
-- keeps it (a key kept for ever is taken over by adopt_ttl). False when it was left alone.
-- Every key a script gives a TTL expires at its one `score` (PEXPIREAT), not `ttl` after the
-- command that set it: on Redis 5 to 7.0 that clock runs on during the script, so a value
-- set before the checkpoint reading it expired a few ms before it, which then read back
-- without that channel.
local function extend(key, keys, member, ttl, score)
  local left = redis.call('PTTL', key)
  if left == -1 or left >= ttl then return false end
  if left >= 0 then redis.call('PEXPIREAT', key, score) end
  redis.call('ZADD', keys, 'XX', score, member)
  return true
end

-- Whether a blob key that a put only refreshes, and finds missing, has expired. A missing key
-- whose key-index entry `member` is live stands for a channel absent at that version (PUT
-- writes no key for one); without a live entry the value is gone. A key a script gives a TTL
-- expires at its score (see extend), but one that kept the life it had was timed by its PTTL,
-- and may expire a little before its score: an entry within a second of its score (`ttl` / 2
-- for a shorter TTL) counts as expired, and the caller sends what it has for it, the value or
-- "absent" again.
local function blob_lost(keys, member, now, ttl)
  local score = redis.call('ZSCORE', keys, member)
  if not score then return true end
  if score == 'inf' then return false end
  local slack = 1000
  if ttl > 0 then slack = math.min(slack, math.floor(ttl / 2)) end
  return tonumber(score) <= tonumber(now) + slack
end

-- SET `key` to `value` for `ttl` ms (expiry score `score`, from the clock `now`), unless
-- `again` (the put writes keys that exist: a retried put, versions a caller reuses) and the
-- key has a longer life, or none, from another writer: then it keeps that life, since a
-- checkpoint that writer keeps longer may read it. Returns the key's expiry score and the
-- ms it lives (`ttl` for one kept for ever: the takeover later in the put gives it a TTL).
local function set_kept(key, value, ttl, score, now, again)
  local left = again and redis.call('PTTL', key) or -2
  if left == -1 then
    redis.call('SET', key, value)
    return 'inf', ttl
  end
  if left > ttl then
    redis.call('SET', key, value, 'PX', left)
    return expiry(now, left), left
  end
  redis.call('SET', key, value)
  redis.call('PEXPIREAT', key, score)  -- see extend
  return score, ttl
end

-- Refreshes the TTL of one checkpoint and of all it reads (payload, writes, blobs), and
-- their entries in the key index, whose scores are expiry times; with `run_prefix` (a
-- standalone server) also its run set, as a put does.
local function refresh_checkpoint(n, cid, payload, cp_prefix, wr_prefix, blob_prefix, keys,
                                  ttl, score, run_prefix)
  local run, refs = header(payload)
  if extend(cp_prefix .. n .. ':' .. cid, keys, 'c' .. cid, ttl, score) then
    redis.call('ZADD', keys, 'XX', score, run_marker(run, cid))
  end
  extend(wr_prefix .. n .. ':' .. cid, keys, 'w' .. cid, ttl, score)
  if run_prefix and run ~= '' then expire_run(run_prefix .. run, ttl) end
  for _, r in ipairs(refs) do
    extend(blob_prefix .. n .. ':' .. r, keys, 'b' .. r, ttl, score)
  end
end

-- Reads one checkpoint: {id, payload, writes, blob values in ref order}. With `sent` (a
-- table shared by the entries of one reply), a blob an earlier entry of the reply already
-- carries comes back as '' (never a valid blob value), one it found missing as nil again
-- without another look: checkpoints next to each other in a timeline share most of their
-- blobs. A missing blob is an absent channel.
local function read_entry(n, cid, payload, wr_prefix, blob_prefix, sent)
  local writes, err = get_hash(wr_prefix .. n .. ':' .. cid)
  if err then return nil, err end
  local _, refs = header(payload)
  local values = {}
  if #refs > 0 then
    local keys, wanted = {}, {}
    for i, r in ipairs(refs) do
      keys[i] = blob_prefix .. n .. ':' .. r
      local known = sent and sent[keys[i]]
      if known == 'absent' then values[i] = false
      elseif known then values[i] = ''
      else wanted[#wanted + 1] = i end
    end
    if #wanted > 0 then
      -- In MGETs of 1,000 keys at most: Lua unpacks 8,000 values at most at once.
      local got = {}
      for from = 1, #wanted, 1000 do
        local fetch = {}
        for j = from, math.min(from + 999, #wanted) do fetch[#fetch + 1] = keys[wanted[j]] end
        for _, v in ipairs(redis.call('MGET', unpack(fetch))) do got[#got + 1] = v end
      end
      for j, i in ipairs(wanted) do
        local v = got[j]
        values[i] = v
        if v then
          if sent then sent[keys[i]] = true end
        else
          local t = redis.call('TYPE', keys[i])['ok']
          if t ~= 'none' then return nil, wrongtype(keys[i], t, 'string') end
          if sent then sent[keys[i]] = 'absent' end
        end
      end
    end
  end
  return {cid, payload, writes, values}, nil
end

-- The subgraph namespaces of timeline `n` paused on an interrupt at its checkpoint `cid`:
-- each `__interrupt__` write (field `<task>:-3`) there is a task whose subgraph paused, and
-- that subgraph's namespace is `n|<node>:<task>` (escaped, so `%3A`), found in the thread's
-- namespace set `nskey`. Read only. Returns a list of escaped namespaces, or nil and an error.
local function paused_subgraphs(n, cid, wr_prefix, nskey)
  local wrkey = wr_prefix .. n .. ':' .. cid
  local fields = redis.pcall('HKEYS', wrkey)
  if fields.err then return nil, read_error(wrkey, fields, 'hash') end
  local tasks, any = {}, false
  for _, f in ipairs(fields) do
    if string.sub(f, -3) == ':-3' then
      tasks[string.sub(f, 1, #f - 3)] = true
      any = true
    end
  end
  if not any then return {}, nil end
  local head = n == '' and '' or (n .. '|')
  local subs = {}
  for _, m in ipairs(redis.call('ZRANGE', nskey, 0, -1)) do
    if #m > #head and string.sub(m, 1, #head) == head then
      local rest = string.sub(m, #head + 1)
      local at = string.find(rest, '%3A', 1, true)
      if at and not string.find(rest, '|', 1, true) and tasks[string.sub(rest, at + 3)] then
        subs[#subs + 1] = m
      end
    end
  end
  return subs, nil
end

-- On a cluster the registry and run sets live in other hash slots than the thread, so
-- a script may not touch them: it reports what to change and the client does it.
-- REGISTRY is the registry key when the script may touch it (standalone), else nil.
local REGISTRY = nil
local RUNS = {}
local EMPTIED = 0

local function forget_run(run_key, member)
  if REGISTRY then redis.call('SREM', run_key, member)
  else
    RUNS[#RUNS + 1] = run_key
    RUNS[#RUNS + 1] = member
  end
end

-- forget_run for many members at once: `by_run` maps a run key to its members.
local function forget_runs(by_run)
  for run_key, members in pairs(by_run) do
    if REGISTRY then
      for i = 1, #members, 500 do
        redis.call('SREM', run_key, unpack(members, i, math.min(i + 499, #members)))
      end
    else
      for _, member in ipairs(members) do
        RUNS[#RUNS + 1] = run_key
        RUNS[#RUNS + 1] = member
      end
    end
  end
end

-- Takes the checkpoint that run marker `m` of timeline `n` names out of its run set, on a
-- standalone server (the set may be anything by now: left as it is then). Returns the run
-- set's key, or nil when there is none to touch (no run, or a cluster).
local function drop_run_member(t, n, m, p)
  local run, cid = marker_parts(m)
  if not (REGISTRY and run and run ~= '') then return nil end
  redis.pcall('SREM', p.run .. run, t .. ':' .. n .. ':' .. cid)
  return p.run .. run
end

-- The key prefix of every checkpoint under the keyspace, from thread `t`'s (`cp_prefix` is
-- `{prefix}:cp:{T}:`): a run-set member `T:N:id` names the checkpoint at it .. '{T}:N:id'.
local function cp_root(cp_prefix, t)
  return string.sub(cp_prefix, 1, #cp_prefix - #t - 3)
end

-- A run set kept for ever that names no checkpoint kept for ever any more (its last such
-- member left, or got a TTL) lives as long as the longest-lived checkpoint it names, and at
-- least `ttl` ms; with no such checkpoint left and no `ttl`, it goes. Every member is looked
-- at: called where members leave or take a TTL (delete_thread, prune, a takeover), never per
-- write. A standalone server only (elsewhere it does nothing): on a cluster the checkpoints
-- live in other slots. `left`: the run set's PTTL, when already read.
local function settle_run(key, root, ttl, left)
  if not REGISTRY or (left or redis.call('PTTL', key)) ~= -1 then return end
  -- In pages, stopping at the first member kept for ever: a run set shared by many threads
  -- kept for ever is not read whole each time one of them leaves it.
  local cursor, longest = '0', ttl
  repeat
    local page = redis.pcall('SSCAN', key, cursor, 'COUNT', 100)
    if page.err then return end  -- a foreign value: leave it as it is
    cursor = page[1]
    for _, m in ipairs(page[2]) do
      local colon = string.find(m, ':', 1, true)
      if colon then
        local left = redis.call('PTTL', root .. '{' .. string.sub(m, 1, colon - 1) .. '}'
          .. string.sub(m, colon))
        if left == -1 then return end
        if left > longest then longest = left end
      end
    end
  until cursor == '0'
  if longest > 0 then redis.call('PEXPIRE', key, longest) else redis.call('DEL', key) end
end

-- settle_run for each run key of `run_keys` (a set: key -> true) on a standalone server.
local function settle_runs(run_keys, root)
  for key in pairs(run_keys) do settle_run(key, root, 0) end
end

-- What a thread-wide script returns: {thread emptied (0/1), run key, member, ...}.
local function outcome()
  return {EMPTIED, RUNS}
end

-- Removes one checkpoint, its writes and its run-set membership.
local function remove_checkpoint(t, n, cid, p)
  local cpkey = p.cp .. n .. ':' .. cid
  local payload = get_string(cpkey)
  local members = {'c' .. cid, 'w' .. cid}
  if payload then
    local run = run_of(payload)
    if run ~= '' then forget_run(p.run .. run, t .. ':' .. n .. ':' .. cid) end
    members[3] = run_marker(run, cid)
  end
  redis.call('DEL', cpkey, p.wr .. n .. ':' .. cid)
  redis.call('ZREM', p.idx .. n, cid)
  redis.call('ZREM', p.keys .. n, unpack(members))
end

-- Every timeline of a thread must be what the layout says before a script deletes any.
local function check_timelines(nskey, p)
  for _, n in ipairs(redis.call('ZRANGE', nskey, 0, -1)) do
    local err = check(p.idx .. n, 'zset') or check(p.keys .. n, 'zset')
    if err then return err end
  end
  return nil
end

-- The run sets a script may leave (the keys of `by_run`) must be sets: checked before the
-- script changes anything. On a cluster the client changes them, not the script.
local function check_run_sets(by_run)
  if not REGISTRY then return nil end
  for run_key in pairs(by_run) do
    local err = check(run_key, 'set')
    if err then return err end
  end
  return nil
end

-- Adds to `runs` the run set that removing a checkpoint (its payload, or nil) leaves.
local function run_left(payload, p, runs)
  local run = payload and run_of(payload) or ''
  if run ~= '' then runs[p.run .. run] = true end
end

-- Adds to `runs` the run sets that removing checkpoints `cids` of timeline `n` leaves (the
-- runs their payloads name, as remove_checkpoint reads them); an error for a payload of the
-- wrong type.
local function runs_left(n, cids, p, runs)
  for _, cid in ipairs(cids) do
    local payload, err = get_string(p.cp .. n .. ':' .. cid)
    if err then return err end
    run_left(payload, p, runs)
  end
  return nil
end

local function del_all(keys)
  for i = 1, #keys, 500 do
    redis.call('DEL', unpack(keys, i, math.min(i + 499, #keys)))
  end
end

-- Every key of one timeline; adds the run sets to leave (run key -> members) to `by_run`.
-- Run markers name the run sets; only checkpoints without one (stored before markers
-- existed) have their payloads read, one MGET per 500.
local function doomed_keys(t, n, p, by_run)
  local doomed, cps, seen, has_writes, marked = {}, {}, {}, {}, {}
  local d, c = 0, 0  -- counts of doomed and cps: cheaper than # on growing tables
  local cp, wr, blob = p.cp .. n .. ':', p.wr .. n .. ':', p.blob .. n .. ':'
  local function owned(run, cid)
    if run == '' then return end
    local run_key = p.run .. run
    local members = by_run[run_key]
    if not members then
      members = {}
      by_run[run_key] = members
    end
    members[#members + 1] = t .. ':' .. n .. ':' .. cid
  end
  for _, m in ipairs(redis.call('ZRANGE', p.keys .. n, 0, -1)) do
    local kind = string.byte(m, 1)
    if kind == 98 then  -- 'b'
      d = d + 1
      doomed[d] = blob .. string.sub(m, 2)
    elseif kind == 99 then  -- 'c'
      local cid = string.sub(m, 2)
      seen[cid] = true
      c = c + 1
      cps[c] = cid
    elseif kind == 119 then  -- 'w'
      local cid = string.sub(m, 2)
      has_writes[cid] = true
      d = d + 1
      doomed[d] = wr .. cid
    elseif kind == 114 then  -- 'r'
      if string.byte(m, 2) == 58 then  -- 'r:' + id: written without a run
        marked[string.sub(m, 3)] = true
      else
        local run, cid = marker_parts(m)
        if cid and not marked[cid] then
          marked[cid] = true
          owned(run, cid)
        end
      end
    end
  end
  for _, cid in ipairs(redis.call('ZRANGE', p.idx .. n, 0, -1)) do
    if not seen[cid] then
      c = c + 1
      cps[c] = cid
    end
  end
  local unmarked = {}
  for i = 1, c do
    local cid = cps[i]
    d = d + 1
    doomed[d] = cp .. cid
    if not has_writes[cid] then
      d = d + 1
      doomed[d] = wr .. cid
    end
    if not marked[cid] then unmarked[#unmarked + 1] = cid end
  end
  for i = 1, #unmarked, 500 do
    local keys = {}
    for j = i, math.min(i + 499, #unmarked) do keys[#keys + 1] = cp .. unmarked[j] end
    local payloads = redis.pcall('MGET', unpack(keys))
    if type(payloads) == 'table' and not payloads.err then
      for j, payload in ipairs(payloads) do
        if payload then owned(run_of(payload), unmarked[i + j - 1]) end
      end
    end
  end
  doomed[d + 1] = p.idx .. n
  doomed[d + 2] = p.keys .. n
  return doomed
end

-- Deletes blobs no remaining checkpoint references; drops an emptied timeline. Run sets
-- whose members it drops are added to `runs` (key -> true), when given.
-- Returns true when the timeline is gone. While a remaining payload is damaged (or not a
-- string), what it references is unknown, so every blob stays.
local function collect_garbage(t, n, p, runs)
  local ids = redis.call('ZRANGE', p.idx .. n, 0, -1)
  local live, alive, unknown = {}, {}, false
  for _, cid in ipairs(ids) do
    alive[cid] = true
    local payload, err = get_string(p.cp .. n .. ':' .. cid)
    if err then unknown = true
    elseif payload then
      local _, refs, intact = header(payload)
      if not intact then unknown = true end
      for _, r in ipairs(refs) do live[r] = true end
    end
  end
  for _, m in ipairs(redis.call('ZRANGE', p.keys .. n, 0, -1)) do
    local kind = string.sub(m, 1, 1)
    if kind == 'b' and not unknown and not live[string.sub(m, 2)] then
      redis.call('DEL', p.blob .. n .. ':' .. string.sub(m, 2))
      redis.call('ZREM', p.keys .. n, m)
    elseif kind == 'r' then
      local _, cid = marker_parts(m)
      if not (cid and alive[cid]) then
        redis.call('ZREM', p.keys .. n, m)
        -- The checkpoint went without its payload telling its run (it expired before the
        -- sweep came): its member leaves the run set here, or nothing would find it again.
        local run_key = drop_run_member(t, n, m, p)
        if run_key and runs then runs[run_key] = true end
      end
    end
  end
  -- Pending writes of a checkpoint not put yet keep the timeline alive.
  if #ids == 0 and redis.call('ZCARD', p.keys .. n) == 0 then
    redis.call('DEL', p.idx .. n, p.keys .. n)
    return true
  end
  return false
end

-- Sets `key` to expire at `score` (an expiry time in ms, as the index scores keys), or to
-- stay while `score` is 'inf'. `now` is the server's clock (now_ms), as in the scores.
local function expire_at(key, score, now)
  if score == 'inf' then redis.call('PERSIST', key)
  else redis.call('PEXPIRE', key, math.max(1, tonumber(score) - tonumber(now))) end
end

-- Makes a timeline's index keys, its namespace entry and the namespace set live as long as
-- the longest-lived key they name (for ever while one has no TTL), and the thread's registry
-- entry as long as its longest-lived namespace: whatever TTL each writer used, no index
-- expires before a key it names, so nothing is left that delete_thread cannot reach.
local function settle_namespaces(t, nskey, now)
  local latest_ns = redis.call('ZREVRANGE', nskey, 0, 0, 'WITHSCORES')
  if #latest_ns == 0 then return end
  expire_at(nskey, latest_ns[2], now)
  if REGISTRY then redis.call('ZADD', REGISTRY, latest_ns[2], t) end
end

local function settle(t, n, idx, keys, nskey, now)
  local top = redis.call('ZREVRANGE', keys, 0, 0, 'WITHSCORES')
  if #top == 0 then return end
  expire_at(idx, top[2], now)
  expire_at(keys, top[2], now)
  redis.call('ZADD', nskey, top[2], n)
  settle_namespaces(t, nskey, now)
end

-- How many entries of key index `keys` name a key with a TTL (a finite expiry score). Reading
-- the key index is its type check.
local function expiring(keys)
  local count = redis.pcall('ZCOUNT', keys, '-inf', '(+inf')
  if type(count) == 'table' then return nil, read_error(keys, count, 'zset') end
  return count, nil
end

-- Whether timeline `n` of thread `t` is settled for ever already, so that a writer without a
-- TTL has nothing to settle: its namespace-set entry is 'inf' (every settle leaves a set that
-- names a timeline for ever without a TTL) and, on a standalone server, so is the thread's
-- registry entry (read too: a registry rebuilt or restored by hand, or data moved from a
-- cluster, which keeps none, gets the entry back from the next put). Reading a key is its type
-- check, the registry's as check_registry words it.
local function settled_forever(nskey, n, t)
  local score = redis.pcall('ZSCORE', nskey, n)
  if type(score) == 'table' then return false, read_error(nskey, score, 'zset') end
  if score ~= 'inf' or not REGISTRY then return score == 'inf', nil end
  score = redis.pcall('ZSCORE', REGISTRY, t)
  if type(score) == 'table' then
    return false, check_registry(REGISTRY) or redis.error_reply(score.err)
  end
  return score == 'inf', nil
end

-- Drops up to 64 registry entries of expired threads (the registry itself never expires).
local function sweep_registry(now)
  if not REGISTRY then return end
  local dead = redis.call('ZRANGEBYSCORE', REGISTRY, '-inf', '(' .. now, 'LIMIT', 0, 64)
  if #dead > 0 then redis.call('ZREM', REGISTRY, unpack(dead)) end
end

-- `settle` for a writer without a TTL on a timeline whose keys all lack one (the common
-- case): its index keys lack one too, only the namespace set may have one (another
-- namespace's). Writers skip it once `settled_forever` says so. It sweeps the registry as a
-- writer with a TTL does, so that entries of threads that expired before every writer
-- dropped its TTL go too (once per new timeline, not per write).
local function settle_forever(t, n, nskey)
  redis.call('ZADD', nskey, 'inf', n)
  redis.call('PERSIST', nskey)
  if REGISTRY then
    redis.call('ZADD', REGISTRY, 'inf', t)
    sweep_registry(now_ms())
  end
end

-- A run set kept for ever, named by a timeline of thread `t` that a writer with a TTL takes
-- over: it gets the TTL, or the longest life of a checkpoint it names if longer, once no
-- checkpoint it names (of any thread) is kept for ever; until then it stays as expire_run
-- keeps it. Its members are read once per takeover, never per write.
local function adopt_run(key, ttl, t, cp_prefix)
  local left = redis.call('PTTL', key)
  if left ~= -1 then return expire_run(key, ttl, left) end
  settle_run(key, cp_root(cp_prefix, t), ttl, left)
end

-- The TTL (ms) and expiry score a write with `ttl` and `score` gives the keys of timeline
-- `keys`: longer when a key of it lives longer (a writer with a longer TTL wrote it), so that
-- the newest checkpoint never expires before an older one, which would then read back as the
-- thread's state. A lowered TTL so takes effect once what the longer one kept has expired.
local function outlive(keys, ttl, score)
  local longest = redis.call('ZREVRANGEBYSCORE', keys, '(inf', '-inf', 'WITHSCORES', 'LIMIT', 0, 1)
  if longest[2] and tonumber(longest[2]) > tonumber(score) then
    return ttl + tonumber(longest[2]) - tonumber(score), string.format('%.0f', tonumber(longest[2]))
  end
  return ttl, score
end

-- A writer (or refreshing reader) with a TTL takes over a timeline stored without one: every
-- key kept for ever gets a TTL at once (partly would expire values that checkpoints still
-- kept for ever read), so the whole thread then expires `ttl` after its last write. That TTL
-- is the longest any key of the timeline has, when longer than `ttl` (a checkpoint another
-- writer keeps longer may read a value kept for ever: it must not expire first). `score` is
-- the expiry time `ttl` gives. The index lists checkpoints ('c') before run markers ('r'): a
-- run set is looked at once its thread's checkpoints have their TTL, and once per takeover
-- (a run writes many checkpoints, each with its marker).
local function adopt_ttl(t, n, keys, ttl, score, p)
  local kept = redis.call('ZRANGEBYSCORE', keys, '+inf', '+inf')
  local runs = {}
  if #kept == 0 then return false end
  ttl, score = outlive(keys, ttl, score)
  for i = 1, #kept, 500 do
    local rescore = {'XX'}
    for j = i, math.min(i + 499, #kept) do
      local m = kept[j]
      local kind, rest = string.byte(m, 1), string.sub(m, 2)
      local prefix = (kind == 99 and p.cp) or (kind == 119 and p.wr) or (kind == 98 and p.blob)
      if prefix then redis.call('PEXPIREAT', prefix .. n .. ':' .. rest, score)
      elseif kind == 114 and REGISTRY then  -- 'r': its run set, as a put with a TTL does
        local run = marker_parts(m)
        if run and run ~= '' and not runs[run] then
          runs[run] = true
          adopt_run(p.run .. run, ttl, t, p.cp)
        end
      end
      rescore[#rescore + 1] = score
      rescore[#rescore + 1] = m
    end
    redis.call('ZADD', keys, unpack(rescore))
  end
  return true
end

-- A takeover takes the whole thread: the other timelines of thread `t` kept for ever (its
-- subgraphs' namespaces, which no later write may touch) get the TTL as timeline `n` did.
-- Its namespace set `nskey` names them with the score 'inf'; `idx_prefix` and `keys_prefix`
-- are the thread's index key names without the namespace.
local function adopt_thread(t, n, nskey, idx_prefix, keys_prefix, ttl, score, p, now)
  for _, sub in ipairs(redis.call('ZRANGEBYSCORE', nskey, '+inf', '+inf')) do
    if sub ~= n then
      adopt_ttl(t, sub, keys_prefix .. sub, ttl, score, p)
      settle(t, sub, idx_prefix .. sub, keys_prefix .. sub, nskey, now)
    end
  end
end

-- Before its first write, a script that may take timeline `n` over (a key of its index
-- `keys` is kept for ever) checks the index keys of the thread's other timelines kept for
-- ever, which adopt_thread would write.
local function check_takeover(n, keys, nskey, idx_prefix, keys_prefix)
  if redis.call('ZCOUNT', keys, '+inf', '+inf') == 0 then return nil end
  for _, sub in ipairs(redis.call('ZRANGEBYSCORE', nskey, '+inf', '+inf')) do
    if sub ~= n then
      local err = check(idx_prefix .. sub, 'zset') or check(keys_prefix .. sub, 'zset')
      if err then return err end
    end
  end
  return nil
end

-- A writer without a TTL keeps for ever every blob its checkpoint reads, as it keeps what
-- it writes: another writer may have given them a TTL.
local function persist_refs(n, payload, blob_prefix, keys)
  local _, refs = header(payload)
  for _, r in ipairs(refs) do
    redis.call('PERSIST', blob_prefix .. n .. ':' .. r)
    redis.call('ZADD', keys, 'XX', 'inf', 'b' .. r)
  end
end

-- A writer without a TTL keeps for ever a checkpoint its writes depend on, with all that
-- checkpoint reads (payload, writes, blobs and, with `run_prefix`, its run set), as a put
-- without a TTL keeps its own. Returns the checkpoint's escaped run ('' for none): on a
-- cluster the client keeps the run set.
local function persist_checkpoint(n, cid, payload, p, keys, run_prefix)
  local run = run_of(payload)
  redis.call('PERSIST', p.cp .. n .. ':' .. cid)
  redis.call('PERSIST', p.wr .. n .. ':' .. cid)
  redis.call('ZADD', keys, 'XX', 'inf', 'c' .. cid, 'inf', 'w' .. cid, 'inf',
    run_marker(run, cid))
  if run_prefix and run ~= '' then redis.call('PERSIST', run_prefix .. run) end
  persist_refs(n, payload, p.blob, keys)
  return run
end

-- Drops up to `budget` index entries of expired keys, with what is left of them: a
-- checkpoint's timeline entry and, on a standalone server, its run-set membership.
local function sweep(t, n, idx, keys, now, budget, p)
  local dead = redis.call('ZRANGEBYSCORE', keys, '-inf', '(' .. now, 'LIMIT', 0, budget)
  if #dead == 0 then return end
  for _, m in ipairs(dead) do
    local kind, rest = string.byte(m, 1), string.sub(m, 2)
    if kind == 99 then  -- 'c'
      redis.call('ZREM', idx, rest)
      redis.call('DEL', p.cp .. n .. ':' .. rest)
    elseif kind == 119 then  -- 'w'
      redis.call('DEL', p.wr .. n .. ':' .. rest)
    elseif kind == 98 then  -- 'b'
      redis.call('DEL', p.blob .. n .. ':' .. rest)
    elseif kind == 114 then  -- 'r'
      drop_run_member(t, n, m, p)
    end
  end
  for i = 1, #dead, 500 do
    redis.call('ZREM', keys, unpack(dead, i, math.min(i + 499, #dead)))
  end
end

local function drop_empty_thread(nskey, t)
  if redis.call('ZCARD', nskey) == 0 then
    redis.call('DEL', nskey)
    EMPTIED = 1
    if REGISTRY then redis.call('ZREM', REGISTRY, t) end
  end
end
"""

# Prefix table shared by the thread-wide scripts: ARGV[2..7] in this order.
_PREFIXES = r"""
local p = {cp = ARGV[2], wr = ARGV[3], blob = ARGV[4], idx = ARGV[5], keys = ARGV[6],
           run = ARGV[7]}
"""

PUT = r"""
-- KEYS: cp, idx, keys, ns, blob keys..., [run], [registry, index marker], [metadata index
--       zsets...]
-- ARGV: cid, payload, ttl_ms, N, T, run member, has_run, n_blobs,
--       wr_prefix, cp_prefix, blob_prefix, has_registry, escaped run, run prefix, then per
--       blob: suffix, value ('' = refresh only, NUL = absent: no key), then the number of
--       metadata index zsets, [what goes around a thread's escaped id in its namespace key
--       (head, tail), when there are any], and the metadata fields the saver indexes. A
--       cluster client passes neither run nor registry, marker or index zsets (it adds the
--       thread to those first), and gets back the run-set removal it must make.
-- Returns outcome(), or {'lost', {suffix, ...}} having written nothing: blobs the checkpoint
-- reads that expired, for the caller to send as values.
local cid, payload, ttl = ARGV[1], ARGV[2], tonumber(ARGV[3])
local n, t, has_run, nb = ARGV[4], ARGV[5], ARGV[7] == '1', tonumber(ARGV[8])
local run_key = nil
if has_run then run_key = KEYS[5 + nb] end
-- The metadata index zsets the thread joins, last: a saver without index_metadata sends none.
-- The registry and the index marker come before them, on a standalone server.
local nindex = tonumber(ARGV[15 + 2 * nb])
local marker = nil  -- the metadata index marker: the fields whose index is complete
if ARGV[12] == '1' then REGISTRY, marker = KEYS[#KEYS - nindex - 1], KEYS[#KEYS - nindex] end
local p = {cp = ARGV[10], wr = ARGV[9], blob = ARGV[11], run = ARGV[14]}
-- The checkpoint and blob keys a put writes are new as a rule (a fresh checkpoint id, blob
-- versions with a random tail): one EXISTS says so, and only when one is there already are
-- their types checked one by one and the old payload read. Blobs it only refreshes (a
-- TTL's '' entries) are there by design: always checked.
local written = {KEYS[1]}
for i = 1, nb do
  if ARGV[14 + 2 * i] ~= '' then written[#written + 1] = KEYS[4 + i] end
end
local existing = false
for i = 1, #written, 500 do
  existing = existing
    or redis.call('EXISTS', unpack(written, i, math.min(i + 499, #written))) > 0
end
local err = (existing and check(KEYS[1], 'string')) or check(KEYS[2], 'zset')
if err then return err end
local timed
timed, err = expiring(KEYS[3])
if err then return err end
-- Without a TTL, on a timeline where some key has one (another writer's): see persist_refs.
local mixed = ttl == 0 and timed > 0
local forever, settled = ttl == 0 and not mixed, false
if forever then settled, err = settled_forever(KEYS[4], n, t) else err = check(KEYS[4], 'zset') end
if err then return err end
local idx_prefix = string.sub(KEYS[2], 1, #KEYS[2] - #n)
local keys_prefix = string.sub(KEYS[3], 1, #KEYS[3] - #n)
if ttl > 0 then
  err = check_takeover(n, KEYS[3], KEYS[4], idx_prefix, keys_prefix)
  if err then return err end
end
-- The server's clock, for expiry scores: a writer keeping all for ever needs none.
local now = (not forever) and now_ms() or nil
local score = expiry(now, ttl)
if ttl > 0 then ttl, score = outlive(KEYS[3], ttl, score) end
if not forever then  -- the writes of this checkpoint get its TTL
  err = check(ARGV[9] .. n .. ':' .. cid, 'hash')
  if err then return err end
end
if REGISTRY and not settled then
  err = check_registry(REGISTRY)
  if err then return err end
end
for i = #KEYS - nindex + 1, #KEYS do
  err = check(KEYS[i], 'zset')
  if err then return err end
end
-- A field whose index reindex() marked complete since this saver read the marker, and that
-- it does not index: its put would be missing from that index. Refused, having written
-- nothing (the client checks the marker it read first).
if marker then
  err = unindexed(marker, 16 + 2 * nb + (nindex > 0 and 2 or 0), #ARGV, 'put')
  if err then return err end
end
-- A blob it only refreshes that has expired (a step that outlived the TTL, say) cannot be
-- refreshed back: the put writes nothing and names those blobs, for the caller to send them.
local lost = {}
for i = 1, nb do
  local key, value = KEYS[4 + i], ARGV[14 + 2 * i]
  if existing or value == '' then
    local found = redis.call('TYPE', key)['ok']
    if found == 'none' then
      if value == '' and blob_lost(KEYS[3], 'b' .. ARGV[13 + 2 * i], now, ttl) then
        lost[#lost + 1] = ARGV[13 + 2 * i]
      end
    elseif found ~= 'string' then return wrongtype(key, found, 'string') end
  end
end
if mixed then  -- it keeps for ever all its checkpoint reads: see persist_refs
  local given = {}
  for i = 1, nb do given[ARGV[13 + 2 * i]] = true end
  local _, refs = header(payload)
  for _, r in ipairs(refs) do
    if not given[r] and redis.call('EXISTS', ARGV[11] .. n .. ':' .. r) == 0
        and blob_lost(KEYS[3], 'b' .. r, now, ttl) then
      lost[#lost + 1] = r
    end
  end
end
if #lost > 0 then return {'lost', lost} end
-- Overwriting a checkpoint another run wrote: that run no longer owns it.
local before = existing and redis.call('GET', KEYS[1])
local old_run = before and run_of(before)
local leaves = before and old_run ~= ARGV[13]
if leaves and old_run ~= '' and REGISTRY then
  err = check(ARGV[14] .. old_run, 'set')
  if err then return err end
end
-- The first write joins the run set, and so checks its type: refused, it wrote nothing.
if run_key then
  local added = redis.pcall('SADD', run_key, ARGV[6])
  if type(added) == 'table' then return read_error(run_key, added, 'set') end
end
-- Without a TTL the values go in one MSET, and every new key-index member in one ZADD.
local sets, absent, members = {}, {}, {}
for i = 1, nb do
  local key, suffix, value = KEYS[4 + i], ARGV[13 + 2 * i], ARGV[14 + 2 * i]
  if value == '' then
    extend(key, KEYS[3], 'b' .. suffix, ttl, score)
  else
    local kept = score
    if value == '\0' then
      -- Absent at this version: an index member without a key (a missing blob reads back
      -- as absent), which copy_thread carries over as "absent here".
      absent[#absent + 1] = key
    elseif ttl > 0 then kept = set_kept(key, value, ttl, score, now, existing)
    else
      sets[#sets + 1] = key
      sets[#sets + 1] = value
    end
    members[#members + 1] = kept
    members[#members + 1] = 'b' .. suffix
  end
end
if leaves then
  if old_run ~= '' then
    forget_run(ARGV[14] .. old_run, ARGV[6])
    -- It may have been kept for ever for this checkpoint alone.
    settle_run(ARGV[14] .. old_run, cp_root(ARGV[10], t), 0)
  end
  redis.call('ZREM', KEYS[3], run_marker(old_run, cid))
end
local cp_score, cp_life = score, ttl
if ttl > 0 then cp_score, cp_life = set_kept(KEYS[1], payload, ttl, score, now, existing)
else
  sets[#sets + 1] = KEYS[1]
  sets[#sets + 1] = payload
end
if existing then del_all(absent) end  -- else none of them is there
for i = 1, #sets, 1000 do
  redis.call('MSET', unpack(sets, i, math.min(i + 999, #sets)))
end
redis.call('ZADD', KEYS[2], 0, cid)
if nindex > 0 then  -- with the checkpoint, at the server's clock: newest threads first
  local at = now or now_ms()
  -- A deleted or expired thread's member stays in each index it joined. The put looks at two
  -- members of each index it adds to, at a rank the clock (in ms) picks, and drops those whose
  -- thread has no namespace key: twice what it adds, so that no index keeps growing with them.
  local clock = tonumber(at)
  local head, tail = ARGV[16 + 2 * nb], ARGV[17 + 2 * nb]
  for i = #KEYS - nindex + 1, #KEYS do
    redis.call('ZADD', KEYS[i], at, t)
    local size = redis.call('ZCARD', KEYS[i])
    if size > 1 then
      local from = clock % size
      for _, m in ipairs(redis.call('ZRANGE', KEYS[i], from, from + 1)) do
        if m ~= t and redis.call('EXISTS', head .. m .. tail) == 0 then
          redis.call('ZREM', KEYS[i], m)
        end
      end
    end
  end
end
members[#members + 1] = cp_score
members[#members + 1] = 'c' .. cid
members[#members + 1] = cp_score
members[#members + 1] = run_marker(ARGV[13], cid)
for i = 1, #members, 1000 do
  redis.call('ZADD', KEYS[3], unpack(members, i, math.min(i + 999, #members)))
end
if run_key then
  -- as long as the checkpoint, which a repeated put may have left a longer life
  if ttl > 0 then expire_run(run_key, cp_life) else redis.call('PERSIST', run_key) end
end
if forever then
  if not settled then settle_forever(t, n, KEYS[4]) end
  return outcome()
end
-- The pending writes already stored for this checkpoint live as long as it does.
local wrkey = ARGV[9] .. n .. ':' .. cid
if ttl > 0 then extend(wrkey, KEYS[3], 'w' .. cid, ttl, score)
else
  redis.call('PERSIST', wrkey)
  redis.call('ZADD', KEYS[3], 'XX', score, 'w' .. cid)
end
if mixed then persist_refs(n, payload, ARGV[11], KEYS[3]) end
if ttl > 0 and adopt_ttl(t, n, KEYS[3], ttl, score, p) then
  adopt_thread(t, n, KEYS[4], idx_prefix, keys_prefix, ttl, score, p, now)
end
-- Drop index entries of keys that have expired: at least twice as many per put as a put
-- adds, so that neither the timeline nor the key index keeps growing.
sweep(t, n, KEYS[2], KEYS[3], now, math.max(64, 2 * (nb + 3)), p)
settle(t, n, KEYS[2], KEYS[3], KEYS[4], now)
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', '(' .. now)
sweep_registry(now)
return outcome()
"""

PUT_WRITES = r"""
-- KEYS: wr, keys, ns, cp, idx, [registry]
-- ARGV: cid, N, T, ttl_ms, cp_prefix, wr_prefix, blob_prefix, run_prefix, the number of
--       other namespaces kept alive, those namespaces (escaped), then per write: field,
--       value, overwrite flag
-- Returns 1, or a list of {escaped run, run-set member} (see the end)
local cid, n, t, ttl = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
local first_write = 10 + tonumber(ARGV[9])
REGISTRY = KEYS[6]
local timed, err = expiring(KEYS[2])
if err then return err end
-- Without a TTL, on a timeline where some key has one (another writer's): see settle.
local mixed = ttl == 0 and timed > 0
local forever, settled = ttl == 0 and not mixed, false
local idx_prefix = string.sub(KEYS[5], 1, #KEYS[5] - #n)
local keys_prefix = string.sub(KEYS[2], 1, #KEYS[2] - #n)
if forever then settled, err = settled_forever(KEYS[3], n, t)
else err = check(KEYS[3], 'zset') or check(KEYS[5], 'zset') end
if not err and ttl > 0 then err = check_takeover(n, KEYS[2], KEYS[3], idx_prefix, keys_prefix) end
if err then return err end
if REGISTRY and not settled then
  err = check_registry(REGISTRY)
  if err then return err end
end
local now = (not forever) and now_ms() or nil  -- a writer keeping all for ever needs none
local score = expiry(now, ttl)
local own_ttl, own_score = ttl, score  -- the other timelines it keeps alive: see outlive
if ttl > 0 then ttl, score = outlive(KEYS[2], ttl, score) end
-- With a TTL, a write keeps the thread alive as a put does: the checkpoint written to and
-- the newest of its timeline keep everything they read. Without one, on a timeline another
-- writer gave a TTL, it keeps the same for ever. Both are read before any write.
local alive = {}
if ttl > 0 or mixed then
  local payload, newest, newest_payload
  payload, err = get_string(KEYS[4])
  if err then return err end
  if payload then alive[1] = {cid, payload} end
  newest, newest_payload, err = latest(KEYS[5], ARGV[5], n)
  if err then return err end
  if newest and newest ~= cid then alive[#alive + 1] = {newest, newest_payload} end
end
-- Other namespaces whose step is still running (the client names them) live as long as
-- this one: the parents running this subgraph, and subgraphs of this timeline paused on an
-- interrupt in its running step. Their newest checkpoints keep all they read.
local paused = {}
for i = 10, ttl > 0 and first_write - 1 or 9 do
  local sub, newest, payload = ARGV[i], nil, nil
  err = check(keys_prefix .. sub, 'zset')
  if err then return err end
  newest, payload, err = latest(idx_prefix .. sub, ARGV[5], sub)
  if err then return err end
  if newest then paused[#paused + 1] = {sub, newest, payload} end
end
local left = ttl > 0 and redis.call('PTTL', KEYS[1]) or -2  -- before the writes add to it
local joins = {}
-- The first write, to the writes hash, checks its type: refused, it wrote nothing.
for i = first_write, #ARGV, 3 do
  local done
  if ARGV[i + 2] == '1' then done = redis.pcall('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
  else done = redis.pcall('HSETNX', KEYS[1], ARGV[i], ARGV[i + 1]) end
  if type(done) == 'table' then return read_error(KEYS[1], done, 'hash') end
end
if ttl > 0 and (left == -1 or left >= ttl) then
  -- kept longer by another writer (or for ever, until adopt_ttl below): its life stays
  redis.call('ZADD', KEYS[2], 'NX', score, 'w' .. cid)
else
  redis.call('ZADD', KEYS[2], score, 'w' .. cid)
  if ttl > 0 then redis.call('PEXPIREAT', KEYS[1], score) end  -- see extend
end
if ttl > 0 then
  for _, c in ipairs(alive) do
    refresh_checkpoint(n, c[1], c[2], ARGV[5], ARGV[6], ARGV[7], KEYS[2], ttl, score,
      REGISTRY and ARGV[8])
    if not REGISTRY then
      local run = run_of(c[2])
      if run ~= '' then joins[#joins + 1] = {run, t .. ':' .. n .. ':' .. c[1]} end
    end
  end
  local p = {cp = ARGV[5], wr = ARGV[6], blob = ARGV[7], run = ARGV[8]}
  if adopt_ttl(t, n, KEYS[2], ttl, score, p) then
    adopt_thread(t, n, KEYS[3], idx_prefix, keys_prefix, ttl, score, p, now)
  end
  for _, s in ipairs(paused) do
    local sub_ttl, sub_score = outlive(keys_prefix .. s[1], own_ttl, own_score)
    refresh_checkpoint(s[1], s[2], s[3], ARGV[5], ARGV[6], ARGV[7], keys_prefix .. s[1],
      sub_ttl, sub_score, REGISTRY and ARGV[8])
    settle(t, s[1], idx_prefix .. s[1], keys_prefix .. s[1], KEYS[3], now)
    local run = not REGISTRY and run_of(s[3]) or ''
    if run ~= '' then joins[#joins + 1] = {run, t .. ':' .. s[1] .. ':' .. s[2]} end
  end
elseif forever then
  if not settled then settle_forever(t, n, KEYS[3]) end
  return 1
else
  redis.call('PERSIST', KEYS[1])
  local p = {cp = ARGV[5], wr = ARGV[6], blob = ARGV[7]}
  for _, c in ipairs(alive) do
    local run = persist_checkpoint(n, c[1], c[2], p, KEYS[2], REGISTRY and ARGV[8])
    if not REGISTRY and run ~= '' then joins[#joins + 1] = {run, t .. ':' .. n .. ':' .. c[1]} end
  end
end
settle(t, n, KEYS[5], KEYS[2], KEYS[3], now)
-- On a cluster: {escaped run, run-set member} of each checkpoint refreshed (with a TTL) or
-- kept for ever (without) whose run set, in another hash slot, the client must keep as long.
return joins
"""

GET = r"""
-- KEYS: idx, keys, ns, [registry]
-- ARGV: cid ('' = newest), N, cp_prefix, wr_prefix, blob_prefix, refresh ttl_ms, T,
--       run_prefix
local cid, n = ARGV[1], ARGV[2]
REGISTRY = KEYS[4]
local ttl = tonumber(ARGV[6])
-- A read without a refresh writes nothing: what it reads is checked as it reads it, and the
-- registry only when it finds nothing.
local err
local idx_prefix = string.sub(KEYS[1], 1, #KEYS[1] - #n)
local keys_prefix = string.sub(KEYS[2], 1, #KEYS[2] - #n)
if ttl > 0 then
  err = check(KEYS[1], 'zset') or check(KEYS[2], 'zset') or check(KEYS[3], 'zset')
    or (REGISTRY and check_registry(REGISTRY))
    or check_takeover(n, KEYS[2], KEYS[3], idx_prefix, keys_prefix)
  if err then return err end
end
local payload
cid, payload, err = checkpoint_at(KEYS[1], ARGV[3], n, cid)
if err then return err end
if not payload then  -- perhaps a keyspace 0.1.0 wrote, which its registry tells
  if ttl == 0 and REGISTRY then err = check_registry(REGISTRY) end
  return err or false
end
local entry
entry, err = read_entry(n, cid, payload, ARGV[4], ARGV[5])
if err then return err end
-- A read by id refreshes the timeline's newest checkpoint too: refreshed alone, an older
-- one would outlive it and read as the newest once it expired (the thread rolled back).
local newest, newest_payload
if ttl > 0 and ARGV[1] ~= '' then
  newest, newest_payload, err = latest(KEYS[1], ARGV[3], n)
  if err then return err end
  if newest == cid then newest = nil end
end
-- Subgraphs paused on an interrupt in the step read (or in the newest), and theirs in turn:
-- a resume reads their newest checkpoints, which live as long as what was read. Found (and
-- checked) before anything is refreshed.
local paused = {}
if ttl > 0 then
  local todo, seen = {{n, cid}}, {}
  if newest then todo[2] = {n, newest} end
  local i = 1
  while i <= #todo do
    local subs
    subs, err = paused_subgraphs(todo[i][1], todo[i][2], ARGV[4], KEYS[3])
    if err then return err end
    i = i + 1
    for _, sub in ipairs(subs) do
      if not seen[sub] then
        seen[sub] = true
        err = check(keys_prefix .. sub, 'zset')
        if err then return err end
        local sub_newest, sub_payload
        sub_newest, sub_payload, err = latest(idx_prefix .. sub, ARGV[3], sub)
        if err then return err end
        if sub_newest then
          paused[#paused + 1] = {sub, sub_newest, sub_payload}
          todo[#todo + 1] = {sub, sub_newest}
        end
      end
    end
  end
end
if ttl > 0 then
  local now = now_ms()
  local score = expiry(now, ttl)
  local p = {cp = ARGV[3], wr = ARGV[4], blob = ARGV[5], run = ARGV[8]}
  if adopt_ttl(ARGV[7], n, KEYS[2], ttl, score, p) then
    adopt_thread(ARGV[7], n, KEYS[3], idx_prefix, keys_prefix, ttl, score, p, now)
  end
  refresh_checkpoint(n, cid, payload, ARGV[3], ARGV[4], ARGV[5], KEYS[2], ttl, score,
    REGISTRY and ARGV[8])
  if newest then
    refresh_checkpoint(n, newest, newest_payload, ARGV[3], ARGV[4], ARGV[5], KEYS[2], ttl,
      score, REGISTRY and ARGV[8])
    -- on a cluster its run set is in another slot: the client refreshes it
    local run = header(newest_payload)
    entry[5] = (not REGISTRY and run and run ~= '') and {run, newest} or false
    -- its metadata names its DeltaChannels, whose chain the client refreshes too (sent only
    -- when its bytes carry their marks: a graph without one has none to refresh)
    entry[6] = delta_marked(newest_payload) and {newest, newest_payload} or false
  end
  local joins, deltas = {}, {}
  for _, s in ipairs(paused) do
    refresh_checkpoint(s[1], s[2], s[3], ARGV[3], ARGV[4], ARGV[5], keys_prefix .. s[1], ttl,
      score, REGISTRY and ARGV[8])
    settle(ARGV[7], s[1], idx_prefix .. s[1], keys_prefix .. s[1], KEYS[3], now)
    local run = not REGISTRY and header(s[3]) or ''
    if run and run ~= '' then joins[#joins + 1] = {run, ARGV[7] .. ':' .. s[1] .. ':' .. s[2]} end
    -- its DeltaChannels are rebuilt from older checkpoints: the client refreshes that chain
    if delta_marked(s[3]) then deltas[#deltas + 1] = s end
  end
  settle(ARGV[7], n, KEYS[1], KEYS[2], KEYS[3], now)
  if #joins > 0 or #deltas > 0 then
    -- on a cluster, the run sets of the paused checkpoints (other slots); the paused
    -- checkpoints whose DeltaChannel chains the client refreshes
    entry[5], entry[6] = entry[5] or false, entry[6] or false
    entry[7], entry[8] = #joins > 0 and joins or false, #deltas > 0 and deltas or false
  end
end
return entry
"""

LIST = r"""
-- KEYS: ns, [registry]
-- ARGV: cp_prefix, wr_prefix, blob_prefix, idx_prefix, before, limit, only_cid, resume,
--       light ('1': payloads only), then the namespaces to walk in order (none: every
--       namespace in the ns zset)
-- Returns {namespaces walked, {N, entry}...}, newest first per namespace; a light entry is
-- {id, payload}, for a caller that filters on metadata before it reads writes and blobs
-- (the ENTRIES script). `before` and `resume` are ZREVRANGEBYLEX upper bounds: `before`
-- applies to every namespace, `resume` ('' = none) to the first one only, so a caller can
-- page on.
local before, limit, only, resume = ARGV[5], tonumber(ARGV[6]), ARGV[7], ARGV[8]
local light = ARGV[9] == '1'
local nss = {}
if KEYS[2] then
  local legacy = check_registry(KEYS[2])
  if legacy then return legacy end
end
if #ARGV < 10 then
  local err = check(KEYS[1], 'zset')
  if err then return err end
  nss = redis.call('ZRANGE', KEYS[1], 0, -1)
  -- The root namespace first, where a graph starts (InMemorySaver walks namespaces in the
  -- order they were first written); the others in the set's order, which with a TTL is
  -- soonest to expire first (scores are expiry times), else byte order.
  if #nss > 1 and nss[1] ~= '' and redis.call('ZSCORE', KEYS[1], '') then
    for i = 2, #nss do
      if nss[i] == '' then
        table.remove(nss, i)
        table.insert(nss, 1, '')
        break
      end
    end
  end
else
  for i = 10, #ARGV do nss[#nss + 1] = ARGV[i] end
end
local out, count, sent = {}, 0, {}
for i, n in ipairs(nss) do
  local idx = ARGV[4] .. n
  local err = check(idx, 'zset')
  if err then return err end
  local ids = {}
  if only ~= '' and redis.call('ZSCORE', idx, only) then ids = {only} end
  local upper = before
  if i == 1 and resume ~= '' then upper = resume end
  while true do
    local want = limit - count
    if only == '' then
      ids = redis.call('ZREVRANGEBYLEX', idx, upper, '-', 'LIMIT', 0, want)
    end
    for _, cid in ipairs(ids) do
      local payload
      payload, err = get_string(ARGV[1] .. n .. ':' .. cid)
      if err then return err end
      if payload then
        local entry = {cid, payload}
        if not light then
          entry, err = read_entry(n, cid, payload, ARGV[2], ARGV[3], sent)
          if err then return err end
        end
        out[#out + 1] = {n, entry}
        count = count + 1
      end
    end
    -- An id whose payload expired yields nothing: read on until the page is full.
    if only ~= '' or #ids < want or count >= limit then break end
    upper = '(' .. ids[#ids]
  end
  if count >= limit then break end
end
return {nss, out}
"""

ENTRIES = r"""
-- KEYS: ns (the thread's slot); ARGV: cp_prefix, wr_prefix, blob_prefix, then pairs N, id
-- Returns {N, entry} for each checkpoint that still exists, in the order asked, each blob
-- once per reply as LIST sends them.
local out, sent = {}, {}
for i = 4, #ARGV, 2 do
  local n, cid = ARGV[i], ARGV[i + 1]
  local payload, err = get_string(ARGV[1] .. n .. ':' .. cid)
  if err then return err end
  if payload then
    local entry
    entry, err = read_entry(n, cid, payload, ARGV[2], ARGV[3], sent)
    if err then return err end
    out[#out + 1] = {n, entry}
  end
end
return out
"""

DELETE_THREAD = (
    _PREFIXES
    + r"""
-- KEYS: ns, [registry]; ARGV: T, then the prefix table
local t = ARGV[1]
REGISTRY = KEYS[2]
local err = check(KEYS[1], 'zset') or (REGISTRY and check_registry(REGISTRY))
  or check_timelines(KEYS[1], p)
if err then return err end
-- Every timeline is walked before anything is deleted, so a run set of the wrong type
-- stops the script while the thread is whole.
local doomed, by_run = {}, {}
for _, n in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  doomed[#doomed + 1] = doomed_keys(t, n, p, by_run)
end
err = check_run_sets(by_run)
if err then return err end
-- CHECKED: every check is made; the check-only twin ends here
forget_runs(by_run)
for _, keys in ipairs(doomed) do del_all(keys) end
settle_runs(by_run, cp_root(p.cp, t))  -- what they name of other threads may not live for ever
redis.call('DEL', KEYS[1])
EMPTIED = 1
if REGISTRY then redis.call('ZREM', REGISTRY, t) end
return outcome()
"""
)

HEADS = r"""
-- KEYS: ns; ARGV: cp_prefix, idx_prefix
-- Returns {N, id, payload, ...}: the newest checkpoint of each timeline of the thread, read only
-- (the client reads their metadata before prune keep_latest: see _prune_steps).
local err = check(KEYS[1], 'zset')
if err then return err end
local out = {}
for _, n in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  local cid, payload
  cid, payload, err = latest(ARGV[2] .. n, ARGV[1], n)
  if err then return err end
  if payload then
    out[#out + 1] = n
    out[#out + 1] = cid
    out[#out + 1] = payload
  end
end
return out
"""

DELTA_HISTORY = r"""
-- KEYS: idx; ARGV: cid ('' = newest), from ('1': cid is the first ancestor to read; else the
-- walk starts at its parent), N, cp_prefix, wr_prefix, blob_prefix, most ancestors to read,
-- k, then k escaped channel names (as blob refs hold them), then the same k channels as
-- writes name them.
-- Walks the parent chain for LangGraph's DeltaChannel history: returns {ancestors, next},
-- each ancestor {id, its writes to channels still open (flat field, value), {channel number,
-- blob ref, blob value}... for the channels it holds a value of, which close there}, and the
-- id to go on from once the budget is spent, else false. A channel whose blob is missing or
-- empty at an ancestor stays open (a DeltaChannel between snapshots). A damaged ancestor
-- comes back with its payload as a fourth field, for the client to name.
local n, cp, wr, blob = ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local budget, k = tonumber(ARGV[7]), tonumber(ARGV[8])
local by_ref, by_name, closed, open = {}, {}, {}, k
for i = 1, k do
  by_ref[ARGV[8 + i]] = i
  by_name[ARGV[8 + k + i]] = i
end
local cur, payload, err = ARGV[1], nil, nil
if ARGV[2] ~= '1' then
  if cur == '' then
    cur, payload, err = latest(KEYS[1], cp, n)
  else
    err = check(KEYS[1], 'zset')
    if not err then payload, err = get_string(cp .. n .. ':' .. cur) end
  end
  if err then return err end
  if not payload then return {{}, false} end
  local parent = parent_of(payload)
  if not parent then return {{{cur, {}, {}, payload}}, false} end
  cur = parent
end
local out = {}
while cur ~= '' and open > 0 do
  if budget == 0 then return {out, cur} end
  budget = budget - 1
  payload, err = get_string(cp .. n .. ':' .. cur)
  if err then return err end
  if not payload then break end  -- pruned or expired: the chain ends here
  local _, refs, intact = header(payload)
  if not intact then
    out[#out + 1] = {cur, {}, {}, payload}
    break
  end
  local writes
  writes, err = get_hash(wr .. n .. ':' .. cur)
  if err then return err end
  local kept = {}
  for i = 1, #writes, 2 do
    local v = writes[i + 1]
    local pos = string.byte(v, 1) == 1 and 2 or nil
    for _ = 1, 3 do pos = pos and nsskip(v, pos) end
    local channel = pos and (nsread(v, pos))
    local j = channel and by_name[channel]
    if not channel or (j and not closed[j]) then  -- a damaged one goes to the client to name
      kept[#kept + 1] = writes[i]
      kept[#kept + 1] = v
    end
  end
  local seeds = {}
  for _, r in ipairs(refs) do
    local channel = ref_channel(r)
    local j = channel and by_ref[channel]
    if j and not closed[j] then
      local v
      v, err = get_string(blob .. n .. ':' .. r)
      if err then return err end
      if v and holds_value(v) then
        seeds[#seeds + 1] = j
        seeds[#seeds + 1] = r
        seeds[#seeds + 1] = v
      end
    end
  end
  for i = 1, #seeds, 3 do
    if not closed[seeds[i]] then open = open - 1 end
    closed[seeds[i]] = true
  end
  out[#out + 1] = {cur, kept, seeds}
  cur = parent_of(payload) or ''
end
return {out, false}
"""

REFRESH_CHAIN = r"""
-- KEYS: idx, keys, ns, [registry]
-- ARGV: cid ('' = newest), N, cp_prefix, wr_prefix, blob_prefix, ttl_ms, T, run_prefix,
--       newest too ('1': and the timeline's newest checkpoint, when another), then the
--       escaped DeltaChannels to follow (a superset will do: a channel closes at the first
--       checkpoint holding its value, and one the checkpoint has no version of is dropped)
-- Refreshes, as a read with refresh_on_read refreshes what it reads, the older checkpoints
-- (payload, writes, blobs) that LangGraph rebuilds the checkpoint's DeltaChannels from: they
-- live as long as it does. Sent with a put or put_writes (in its round trip), and by reads
-- with refresh_on_read. Returns, on a cluster, {escaped run, id, ...} of their run sets,
-- which live in other slots, for the client to refresh.
local cid, n, ttl, t = ARGV[1], ARGV[2], tonumber(ARGV[6]), ARGV[7]
REGISTRY = KEYS[4]
local idx_prefix = string.sub(KEYS[1], 1, #KEYS[1] - #n)
local keys_prefix = string.sub(KEYS[2], 1, #KEYS[2] - #n)
local err = check(KEYS[1], 'zset') or check(KEYS[2], 'zset') or check(KEYS[3], 'zset')
  or (REGISTRY and check_registry(REGISTRY))
  or check_takeover(n, KEYS[2], KEYS[3], idx_prefix, keys_prefix)
if err then return err end
local starts = {}
local payload
cid, payload, err = checkpoint_at(KEYS[1], ARGV[3], n, cid)
if err then return err end
if payload then starts[1] = {cid, payload} end
if ARGV[9] == '1' and ARGV[1] ~= '' then  -- refreshed alone, it would outlive the newest
  local newest, newest_payload
  newest, newest_payload, err = latest(KEYS[1], ARGV[3], n)
  if err then return err end
  if newest and newest ~= cid then starts[#starts + 1] = {newest, newest_payload} end
end
if #starts == 0 then return {} end
local now = now_ms()
local score = expiry(now, ttl)
-- as long as the checkpoint, which a put or put_writes gave the timeline's longest life
if ttl > 0 then ttl, score = outlive(KEYS[2], ttl, score) end
local channels, runs, done = {unpack(ARGV, 10)}, {}, {}
for _, start in ipairs(starts) do
  err = delta_chain(n, start[1], start[2], channels, ARGV[3], ARGV[5], function(c, found)
    if done[c] then return end
    done[c] = true
    refresh_checkpoint(n, c, found, ARGV[3], ARGV[4], ARGV[5], KEYS[2], ttl, score,
      REGISTRY and ARGV[8])
    local run = header(found)
    if not REGISTRY and run and run ~= '' then
      runs[#runs + 1] = run
      runs[#runs + 1] = c
    end
  end)
  if err then return err end
end
settle(t, n, KEYS[1], KEYS[2], KEYS[3], now)
return runs
"""

PRUNE_KEEP_LATEST = (
    _PREFIXES
    + r"""
-- KEYS: ns, [registry]; ARGV: T, the prefix table, then per timeline whose newest checkpoint
-- the client decoded (HEADS): N, its id, k, and the k escaped channels of the DeltaChannels
-- its metadata counts updates of since their last snapshot (0 for none)
local t, now = ARGV[1], now_ms()
REGISTRY = KEYS[2]
local err = check(KEYS[1], 'zset') or (REGISTRY and check_registry(REGISTRY))
  or check_timelines(KEYS[1], p)
if err then return err end
local planned, i = {}, 8
while i <= #ARGV do
  local k = tonumber(ARGV[i + 2])
  planned[ARGV[i]] = {ARGV[i + 1], {unpack(ARGV, i + 3, i + 2 + k)}}
  i = i + 3 + k
end

-- Each timeline's newest checkpoint, what it needs, and the others, found first: the run sets
-- the others leave are checked before anything changes.
local runs, plans = {}, {}
for _, n in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  local keep, head, lerr = latest(p.idx .. n, p.cp, n)
  local plan = planned[n]
  if plan and plan[1] ~= keep then plan = nil end
  -- Written since the client read the newest metadata: refused unless it has no marks.
  if head and not plan and delta_marked(head) then return {'delta'} end
  local kept = {}
  if keep then kept[keep] = true end
  if head and plan and #plan[2] > 0 then
    err = delta_chain(n, keep, head, plan[2], p.cp, p.blob, function(c) kept[c] = true end)
  end
  if err then return err end
  local doomed = {}
  for _, cid in ipairs(redis.call('ZRANGE', p.idx .. n, 0, -1)) do
    if not kept[cid] then doomed[#doomed + 1] = cid end
  end
  err = lerr or runs_left(n, doomed, p, runs)
  if err then return err end
  plans[#plans + 1] = {n, keep, doomed, kept}
end
err = check_run_sets(runs)
if err then return err end
-- CHECKED: every check is made; the check-only twin ends here
for _, plan in ipairs(plans) do
  local n, keep, kept = plan[1], plan[2], plan[4]
  for _, cid in ipairs(plan[3]) do remove_checkpoint(t, n, cid, p) end
  -- Writes of no checkpoint in the timeline go with it when older than the one kept; a
  -- newer one's may be of a checkpoint a running graph is still putting (its writes can
  -- land first), and stay.
  for _, m in ipairs(redis.call('ZRANGE', p.keys .. n, 0, -1)) do
    local cid = string.sub(m, 2)
    if string.sub(m, 1, 1) == 'w' and not kept[cid] and (not keep or cid < keep) then
      redis.call('DEL', p.wr .. n .. ':' .. cid)
      redis.call('ZREM', p.keys .. n, m)
    end
  end
  if collect_garbage(t, n, p, runs) then redis.call('ZREM', KEYS[1], n)
  else settle(t, n, p.idx .. n, p.keys .. n, KEYS[1], now) end  -- it may have no TTL left
end
settle_runs(runs, cp_root(p.cp, t))  -- the members that made them live for ever may be gone
settle_namespaces(t, KEYS[1], now)  -- a dropped timeline may have been the longest-lived
drop_empty_thread(KEYS[1], t)
return outcome()
"""
)

REMOVE_CHECKPOINTS = (
    _PREFIXES
    + r"""
-- KEYS: ns, [registry]; ARGV: T, the prefix table, then triples N, checkpoint id, the
-- escaped run whose run set named it
local t, now = ARGV[1], now_ms()
REGISTRY = KEYS[2]
local err = check(KEYS[1], 'zset') or (REGISTRY and check_registry(REGISTRY))
  or check_timelines(KEYS[1], p)
if err then return err end
-- A checkpoint put again by another run since the caller read the run set is that run's now:
-- it stays (its member leaves the old run set all the same).
-- `left[i]`: removing the checkpoint takes its member out of the run set the caller read.
local runs, kept, left = {}, {}, {}
for i = 8, #ARGV, 3 do
  local payload
  payload, err = get_string(p.cp .. ARGV[i] .. ':' .. ARGV[i + 1])
  if err then return err end
  local run = payload and run_of(payload)
  if payload and string.byte(payload, 1) == 1 and run ~= ARGV[i + 2] then
    kept[i] = true
  else
    run_left(payload, p, runs)
    left[i] = run ~= nil and run ~= '' and run == ARGV[i + 2]
  end
  if REGISTRY then runs[p.run .. ARGV[i + 2]] = true end  -- the run set the caller read
end
err = check_run_sets(runs)
if err then return err end
-- CHECKED: every check is made; the check-only twin ends here
local touched = {}
for i = 8, #ARGV, 3 do
  local n, cid = ARGV[i], ARGV[i + 1]
  if not kept[i] then
    remove_checkpoint(t, n, cid, p)
    touched[n] = true
  end
  -- On a standalone server every member read leaves its run set here, with its checkpoint
  -- (removing one already took it out): the run putting that checkpoint again after this
  -- script finds it in its set. (On a cluster the run sets live in other slots: the caller
  -- takes the members out after.)
  if REGISTRY and not left[i] then
    redis.call('SREM', p.run .. ARGV[i + 2], t .. ':' .. n .. ':' .. cid)
  end
end
for n in pairs(touched) do
  if collect_garbage(t, n, p, runs) then redis.call('ZREM', KEYS[1], n)
  else settle(t, n, p.idx .. n, p.keys .. n, KEYS[1], now) end  -- it may have no TTL left
end
settle_runs(runs, cp_root(p.cp, t))  -- the members that made them live for ever may be gone
settle_namespaces(t, KEYS[1], now)  -- a dropped timeline may have been the longest-lived
drop_empty_thread(KEYS[1], t)
return outcome()
"""
)

EXPORT_THREAD = r"""
-- KEYS: ns, [registry]; ARGV: cp_prefix, wr_prefix, blob_prefix, keys_prefix
-- Returns per namespace {N, {member, value}...}; a writes value is the flat HGETALL, a
-- blob value '' means the channel is absent at that version (no key). Entries of keys that
-- have expired (not swept yet) are left out: their keys are gone, not absent by design.
-- A key of the wrong type stops it with that key's error: the copy would read differently.
-- Neither does it read a keyspace 0.1.0 wrote as empty: its registry tells.
local err = check(KEYS[1], 'zset') or (KEYS[2] and check_registry(KEYS[2]))
if err then return err end
local now = now_ms()
local out = {}
for _, n in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  local items = {}
  local members = redis.pcall('ZRANGEBYSCORE', ARGV[4] .. n, now, '+inf')
  if members.err then return read_error(ARGV[4] .. n, members, 'zset') end
  for _, m in ipairs(members) do
    local kind, rest = string.sub(m, 1, 1), string.sub(m, 2)
    local value
    if kind == 'c' then value, err = get_string(ARGV[1] .. n .. ':' .. rest)
    elseif kind == 'w' then value, err = get_hash(ARGV[2] .. n .. ':' .. rest)
    elseif kind == 'b' then
      value, err = get_string(ARGV[3] .. n .. ':' .. rest)
      value = value or ''  -- '': absent at this version
    end
    if err then return err end
    if value and (kind ~= 'w' or #value > 0) then
      items[#items + 1] = m
      items[#items + 1] = value
    end
  end
  out[#out + 1] = {n, items}
end
return out
"""

IMPORT_THREAD = (
    _PREFIXES
    + r"""
-- KEYS: ns, [registry, index marker, metadata index zsets...]; ARGV: T, the prefix table,
--   ttl_ms, F, the F metadata fields the saver indexes, then per namespace: N, item count,
--   then per item: member, value count, values (a writes item carries field/value pairs;
--   others one value). Without the registry (a cluster), the client adds the registry entry,
--   run-set members and index members itself, first, and the marker is not checked here.
local t, ttl = ARGV[1], tonumber(ARGV[8])
local first = 10 + tonumber(ARGV[9])  -- the first namespace's N
local now = now_ms()
local score = expiry(now, ttl)
REGISTRY = KEYS[2]
local err = check(KEYS[1], 'zset') or (REGISTRY and check_registry(REGISTRY))
  or check_timelines(KEYS[1], p)
if err then return err end
if KEYS[3] then
  err = unindexed(KEYS[3], 10, first - 1, 'copy_thread')
  if err then return err end
end
-- The copy joins these indexes with its checkpoints: added a round trip before, a query in
-- between found no checkpoint of it and dropped the member for good.
for k = 4, #KEYS do
  err = check(KEYS[k], 'zset')
  if err then return err end
end
-- Every key the copy writes (its namespace's indexes, each checkpoint, writes hash and
-- value), the run sets the copied checkpoints join and those of the checkpoints they
-- overwrite: all checked before the first write, so a refused copy writes nothing.
local joined, i = {}, first
local kinds = {c = {p.cp, 'string'}, w = {p.wr, 'hash'}, b = {p.blob, 'string'}}
while i <= #ARGV do
  local n, count = ARGV[i], tonumber(ARGV[i + 1])
  i = i + 2
  err = count > 0 and (check(p.idx .. n, 'zset') or check(p.keys .. n, 'zset'))
  if err then return err end
  for _ = 1, count do
    local m, nvals = ARGV[i], tonumber(ARGV[i + 1])
    local kind = kinds[string.sub(m, 1, 1)]
    err = check(kind[1] .. n .. ':' .. string.sub(m, 2), kind[2])
    if err then return err end
    if string.sub(m, 1, 1) == 'c' then
      local run = run_of(ARGV[i + 2])
      if run ~= '' then joined[p.run .. run] = true end
      err = runs_left(n, {string.sub(m, 2)}, p, joined)
      if err then return err end
    end
    i = i + 2 + nvals
  end
end
err = check_run_sets(joined)
if err then return err end
i = first
local took_over = false
while i <= #ARGV do
  local n, count = ARGV[i], tonumber(ARGV[i + 1])
  i = i + 2
  -- what the copy writes outlives what the timeline keeps longer already: see outlive
  local ttl, score = ttl, score
  if ttl > 0 and count > 0 then ttl, score = outlive(p.keys .. n, ttl, score) end
  if ttl > 0 and count > 0 and adopt_ttl(t, n, p.keys .. n, ttl, score, p) then
    took_over = true
  end
  for _ = 1, count do
    local m, nvals = ARGV[i], tonumber(ARGV[i + 1])
    local kind, rest = string.sub(m, 1, 1), string.sub(m, 2)
    local key
    local left = -2  -- the life an existing key has left, kept when longer than `ttl`
    if kind == 'c' then
      key = p.cp .. n .. ':' .. rest
      left = ttl > 0 and redis.call('PTTL', key) or -2
      local run = run_of(ARGV[i + 2])
      local before = get_string(key)
      if before then
        local old_run = run_of(before)
        if old_run ~= run then
          if old_run ~= '' then forget_run(p.run .. old_run, t .. ':' .. n .. ':' .. rest) end
          redis.call('ZREM', p.keys .. n, run_marker(old_run, rest))
        end
      end
      redis.call('SET', key, ARGV[i + 2])
      redis.call('ZADD', p.idx .. n, 0, rest)
      -- the run marker (and the run set) live as long as the checkpoint: see below
      local life = (ttl > 0 and left > ttl) and left or ttl
      redis.call('ZADD', p.keys .. n, expiry(now, life), run_marker(run, rest))
      if run ~= '' and REGISTRY then
        redis.call('SADD', p.run .. run, t .. ':' .. n .. ':' .. rest)
        if ttl > 0 then expire_run(p.run .. run, life) else redis.call('PERSIST', p.run .. run) end
      end
    elseif kind == 'w' then
      key = p.wr .. n .. ':' .. rest
      left = ttl > 0 and redis.call('PTTL', key) or -2
      for j = i + 2, i + 1 + nvals, 2 do redis.call('HSET', key, ARGV[j], ARGV[j + 1]) end
    else
      key = p.blob .. n .. ':' .. rest
      left = ttl > 0 and redis.call('PTTL', key) or -2
      if ARGV[i + 2] == '' then redis.call('DEL', key)  -- absent at this version
      else redis.call('SET', key, ARGV[i + 2]) end
    end
    if ttl > 0 and left > ttl then  -- kept longer by another writer: its life stays
      redis.call('PEXPIRE', key, left)
      redis.call('ZADD', p.keys .. n, 'NX', score, m)
    else
      -- one expiry time for every key of the copy: see extend
      if ttl > 0 then redis.call('PEXPIREAT', key, score) else redis.call('PERSIST', key) end
      redis.call('ZADD', p.keys .. n, score, m)
    end
    i = i + 2 + nvals
  end
  if count > 0 then
    settle(t, n, p.idx .. n, p.keys .. n, KEYS[1], now)
  end
end
if took_over then adopt_thread(t, false, KEYS[1], p.idx, p.keys, ttl, score, p, now) end
for k = 4, #KEYS do  -- at the server's clock, unless a put scored it later already
  local old = redis.call('ZSCORE', KEYS[k], t)
  if not old or tonumber(old) < tonumber(now) then redis.call('ZADD', KEYS[k], now, t) end
end
return outcome()
"""
)


RUN_MEMBERS = r"""
-- KEYS: one run set, [registry]; returns its members (none from a keyspace 0.1.0 wrote,
-- which its registry tells)
local err = check(KEYS[1], 'set') or (KEYS[2] and check_registry(KEYS[2]))
if err then return err end
return redis.call('SMEMBERS', KEYS[1])
"""


RUN_JOIN = r"""
-- KEYS: one run set; ARGV: member, ttl_ms (0: kept for ever), '1' to keep a member only
-- On a cluster the client adds a checkpoint to its run set (another hash slot) with this,
-- under the rule a script follows on a standalone server: see expire_run. Keeping only (a
-- checkpoint a writer without a TTL keeps for ever, after its thread script) changes
-- nothing unless the member is there: a delete_thread that came in between leaves no run
-- set kept for ever naming what it deleted.
local err = check(KEYS[1], 'set')
if err then return err end
local ttl = tonumber(ARGV[2])
if ARGV[3] == '1' and redis.call('SISMEMBER', KEYS[1], ARGV[1]) == 0 then return 0 end
redis.call('SADD', KEYS[1], ARGV[1])
if ttl > 0 then expire_run(KEYS[1], ttl) else redis.call('PERSIST', KEYS[1]) end
return 1
"""


RUN_LEAVE = r"""
-- KEYS: one run set; ARGV: members that leave it
-- On a cluster the client takes the checkpoints a thread script removed out of their run set
-- (in another hash slot) with this, after that script: a foreign value there is named.
-- delete_for_runs takes out the members it read (the set goes with its last one).
local err = check(KEYS[1], 'set')
if err then return err end
return redis.call('SREM', KEYS[1], unpack(ARGV))
"""


REGISTRY_PAGE = r"""
-- KEYS: registry; ARGV: ZSCAN cursor, count
-- Returns ZSCAN's {next cursor, {thread, expiry score, ...}} and the server's clock, which
-- the scores are read against: unlike ranks, the cursor holds when puts move threads or
-- threads come and go during the walk. The entries of threads that expired leave the
-- registry here (a put sweeps 64 at most, and none comes once writes stop), unless this
-- user or server may not write (a read-only replica): then they wait for the puts.
local err = check_registry(KEYS[1])
if err then return err end
local page = redis.call('ZSCAN', KEYS[1], ARGV[1], 'COUNT', ARGV[2])
local now, items, dead = now_ms(), page[2], {}
local clock = tonumber(now)
for i = 2, #items, 2 do
  if tonumber(items[i]) < clock then dead[#dead + 1] = items[i - 1] end
end
if #dead > 0 then redis.pcall('ZREM', KEYS[1], unpack(dead)) end
page[3] = now
return page
"""


INDEX_PAGE = r"""
-- KEYS: a metadata index zset, [the index marker]; ARGV: escaped field, max, min, count
-- Returns {the marker's value for the field (standalone; false: not complete), the server's
-- clock in ms, {member, score, ...}}: up to `count` members from score `max` down to `min`,
-- highest first, and every other member with the last one's score, so that the caller goes
-- on below that score.
local err = check(KEYS[1], 'zset') or (KEYS[2] and check(KEYS[2], 'hash'))
if err then return err end
local marked = false
if KEYS[2] then marked = redis.call('HGET', KEYS[2], ARGV[1]) end
local count = tonumber(ARGV[4])
local page = redis.call('ZREVRANGEBYSCORE', KEYS[1], ARGV[2], ARGV[3], 'WITHSCORES', 'LIMIT',
  0, count)
if #page >= 2 * count then
  local last, have = page[#page], {}
  for i = 1, #page, 2 do have[page[i]] = true end
  local ties = redis.call('ZREVRANGEBYSCORE', KEYS[1], last, last, 'WITHSCORES')
  for i = 1, #ties, 2 do
    if not have[ties[i]] then
      page[#page + 1] = ties[i]
      page[#page + 1] = ties[i + 1]
    end
  end
end
return {marked, now_ms(), page}
"""


INDEX_ADD = r"""
-- KEYS: a metadata index zset; ARGV: member, score ('' = the server's clock), ...
-- Adds each member at its score, unless it has a higher one already (ZADD GT is Redis 6.2).
local err = check(KEYS[1], 'zset')
if err then return err end
local now = nil
for i = 1, #ARGV, 2 do
  local score = ARGV[i + 1]
  if score == '' then
    now = now or now_ms()
    score = now
  end
  local old = redis.call('ZSCORE', KEYS[1], ARGV[i])
  if not old or tonumber(old) < tonumber(score) then
    redis.call('ZADD', KEYS[1], score, ARGV[i])
  end
end
return 0
"""


INDEX_DROP = r"""
-- KEYS: a metadata index zset; ARGV: namespace key head, tail, grace ms, '1' to check the
--       namespace keys here, then member, score, ...
-- Removes members a query (or reindex) found no checkpoint for, whose score is still the one
-- it read (a put since re-added the member, at a later score: it stays), and older than
-- `grace` ms when that is above 0. Checked here (a standalone server): only a member whose
-- thread has no namespace key, `head .. member .. tail`. A cluster client checked that key in
-- its own slot before: a put may have come in between, so it passes a grace (a put or
-- `copy_thread` adds its thread to the index before it writes, at the clock of the index's
-- node).
local head, tail, grace, here = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4] == '1'
local err = check(KEYS[1], 'zset')
if err then return err end
local oldest = nil
if grace > 0 then oldest = tonumber(now_ms()) - grace end
local gone = 0
for i = 5, #ARGV, 2 do
  local m = ARGV[i]
  local score = redis.call('ZSCORE', KEYS[1], m)
  if score and tonumber(score) == tonumber(ARGV[i + 1]) then
    local unused = (not oldest or tonumber(score) < oldest)
      and (not here or redis.call('EXISTS', head .. m .. tail) == 0)
    if unused then
      redis.call('ZREM', KEYS[1], m)
      gone = gone + 1
    end
  end
end
return gone
"""


INDEX_CLEAR = r"""
-- KEYS: a metadata index zset of a field no longer indexed: deleted, if it is a zset.
if redis.call('TYPE', KEYS[1])['ok'] == 'zset' then return redis.call('DEL', KEYS[1]) end
return 0
"""


@dataclass(frozen=True)
class Script:
    """A Lua script and its SHA1, for EVALSHA with an EVAL fallback."""

    name: str
    source: str
    sha: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "sha", hashlib.sha1(self.source.encode()).hexdigest())


# A top-level definition of the prelude: a local function or a local variable, with the
# comment lines right above it.
_DEFINITION = re.compile(r"^((?:--.*\n)*)local (?:function (\w+)\(|(\w+) = )", re.MULTILINE)
_COMMENT = re.compile(r"--[^\n]*")


def _names(lua: str) -> set[str]:
    """The words of `lua`'s code, its comments left out."""
    return set(re.findall(r"\w+", _COMMENT.sub("", lua)))


def _definitions(prelude: str) -> list[tuple[str, str]]:
    """The prelude's top-level definitions in order, as (name, source).

    Every line the prelude starts at its left margin must begin a definition of one name,
    end a function, or be a comment: anything else (``local a, b``, a forward declaration,
    a statement) would be cut into the wrong piece, so it fails here, on import.
    """
    found = list(_DEFINITION.finditer(prelude))
    top = [line for line in prelude.splitlines() if line[:1] not in ("", " ")]
    starts = [line for line in top if not line.startswith(("end", "--"))]
    if len(starts) != len(found):
        raise AssertionError(f"the prelude has top-level lines of another shape: {starts}")
    ends = [m.start() for m in found[1:]] + [len(prelude)]
    return [
        (m.group(2) or m.group(3), prelude[m.start() : end])
        for m, end in zip(found, ends, strict=True)
    ]


def _prelude_for(body: str) -> str:
    """The part of the prelude `body` uses: each definition its code names, and theirs.

    Redis runs the whole chunk on every call, so every local function of the prelude is
    made anew each time (5-7 us per call on Redis 7 for all of them): a script carries
    only those it can call. Definitions use only earlier ones, so one pass from the last
    to the first finds them all.
    """
    words = _names(body)
    needed: set[str] = set()
    for name, _, uses in reversed(_PIECES):
        if name in words:
            needed.add(name)
            words |= uses
    return "\n" + "".join(source for name, source, _ in _PIECES if name in needed)


# Each definition of the prelude with the names its code uses, read once for all scripts.
_PIECES = [(name, source, _names(source)) for name, source in _definitions(_PRELUDE)]


# Every script replicates its effects, not its source: a Redis 5 or 6 set to replicate scripts
# verbatim (`lua-replicate-commands no`) refuses a write after a command whose result may
# differ on a replica (TIME, PTTL, ZSCAN), which the scripts use. From Redis 7 it is the only
# mode and the call changes nothing.
_EFFECTS = "redis.replicate_commands()\n"


def _script(name: str, body: str) -> Script:
    return Script(name, _EFFECTS + _prelude_for(body) + body)


# A call that changes many threads runs a thread-wide script per thread, which cannot be one
# atomic step (on a cluster the threads live in different slots). So it first runs each one's
# check-only twin: the same script ending once every check it makes before its first change
# has passed, having changed nothing. A foreign value in any thread then stops the call
# before any thread changes.
_CHECKED = "-- CHECKED: every check is made; the check-only twin ends here\n"


def _check_only(name: str, body: str) -> Script:
    if body.count(_CHECKED) != 1:
        raise AssertionError(f"script {name} must mark the end of its checks once")
    return _script(f"{name}_check", body.replace(_CHECKED, "do return 0 end\n"))


SCRIPTS = {
    s.name: s
    for s in (
        _script("put", PUT),
        _script("put_writes", PUT_WRITES),
        _script("get", GET),
        _script("list", LIST),
        _script("entries", ENTRIES),
        _script("delete_thread", DELETE_THREAD),
        _check_only("delete_thread", DELETE_THREAD),
        _script("heads", HEADS),
        _script("delta_history", DELTA_HISTORY),
        _script("refresh_chain", REFRESH_CHAIN),
        _script("prune_keep_latest", PRUNE_KEEP_LATEST),
        _check_only("prune_keep_latest", PRUNE_KEEP_LATEST),
        _script("remove_checkpoints", REMOVE_CHECKPOINTS),
        _check_only("remove_checkpoints", REMOVE_CHECKPOINTS),
        _script("export_thread", EXPORT_THREAD),
        _script("import_thread", IMPORT_THREAD),
        _script("run_members", RUN_MEMBERS),
        _script("run_join", RUN_JOIN),
        _script("run_leave", RUN_LEAVE),
        _script("registry_page", REGISTRY_PAGE),
        _script("index_page", INDEX_PAGE),
        _script("index_add", INDEX_ADD),
        _script("index_drop", INDEX_DROP),
        _script("index_clear", INDEX_CLEAR),
    )
}
