-- Included where a script reads a record of its caller (--#include
-- owned.lua), after it read the record into v: is v the record of owner
-- ARGV[1]? Then token is its token, since its time and rest how it ends ('',
-- ',q' or ',ended'); otherwise token is nil. It is record.lua's parse,
-- restricted to one owner, without making a function (see token.lua).
local o, token, since, rest = ARGV[1], nil, nil, nil
if string.sub(v, 1, #o + 1) == o .. ',' then
  token, since, rest = string.match(v, '^([1-9]%d*),(%d+)(.*)$', #o + 2)
end
if token and (#token > 19 or #since > 15 or (rest ~= '' and rest ~= ',q' and rest ~= ',ended')) then
  token = nil
end
