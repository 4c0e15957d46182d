-- servefleet's gateway: a route's default for chat_template_kwargs.enable_thinking.
--
-- The frontend's rules set txn.sf_think_default on chat requests of a route that has one
-- and does not already say enable_thinking (HAProxy's json_query checked). The action
-- below then makes the new body and its Content-Length while headers may still change;
-- the filter swaps the body itself when it is forwarded (a body may only be replaced
-- there). A request whose body is not read whole (larger than tune.bufsize) passes as it
-- came.

local function with_default(body, value)
  local s, e = body:find('"chat_template_kwargs"%s*:%s*{')
  local head, tail
  if s then
    head, tail = body:sub(1, e), body:sub(e + 1)
    local sep = tail:match('^%s*}') and '' or ','
    return head .. '"enable_thinking":' .. value .. sep .. tail
  end
  s, e = body:find('^%s*{')
  if not s then return nil end
  head, tail = body:sub(1, e), body:sub(e + 1)
  local sep = tail:match('^%s*}') and '' or ','
  return head .. '"chat_template_kwargs":{"enable_thinking":' .. value .. '}' .. sep .. tail
end

core.register_action("servefleet_thinking", {"http-req"}, function(txn)
  local value = txn:get_var("txn.sf_think_default")
  local body = txn.sf:req_body()
  if value == nil or body == nil then return end
  if #body ~= tonumber(txn.sf:req_body_size()) then return end
  local new = with_default(body, value)
  if new == nil then return end
  txn:set_var("txn.sf_body_len", #body)
  txn:set_var("txn.sf_body", new)
  txn.http:req_set_header("content-length", tostring(#new))
end)

local Thinking = {}
Thinking.id = "servefleet-thinking"
Thinking.flags = filter.FLT_CFG_FL_HTX
Thinking.__index = Thinking

function Thinking:new()
  return setmetatable({}, Thinking)
end

function Thinking:start_analyze(txn, chn)
  if not chn:is_resp() then filter.register_data_filter(self, chn) end
end

function Thinking:http_payload(txn, msg)
  local new = txn:get_var("txn.sf_body")
  if new == nil then return end
  if not msg:eom() then return 0 end
  txn:unset_var("txn.sf_body")
  msg:set(new, 0, txn:get_var("txn.sf_body_len"))
  return #new
end

core.register_filter("servefleet-thinking", Thinking, function(filter, args)
  return filter
end)
