-- Claim a partition for a fence (sink/redis.go, claimScript).
-- KEYS[1]  the offsets hash, <prefix>offsets:<group>
-- ARGV[1]  the field, <topic>/<partition>
-- ARGV[2]  the claimer's fence
-- The field holds {"next":N,"fence":F}; next is -1 while nothing was written.
-- A stored fence above ours is refused ("FENCED ..."), and nothing changes.
-- Otherwise our fence is stored and next returned: where the claimer reads from.
local fence = tonumber(ARGV[2])
if not fence then
  return redis.error_reply('BADBATCH fence ' .. tostring(ARGV[2]) .. ' is not a number')
end
local nxt = -1
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if cur then
  local st = cjson.decode(cur)
  if st.fence > fence then
    return redis.error_reply(string.format('FENCED %s is held at fence %d, above %d', ARGV[1], st.fence, fence))
  end
  nxt = st.next
end
redis.call('HSET', KEYS[1], ARGV[1], string.format('{"next":%d,"fence":%d}', nxt, fence))
return nxt
