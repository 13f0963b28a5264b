-- clock: the TIME of the server that holds KEYS[1], the item's stock key
-- (a Cluster routes the script by it): the clock reserve.lua and
-- enqueue.lua check the item's sale window against. Returns {seconds,
-- microseconds}, as TIME does. Reads no key.
return redis.call('TIME')
