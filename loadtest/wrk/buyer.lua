-- wrk script: every request is a new buyer of one product (no
-- Idempotency-Key), and answers are counted by status and problem type;
-- done() prints one line "STATUS 201=… 409:sold-out=… 503:overloaded=…".
-- WRK_PREFIX (environment) keeps the user ids of parallel wrk runs apart.
local threads = {}

function setup(thread)
  thread:set("tid", #threads + 1)
  table.insert(threads, thread)
end

function init(args)
  counts = {}
  n = 0
  prefix = os.getenv("WRK_PREFIX") or "wrk"
end

function request()
  n = n + 1
  local body = '{"user_id":"' .. prefix .. "-" .. tid .. "-" .. n .. '","quantity":1}'
  return wrk.format("POST", wrk.path, {["Content-Type"] = "application/json"}, body)
end

function response(status, headers, body)
  local k = status
  if status >= 400 then
    local t = string.match(body or "", "/problems/([%w-]+)")
    if t then k = status .. ":" .. t end
  end
  counts[k] = (counts[k] or 0) + 1
end

function done(summary, latency, requests)
  local total = {}
  for _, t in ipairs(threads) do
    for k, v in pairs(t:get("counts")) do total[k] = (total[k] or 0) + v end
  end
  local out = {}
  for k, v in pairs(total) do table.insert(out, k .. "=" .. v) end
  table.sort(out)
  io.write("STATUS " .. table.concat(out, " ") .. "\n")
end
