-- Write one partition's batch and move its next offset, in one atomic step
-- (sink/redis.go, writeScript).
-- KEYS[1]    the offsets hash, <prefix>offsets:<group>
-- KEYS[2..]  stream and hash modes: the one data key; string mode: one key
--            per record, in record order
-- ARGV[1]    the field, <topic>/<partition>
-- ARGV[2]    the writer's fence
-- ARGV[3]    the mode: stream, hash or string
-- ARGV[4]    the partition (the stream entries' partition field)
-- ARGV[5]    the form of the records that follow:
--   "kv"     ARGV[6] the first offset, then two per record: key, value.
--            Every record has a key and a value and no headers, and the
--            offsets follow one another. The common batch, in two fifths
--            of the arguments.
--   "v"      ARGV[6] the first offset, then one per record: its value. As
--            "kv", for records with a value and no key.
--   "full"   five per record, offsets ascending: offset, flags ("k" key
--            present, "v" value present), key, value, headers (JSON, ""
--            for none).
-- Order: check the fence, then validate everything (Redis does not roll a
-- script back: an error after the first write would leave half a batch),
-- then write the records at or above next, then store next. Records below
-- next were written before (a retry, or a poll that read from further back)
-- and are skipped, so a batch written twice lands once, even with XADD.
-- Errors: "FENCED ..." (a higher fence is stored; nothing changes),
-- "BADBATCH ..." (malformed arguments or a data key of the wrong type;
-- nothing changes). Returns the new next.
local field, mode, partition, form = ARGV[1], ARGV[3], ARGV[4], ARGV[5]
local fence = tonumber(ARGV[2])
if not fence then
  return redis.error_reply('BADBATCH malformed arguments')
end
if mode ~= 'stream' and mode ~= 'hash' and mode ~= 'string' then
  return redis.error_reply('BADBATCH unknown mode ' .. tostring(mode))
end

-- The records: nrec of them; offset(i), key(i), value(i) for i in 0..nrec-1.
local nrec, first
local width = ({kv = 2, v = 1})[form]
if width then
  first = tonumber(ARGV[6])
  nrec = (#ARGV - 6) / width
  if not first or first < 0 or first ~= math.floor(first) then
    return redis.error_reply('BADBATCH malformed arguments')
  end
elseif form == 'full' then
  nrec = (#ARGV - 5) / 5
else
  return redis.error_reply('BADBATCH unknown form ' .. tostring(form))
end
if nrec ~= math.floor(nrec) then
  return redis.error_reply('BADBATCH malformed arguments')
end

local nxt = -1
local cur = redis.call('HGET', KEYS[1], field)
if cur then
  local st = cjson.decode(cur)
  if st.fence > fence then
    return redis.error_reply(string.format('FENCED %s is held at fence %d, above %d', field, st.fence, fence))
  end
  nxt = st.next
end

-- Validate: offsets ascend; keys match the mode; every data key written
-- has the type the mode writes.
if mode == 'string' then
  if #KEYS ~= nrec + 1 then return redis.error_reply('BADBATCH want one key per record') end
elseif #KEYS ~= 2 then
  return redis.error_reply('BADBATCH want one data key')
end
local function checkType(key, want)
  local t = redis.call('TYPE', key).ok
  if t ~= 'none' and t ~= want then
    return redis.error_reply('BADBATCH ' .. key .. ' holds a ' .. t)
  end
end
if form == 'full' then
  local prev = -1
  for i = 0, nrec - 1 do
    local off = tonumber(ARGV[6 + i * 5])
    if not off or off < 0 or off ~= math.floor(off) or off <= prev then
      return redis.error_reply('BADBATCH offsets must be integers in ascending order')
    end
    prev = off
    if mode == 'string' and off >= nxt and string.find(ARGV[7 + i * 5], 'k', 1, true) then
      local bad = checkType(KEYS[2 + i], 'string')
      if bad then return bad end
    end
  end
elseif mode == 'string' and form == 'kv' then
  for i = math.max(0, nxt - first), nrec - 1 do
    local bad = checkType(KEYS[2 + i], 'string')
    if bad then return bad end
  end
end
if mode ~= 'string' then
  local bad = checkType(KEYS[2], mode)
  if bad then return bad end
end

-- Write.
local last = -1
if width then
  -- Records below next were written before; the rest follow one another.
  -- Keyless ones ("v") only a stream keeps; the other modes only move next.
  if width == 2 or mode == 'stream' then
    local data = KEYS[2]
    for i = math.max(0, nxt - first), nrec - 1 do
      local offset, value = string.format('%d', first + i), ARGV[6 + (i + 1) * width]
      if width == 1 then
        redis.call('XADD', data, '*', 'partition', partition, 'offset', offset, 'value', value)
      elseif mode == 'stream' then
        redis.call('XADD', data, '*', 'partition', partition, 'offset', offset, 'key', ARGV[5 + (i + 1) * 2], 'value', value)
      elseif mode == 'hash' then
        redis.call('HSET', data, ARGV[5 + (i + 1) * 2], value)
      else
        redis.call('SET', KEYS[2 + i], value)
      end
    end
  end
  if nrec > 0 then last = first + nrec - 1 end
else
  for i = 0, nrec - 1 do
    local base = 6 + i * 5
    local off = tonumber(ARGV[base])
    last = off
    if off >= nxt then
      local flags, key, value, headers = ARGV[base + 1], ARGV[base + 2], ARGV[base + 3], ARGV[base + 4]
      local hasKey = string.find(flags, 'k', 1, true) ~= nil
      local hasValue = string.find(flags, 'v', 1, true) ~= nil
      if mode == 'stream' then
        local args = {'XADD', KEYS[2], '*', 'partition', partition, 'offset', ARGV[base]}
        if hasKey then table.insert(args, 'key'); table.insert(args, key) end
        if hasValue then table.insert(args, 'value'); table.insert(args, value) end
        if headers ~= '' then table.insert(args, 'headers'); table.insert(args, headers) end
        redis.call(unpack(args))
      elseif hasKey and mode == 'hash' then
        if hasValue then redis.call('HSET', KEYS[2], key, value) else redis.call('HDEL', KEYS[2], key) end
      elseif hasKey then
        if hasValue then redis.call('SET', KEYS[2 + i], value) else redis.call('DEL', KEYS[2 + i]) end
      end
      -- A keyless record has nothing to fold into a hash or a string: it
      -- only moves next.
    end
  end
end
if last >= nxt then
  nxt = last + 1
end
redis.call('HSET', KEYS[1], field, string.format('{"next":%d,"fence":%d}', nxt, fence))
return nxt
