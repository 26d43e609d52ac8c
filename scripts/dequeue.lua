-- Dequeue: take ARGV[1] out of the wait queue; if the key is free, announce
-- it so that the next owner in the queue looks.
-- KEYS[1] record key, KEYS[2] fencing counter, KEYS[3], KEYS[4] wait queue
-- ARGV[1] owner, ARGV[2] channel, ARGV[3] key to announce
dequeue(ARGV[1])
if redis.call('EXISTS', KEYS[1]) == 0 then announce(ARGV[2], ARGV[3]) end
return {1}
