#include "kv_breakdown.h"

#include <algorithm>
#include <array>
#include <map>
#include <tuple>

#include "report.h"

namespace pact::perf::kv {
namespace {

constexpr uint8_t kReceiver = 0, kSender = 1;
constexpr size_t kPhases = 5;
constexpr std::array<const char*, kPhases> kNames = {
    "waiting for the receiver", "waiting for credit", "on the wire", "landed to verified",
    "verified to committed"};

// The milestones that end each phase: (role, state entered); the start is the sender's first event.
constexpr std::array<std::pair<uint8_t, uint8_t>, kPhases> kEnds = {{
    {kReceiver, PACT_STATE_ALLOCATED},
    {kReceiver, PACT_STATE_ADVERTISED},
    {kReceiver, PACT_STATE_REMOTE_DONE},
    {kReceiver, PACT_STATE_VERIFIED},
    {kReceiver, PACT_STATE_COMMITTED},
}};

using Key = std::tuple<uint64_t, uint64_t, uint64_t, uint32_t>;

struct Seen {
  uint64_t start = 0;                    // the sender's first event
  std::array<uint64_t, kPhases> end{};  // first time each milestone was reached (0: never)
};

}  // namespace

nlohmann::json breakdown(const std::vector<pact_event_t>& events, std::FILE* out) {
  std::map<Key, Seen> byKey;
  for (const pact_event_t& e : events) {
    Seen& s = byKey[Key{e.key.request_id, e.key.transfer_id, e.key.model_epoch, e.key.generation}];
    if (e.role == kSender && (s.start == 0 || e.time_ns < s.start)) s.start = e.time_ns;
    for (size_t i = 0; i < kPhases; ++i)
      if (e.role == kEnds[i].first && e.state == kEnds[i].second && (s.end[i] == 0 || e.time_ns < s.end[i]))
        s.end[i] = e.time_ns;
  }
  std::array<std::vector<double>, kPhases> phase;
  std::vector<double> total;
  std::vector<std::array<double, kPhases>> perRequest;
  size_t incomplete = 0;
  for (const auto& [k, s] : byKey) {
    if (s.start == 0 || s.end[kPhases - 1] == 0) {  // not committed, or its events overwritten
      ++incomplete;
      continue;
    }
    std::array<double, kPhases> us{};
    uint64_t at = s.start;
    for (size_t i = 0; i < kPhases; ++i) {
      const uint64_t t = std::max(at, s.end[i] == 0 ? at : s.end[i]);  // skipped: no time
      us[i] = static_cast<double>(t - at) / 1e3;
      at = t;
    }
    for (size_t i = 0; i < kPhases; ++i) phase[i].push_back(us[i]);
    total.push_back(static_cast<double>(at - s.start) / 1e3);
    perRequest.push_back(us);
  }
  nlohmann::json j = {{"requests", total.size()}, {"incomplete", incomplete}};
  auto stats = [](std::vector<double> v) {
    double sum = 0;
    for (double x : v) sum += x;
    const Percentiles p = percentiles(v);
    return nlohmann::json{{"p50_us", p.p50}, {"p95_us", p.p95}, {"p99_us", p.p99},
                          {"mean_us", v.empty() ? 0.0 : sum / static_cast<double>(v.size())}};
  };
  std::fprintf(out, "breakdown (us, %zu committed requests; %zu without a full trace)\n", total.size(), incomplete);
  std::fprintf(out, "%-26s %10s %10s %10s %10s %12s\n", "phase", "p50", "p95", "p99", "mean", "share@p99");
  // The slowest 1%: the requests whose total is at or above the total's P99.
  std::vector<double> sorted = total;
  const double p99 = percentiles(sorted).p99;
  std::array<double, kPhases> share{};
  size_t slow = 0;
  for (size_t r = 0; r < perRequest.size(); ++r) {
    if (total[r] < p99 || total[r] <= 0) continue;
    ++slow;
    for (size_t i = 0; i < kPhases; ++i) share[i] += perRequest[r][i] / total[r];
  }
  size_t dominant = 0;
  for (size_t i = 0; i < kPhases; ++i) {
    if (slow > 0) share[i] /= static_cast<double>(slow);
    if (share[i] > share[dominant]) dominant = i;
    const nlohmann::json st = stats(phase[i]);
    j["phases"][kNames[i]] = st;
    j["shares_at_p99"][kNames[i]] = share[i];
    std::fprintf(out, "%-26s %10.1f %10.1f %10.1f %10.1f %11.0f%%\n", kNames[i], st["p50_us"].get<double>(),
                 st["p95_us"].get<double>(), st["p99_us"].get<double>(), st["mean_us"].get<double>(),
                 100 * share[i]);
  }
  const nlohmann::json tot = stats(total);
  j["total"] = tot;
  std::fprintf(out, "%-26s %10.1f %10.1f %10.1f %10.1f\n", "send to commit (TTFT-like)", tot["p50_us"].get<double>(),
               tot["p95_us"].get<double>(), tot["p99_us"].get<double>(), tot["mean_us"].get<double>());
  if (slow > 0) {
    j["dominant_at_p99"] = kNames[dominant];
    std::fprintf(out, "# the slowest 1%% (%zu requests) spent %.0f%% of their time %s\n", slow,
                 100 * share[dominant], kNames[dominant]);
  } else {
    j["dominant_at_p99"] = nullptr;
  }
  return j;
}

}  // namespace pact::perf::kv
