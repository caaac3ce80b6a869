#include "common/fault.h"

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <mutex>
#include <thread>

#include "common/parse.h"

namespace pact {

namespace {

Error bad(std::string_view token, const std::string& why) {
  return Error{Status::kInvalidArgument, "'" + std::string(token) + "': " + why};
}

// A probability: a decimal in [0, 1] ("0.01", "1", ".5").
bool parseProbability(std::string_view v, double* out) {
  const std::string text(trimSpace(v));
  if (text.empty() || text.find_first_not_of("0123456789.") != std::string::npos) return false;
  char* end = nullptr;
  const double p = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size() || p < 0 || p > 1) return false;
  *out = p;
  return true;
}

std::string formatProbability(double p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", p);
  return buf;
}

}  // namespace

Result<FaultSpec> FaultParser::parse(std::string_view s) {
  FaultSpec f;
  std::string seen = ",";
  s = trimSpace(s);
  while (!s.empty()) {
    auto comma = s.find(',');
    std::string_view token = trimSpace(s.substr(0, comma));
    s = comma == std::string_view::npos ? std::string_view() : s.substr(comma + 1);
    auto eq = token.find('=');
    if (eq == std::string_view::npos) return bad(token, "expected key=value");
    std::string_view key = trimSpace(token.substr(0, eq)), value = trimSpace(token.substr(eq + 1));
    const std::string tag = "," + std::string(key) + ",";
    if (seen.find(tag) != std::string::npos) return bad(token, "given twice");
    seen += std::string(key) + ",";
    double* probability = key == "drop"               ? &f.drop
                          : key == "dup"              ? &f.dup
                          : key == "corrupt"          ? &f.corrupt
                          : key == "reject"           ? &f.reject
                          : key == "lose_remote_done" ? &f.loseRemoteDone
                          : key == "stall"            ? &f.stall
                                                      : nullptr;
    if (probability != nullptr) {
      if (!parseProbability(value, probability))
        return bad(token, "expected a probability from 0 to 1");
    } else if (key == "delay" || key == "lane_fail") {
      const bool delay = key == "delay";
      auto colon = value.find(':');
      if (value.substr(0, 4) != "lane" || colon == std::string_view::npos)
        return bad(token, delay ? "expected delay=laneN:DURATION" : "expected lane_fail=laneN:K");
      auto lane = parseUnsigned(value.substr(4, colon - 4));
      if (!lane.ok() || *lane > 15) return bad(token, "expected a lane from 0 to 15");
      if (delay) {
        auto d = DurationParser::parse(value.substr(colon + 1));
        if (!d.ok()) return bad(token, std::string("expected ") + DurationParser::allowed());
        f.delayLane = static_cast<int>(*lane);
        f.delay = *d;
      } else {
        auto k = parseUnsigned(value.substr(colon + 1));
        if (!k.ok()) return bad(token, "expected the pieces posted before the lane fails (an unsigned integer)");
        f.failLane = static_cast<int>(*lane);
        f.failAfter = *k;
      }
    } else if (key == "epoch_skew") {
      auto v = parseUnsigned(value);
      if (!v.ok()) return bad(token, "expected an unsigned integer");
      f.epochSkew = *v;
    } else if (key == "kill_after") {
      auto d = DurationParser::parse(value);
      if (!d.ok() || d->count() == 0) return bad(token, std::string("expected ") + DurationParser::allowed());
      f.killAfter = *d;
    } else if (key == "seed") {
      auto v = parseUnsigned(value);
      if (!v.ok()) return bad(token, "expected an unsigned integer seed");
      f.seed = *v;
    } else {
      return bad(token, "unknown fault; expected drop, dup, corrupt, reject, lose_remote_done, "
                        "stall, delay, lane_fail, epoch_skew, kill_after or seed");
    }
  }
  return f;
}

std::string FaultSpec::describe() const {
  if (!active()) return "none";
  std::string out;
  const auto add = [&](const std::string& item) { out += (out.empty() ? "" : ",") + item; };
  const std::pair<const char*, double> probabilities[] = {
      {"drop", drop}, {"dup", dup}, {"corrupt", corrupt}, {"reject", reject},
      {"lose_remote_done", loseRemoteDone}, {"stall", stall}};
  for (const auto& [name, p] : probabilities) {
    if (p > 0) add(std::string(name) + "=" + formatProbability(p));
  }
  if (delayLane >= 0) add("delay=lane" + std::to_string(delayLane) + ":" + formatDuration(delay));
  if (failLane >= 0) add("lane_fail=lane" + std::to_string(failLane) + ":" + std::to_string(failAfter));
  if (epochSkew > 0) add("epoch_skew=" + std::to_string(epochSkew));
  if (killAfter.count() > 0) add("kill_after=" + formatDuration(killAfter));
  add("seed=" + std::to_string(seed));
  return out;
}

void armKillAfter(const FaultSpec& spec) {
  if (spec.killAfter.count() <= 0) return;
  static std::once_flag once;
  std::call_once(once, [after = spec.killAfter] {
    std::thread([after] {
      std::this_thread::sleep_for(after);
      ::kill(::getpid(), SIGKILL);
    }).detach();
  });
}

}  // namespace pact
