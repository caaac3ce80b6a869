#include "common/fault.h"

#include "common/params.h"

namespace pact {

namespace {

std::string_view trim(std::string_view s) { return trimSpace(s); }

Error bad(std::string_view token, const std::string& why) {
  return Error{Status::kInvalidArgument, "'" + std::string(token) + "': " + why};
}

}  // namespace

Result<FaultSpec> FaultParser::parse(std::string_view s) {
  FaultSpec f;
  s = trim(s);
  while (!s.empty()) {
    auto comma = s.find(',');
    std::string_view token = trim(s.substr(0, comma));
    s = comma == std::string_view::npos ? std::string_view() : s.substr(comma + 1);
    auto eq = token.find('=');
    if (eq == std::string_view::npos) return bad(token, "expected key=value");
    std::string_view key = token.substr(0, eq), value = token.substr(eq + 1);
    if (key == "delay") {
      auto colon = value.find(':');
      if (value.substr(0, 4) != "lane" || colon == std::string_view::npos)
        return bad(token, "expected delay=laneN:DURATION");
      auto lane = parseUnsigned(value.substr(4, colon - 4));
      if (!lane.ok() || *lane > 15) return bad(token, "expected a lane from 0 to 15");
      auto d = DurationParser::parse(value.substr(colon + 1));
      if (!d.ok()) return bad(token, std::string("expected ") + DurationParser::allowed());
      f.delayLane = static_cast<int>(*lane);
      f.delay = *d;
    } else if (key == "seed") {
      auto v = parseUnsigned(value);
      if (!v.ok()) return bad(token, "expected an unsigned integer seed");
      f.seed = *v;
    } else {
      return bad(token, "expected delay=laneN:DURATION or seed=N (this build injects no other fault)");
    }
  }
  return f;
}

std::string FaultSpec::describe() const {
  if (!active()) return "none";
  return "delay=lane" + std::to_string(delayLane) + ":" + formatDuration(delay) + ",seed=" +
         std::to_string(seed);
}

}  // namespace pact
