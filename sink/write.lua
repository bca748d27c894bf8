-- Write one partition's batch and move its next offset, in one atomic step
-- (sink/redis.go, writeScript).
-- KEYS[1]    the offsets hash, <prefix>offsets:<group>
-- KEYS[2..]  stream and hash modes: the one data key; string mode: one key
--            per record, in record order
-- ARGV[1]    the field, <topic>/<partition>
-- ARGV[2]    the writer's fence
-- ARGV[3]    the mode: stream, hash or string
-- ARGV[4]    the partition (the stream entries' partition field)
-- ARGV[5..]  five per record, offsets ascending: offset, flags ("k" key
--            present, "v" value present), key, value, headers (JSON, "" for none)
-- Order: check the fence, then validate everything (Redis does not roll a
-- script back: an error after the first write would leave half a batch),
-- then write the records at or above next, then store next. Records below
-- next were written before (a retry, or a poll that read from further back)
-- and are skipped, so a batch written twice lands once, even with XADD.
-- Errors: "FENCED ..." (a higher fence is stored; nothing changes),
-- "BADBATCH ..." (malformed arguments or a data key of the wrong type;
-- nothing changes). Returns the new next.
local field, mode, partition = ARGV[1], ARGV[3], ARGV[4]
local fence = tonumber(ARGV[2])
local nrec = (#ARGV - 4) / 5
if not fence or nrec ~= math.floor(nrec) then
  return redis.error_reply('BADBATCH malformed arguments')
end
if mode ~= 'stream' and mode ~= 'hash' and mode ~= 'string' then
  return redis.error_reply('BADBATCH unknown mode ' .. mode)
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
local want = {stream = 'stream', hash = 'hash', string = 'string'}
if mode == 'string' then
  if #KEYS ~= nrec + 1 then return redis.error_reply('BADBATCH want one key per record') end
elseif #KEYS ~= 2 then
  return redis.error_reply('BADBATCH want one data key')
end
local prev = -1
for i = 0, nrec - 1 do
  local off = tonumber(ARGV[5 + i * 5])
  if not off or off < 0 or off ~= math.floor(off) or off <= prev then
    return redis.error_reply('BADBATCH offsets must be integers in ascending order')
  end
  prev = off
  if mode == 'string' and off >= nxt and string.find(ARGV[6 + i * 5], 'k', 1, true) then
    local t = redis.call('TYPE', KEYS[2 + i]).ok
    if t ~= 'none' and t ~= 'string' then
      return redis.error_reply('BADBATCH ' .. KEYS[2 + i] .. ' holds a ' .. t)
    end
  end
end
if mode ~= 'string' then
  local t = redis.call('TYPE', KEYS[2]).ok
  if t ~= 'none' and t ~= want[mode] then
    return redis.error_reply('BADBATCH ' .. KEYS[2] .. ' holds a ' .. t)
  end
end

-- Write.
local last = -1
for i = 0, nrec - 1 do
  local base = 5 + i * 5
  local off = tonumber(ARGV[base])
  last = off
  if off >= nxt then
    local flags, key, value, headers = ARGV[base + 1], ARGV[base + 2], ARGV[base + 3], ARGV[base + 4]
    local hasKey = string.find(flags, 'k', 1, true) ~= nil
    local hasValue = string.find(flags, 'v', 1, true) ~= nil
    if mode == 'stream' then
      -- The common shapes call XADD directly, without an argument table
      -- to build and unpack per record (1.2 times the records/s of
      -- `sluice bench sink redis`).
      if hasKey and hasValue and headers == '' then
        redis.call('XADD', KEYS[2], '*', 'partition', partition, 'offset', ARGV[base], 'key', key, 'value', value)
      elseif hasValue and not hasKey and headers == '' then
        redis.call('XADD', KEYS[2], '*', 'partition', partition, 'offset', ARGV[base], 'value', value)
      else
        local args = {'XADD', KEYS[2], '*', 'partition', partition, 'offset', ARGV[base]}
        if hasKey then table.insert(args, 'key'); table.insert(args, key) end
        if hasValue then table.insert(args, 'value'); table.insert(args, value) end
        if headers ~= '' then table.insert(args, 'headers'); table.insert(args, headers) end
        redis.call(unpack(args))
      end
    elseif hasKey and mode == 'hash' then
      if hasValue then redis.call('HSET', KEYS[2], key, value) else redis.call('HDEL', KEYS[2], key) end
    elseif hasKey then
      if hasValue then redis.call('SET', KEYS[2 + i], value) else redis.call('DEL', KEYS[2 + i]) end
    end
    -- A keyless record has nothing to fold into a hash or a string: it
    -- only moves next.
  end
end
if last >= nxt then
  nxt = last + 1
end
redis.call('HSET', KEYS[1], field, string.format('{"next":%d,"fence":%d}', nxt, fence))
return nxt
