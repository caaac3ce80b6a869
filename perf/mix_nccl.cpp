// `pact-perf mix --face nccl`: options, the phases and the report; the streams are in
// mix_nccl_flow.cpp, a class's plugin instance and comm in mix_nccl_link.cpp. Options are parsed
// before the fork, so both ranks run the same phases with the same plans; only handles, the
// streams' control messages and rank 1's measurements cross the control channel (peer.h).
#include "mix_nccl.h"

#include "mix_nccl_flow.h"
#include "mix_nccl_link.h"
#include "peer.h"
#include "report.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <regex>
#include <string>
#include <vector>

namespace pact::perf {
namespace {

constexpr double kLatencyTarget = 1.5;  // B's P99 mixed / alone, at most
constexpr double kGoodputTarget = 0.9;  // A's goodput in `bulk` / the link's rate, at least
constexpr long kWarmBulk = 2, kWarmLatency = 10;  // warm-up messages per fresh comm, not counted

// tc's rate syntax (ci/netns.sh --rate): a decimal number with bit, kbit, mbit or gbit.
std::optional<double> parseRate(const std::string& text) {
  static const std::regex re(R"(^([0-9]+(\.[0-9]+)?)(bit|kbit|mbit|gbit)$)");
  std::smatch m;
  if (!std::regex_match(text, m, re)) return std::nullopt;
  const std::string unit = m[3];
  const double mult = unit == "bit" ? 1 : unit == "kbit" ? 1e3 : unit == "mbit" ? 1e6 : 1e9;
  const double bps = std::stod(m[1]) * mult;
  if (bps <= 0) return std::nullopt;
  return bps;
}

std::string profileVar(int tc) {
  return tc >= 0 && tc <= 255 ? "PACT_TC_" + std::to_string(tc) : "PACT_TC_DEFAULT";
}

nlohmann::json envOrNull(const std::string& name) {
  const char* v = std::getenv(name.c_str());
  return v ? nlohmann::json(v) : nlohmann::json(nullptr);
}

// The first three fields of /proc/loadavg: a run on a busy machine says so (each rank polls a core
// of its own, as NCCL's proxy does, so other work there shows in the latencies).
std::string loadAverage() {
  std::FILE* f = std::fopen("/proc/loadavg", "r");
  if (f == nullptr) return "?";
  char a[16] = "?", b[16] = "?", c[16] = "?";
  const int n = std::fscanf(f, "%15s %15s %15s", a, b, c);
  std::fclose(f);
  return n == 3 ? std::string(a) + " " + b + " " + c : "?";
}

struct Phase {
  std::string name;
  bool bulk, latency;
};

// One phase on this rank: fresh comms for the streams it runs, a counted warm-up, the timed run,
// the comms closed. Returns rank 1's measurements.
FlowResult runPhase(const MixNcclOptions& o, const Phase& ph, int index, ClassLink& bulk,
                    ClassLink& lat, const HostBuffer& bulk_buf, const HostBuffer& lat_buf,
                    size_t bulk_bytes, size_t lat_bytes, int rank) {
  watchdog(o.timeout, "connect");
  if (ph.bulk) bulk.connect(rank, o.dev, bulk_buf);
  if (ph.latency) lat.connect(rank, o.dev, lat_buf);
  barrier();
  const FlowLinks links{ph.bulk ? &bulk : nullptr, &bulk_buf, ph.latency ? &lat : nullptr, &lat_buf};
  FlowPlan plan;
  plan.bulk = ph.bulk;
  plan.latency = ph.latency;
  plan.bulk_bytes = bulk_bytes;
  plan.latency_bytes = lat_bytes;
  plan.bulk_window = o.bulk_window;
  plan.timeout = o.timeout;
  // Warm-up: a fresh comm's first messages set up what it needs (wire-up, the first
  // rendezvous); they are checked, not counted.
  plan.bulk_count = kWarmBulk;
  plan.latency_count = kWarmLatency;
  plan.seq0 = static_cast<uint64_t>(2 * index) << 32;
  const std::string label = "phase " + ph.name, warm = "warm-up of phase " + ph.name;
  plan.run = warm.c_str();
  watchdog(o.timeout, "warm-up");
  (void)runFlow(plan, links, rank);
  plan.seconds = o.seconds;
  plan.seq0 = static_cast<uint64_t>(2 * index + 1) << 32;
  plan.run = label.c_str();
  plan.inject_bulk = o.inject == "bulk";
  plan.inject_latency = o.inject == "latency";
  watchdog(static_cast<unsigned>(std::ceil(o.seconds)) + o.timeout, "phase");
  const FlowResult r = runFlow(plan, links, rank);
  watchdog(o.timeout, "close comms");
  barrier();  // nothing in flight on either side past this point
  if (ph.bulk) bulk.close();
  if (ph.latency) lat.close();
  barrier();
  return r;
}

}  // namespace

int runMixNccl(MixNcclOptions o) {
  auto usage = [](const std::string& msg) {
    std::fprintf(stderr, "pact-perf mix: %s\n", msg.c_str());
    return 2;
  };
  if (o.plugin.empty()) o.plugin = defaultPluginPath();
  size_t bulk_bytes = 0, lat_bytes = 0;
  for (auto [text, out] : {std::pair{&o.bulk_bytes, &bulk_bytes}, {&o.latency_bytes, &lat_bytes}}) {
    if (!parseSize(*text, out) || *out < 16 || *out % 8 != 0 || *out > (1ull << 31) - 8)
      return usage("size '" + *text + "': give a multiple of 8 bytes, at least 16, below 2G (e.g. 256K)");
  }
  std::vector<Phase> phases;
  for (size_t a = 0; a <= o.phases.size();) {
    const size_t b = std::min(o.phases.find(',', a), o.phases.size());
    const std::string p = o.phases.substr(a, b - a);
    if (p != "alone" && p != "bulk" && p != "mixed")
      return usage("--phases: '" + p + "' is not alone, bulk or mixed (--face nccl)");
    phases.push_back({p, p != "alone", p != "bulk"});
    a = b + 1;
  }
  std::optional<double> link_bps;
  if (!o.link_rate.empty() && !(link_bps = parseRate(o.link_rate)))
    return usage("--link-rate '" + o.link_rate + "': expected a number with bit, kbit, mbit or gbit (e.g. 1gbit)");
  if (!o.inject.empty() && o.inject != "bulk" && o.inject != "latency")
    return usage("--inject-wrong-byte '" + o.inject + "': expected bulk or latency");
  if (o.plugin.find('/') != std::string::npos && access(o.plugin.c_str(), R_OK) != 0)
    return usage("cannot read plugin " + o.plugin + " (build it, or pass --plugin)");

  checkRankSetup(o.ranks);
  const int rank = forkPeer();
  enterRankSetup(o.ranks, rank);
  watchdog(o.timeout, "plugin open/init");
  auto bulk = std::make_unique<ClassLink>("bulk", o.bulk_tc);
  auto lat = std::make_unique<ClassLink>("latency", o.latency_tc);
  bulk->open(o.plugin, o.version, o.verbose);
  lat->open(o.plugin, o.version, o.verbose);
  int ndev = 0;
  check(bulk->net().devices(&ndev), "devices");
  if (o.dev < 0 || o.dev >= ndev)
    die("device " + std::to_string(o.dev) + " out of range (plugin has " + std::to_string(ndev) + ")");
  loader::Properties props;
  check(bulk->net().getProperties(o.dev, &props), "getProperties");
  if (bulk_bytes > props.maxP2pBytes || lat_bytes > props.maxP2pBytes)
    die("a message is larger than the device's maxP2pBytes (" + formatSize(props.maxP2pBytes) + ")");
  const HostBuffer bulk_buf(bulk_bytes * static_cast<size_t>(o.bulk_window));
  const HostBuffer lat_buf(lat_bytes);

  const std::string var_a = profileVar(o.bulk_tc), var_b = profileVar(o.latency_tc);
  const char* tls = std::getenv("UCX_TLS");
  const std::string load_start = loadAverage();
  if (rank == 0) {
    auto prof = [](const std::string& var) {
      const char* v = std::getenv(var.c_str());
      return var + "=" + (v ? std::string("\"") + v + "\"" : std::string("(unset)"));
    };
    std::printf("# pact-perf mix --face nccl: plugin %s (%s, v%d) dev %d %s, %d Mbps; %.1f s per phase\n"
                "# bulk: class %d (%s), %s messages, window %d; latency: class %d (%s), %s one at a time\n"
                "# UCX_TLS=%s; netns %s; link rate %s; load %s\n",
                bulk->net().name() ? bulk->net().name() : "?", o.plugin.c_str(), bulk->net().version(),
                o.dev, props.name.c_str(), props.speed, o.seconds, o.bulk_tc, prof(var_a).c_str(),
                formatSize(bulk_bytes).c_str(), o.bulk_window, o.latency_tc, prof(var_b).c_str(),
                formatSize(lat_bytes).c_str(), tls ? tls : "(unset)",
                o.ranks.netns.empty() ? "-" : (o.ranks.netns[0] + "|" + o.ranks.netns[1]).c_str(),
                o.link_rate.empty() ? "not given" : o.link_rate.c_str(), load_start.c_str());
    std::printf("%-7s %-8s %5s %8s %9s %9s %9s %9s %9s %9s\n", "phase", "stream", "class", "count",
                "Gbit/s", "GB/s", "p50_ms", "p95_ms", "p99_ms", "max_ms");
    std::fflush(stdout);
  }

  nlohmann::json rows = nlohmann::json::array();
  std::string failure;
  std::optional<double> p99_alone, p99_mixed, p50_alone, p50_mixed, gp_bulk, gp_mixed;
  for (size_t i = 0; i < phases.size(); ++i) {
    const Phase& ph = phases[i];
    const FlowResult r = runPhase(o, ph, static_cast<int>(i), *bulk, *lat, bulk_buf, lat_buf, bulk_bytes,
                                  lat_bytes, rank);
    if (rank != 0) continue;
    if (ph.latency) {
      const double gbit = r.latency_bytes_per_s * 8 / 1e9;
      std::printf("%-7s %-8s %5d %8ld %9.3f %9.3f %9.3f %9.3f %9.3f %9.3f\n", ph.name.c_str(), "latency",
                  o.latency_tc, r.latency_count, gbit, r.latency_bytes_per_s / 1e9, r.latency_p50_ms,
                  r.latency_p95_ms, r.latency_p99_ms, r.latency_max_ms);
      rows.push_back({{"phase", ph.name}, {"stream", "latency"}, {"class", o.latency_tc},
                      {"count", r.latency_count}, {"bytes", lat_bytes}, {"goodput_gbit_s", gbit},
                      {"goodput_gbps", r.latency_bytes_per_s / 1e9}, {"p50_ms", r.latency_p50_ms},
                      {"p95_ms", r.latency_p95_ms}, {"p99_ms", r.latency_p99_ms},
                      {"max_ms", r.latency_max_ms}, {"checked", r.latency_checked}});
      if (r.latency_count == 0 && failure.empty())
        failure = ph.name + ": no latency message was posted and received in the phase";
      if (ph.name == "alone") p99_alone = r.latency_p99_ms, p50_alone = r.latency_p50_ms;
      if (ph.name == "mixed") p99_mixed = r.latency_p99_ms, p50_mixed = r.latency_p50_ms;
    }
    if (ph.bulk) {
      const double gbit = r.bulk_bytes_per_s * 8 / 1e9;
      std::printf("%-7s %-8s %5d %8ld %9.3f %9.3f %9s %9s %9s %9s\n", ph.name.c_str(), "bulk", o.bulk_tc,
                  r.bulk_count, gbit, r.bulk_bytes_per_s / 1e9, "-", "-", "-", "-");
      rows.push_back({{"phase", ph.name}, {"stream", "bulk"}, {"class", o.bulk_tc}, {"count", r.bulk_count},
                      {"bytes", bulk_bytes}, {"goodput_gbit_s", gbit}, {"goodput_gbps", r.bulk_bytes_per_s / 1e9},
                      {"p50_ms", nullptr}, {"p95_ms", nullptr}, {"p99_ms", nullptr}, {"max_ms", nullptr},
                      {"checked", r.bulk_checked}});
      if (r.bulk_count == 0 && failure.empty())
        failure = ph.name + ": no bulk message completed in the phase";
      if (ph.name == "bulk") gp_bulk = r.bulk_bytes_per_s * 8;
      if (ph.name == "mixed") gp_mixed = r.bulk_bytes_per_s * 8;
    }
    std::fflush(stdout);
  }
  watchdog(o.timeout, "finalize");
  bulk.reset();  // finalize (v11+) and dlclose, the latency class's instance last
  lat.reset();
  watchdog(0, "done");
  if (rank == 1) {
    std::fflush(stdout);
    _exit(0);
  }

  // Ratios and the issue's two targets.
  nlohmann::json ratios = nlohmann::json::object(), targets = nlohmann::json::object();
  auto judge = [&](const char* key, const char* what, std::optional<double> v, const char* op,
                   double limit, const std::string& missing) {
    const bool le = std::string(op) == "<=";
    nlohmann::json t = {{"op", op}, {"limit", limit}, {"value", nullptr}, {"met", nullptr}};
    if (v) {
      ratios[key] = *v;
      const bool met = le ? *v <= limit : *v >= limit;
      t["value"] = *v;
      t["met"] = met;
      std::printf("# %s: %.2f (target %s %.1f: %s)\n", what, *v, op, limit, met ? "met" : "MISSED");
    } else {
      std::printf("# %s: not measured (%s; target %s %.1f)\n", what, missing.c_str(), op, limit);
    }
    targets[key] = t;
  };
  std::optional<double> lat_ratio, gp_ratio;
  if (p99_alone && p99_mixed && *p99_alone > 0) lat_ratio = *p99_mixed / *p99_alone;
  if (gp_bulk && link_bps) gp_ratio = *gp_bulk / *link_bps;
  judge("latency_p99_mixed_over_alone", "latency P99 mixed / alone", lat_ratio, "<=", kLatencyTarget,
        "needs the phases alone and mixed");
  judge("bulk_goodput_over_link", ("bulk goodput in `bulk` / link rate " + o.link_rate).c_str(), gp_ratio,
        ">=", kGoodputTarget, link_bps ? "needs the phase bulk" : "give --link-rate");
  if (p50_alone && p50_mixed && *p50_alone > 0) {
    ratios["latency_p50_mixed_over_alone"] = *p50_mixed / *p50_alone;
    std::printf("# latency P50 mixed / alone: %.2f\n", *p50_mixed / *p50_alone);
  }
  if (gp_bulk && gp_mixed && *gp_bulk > 0) {
    ratios["bulk_goodput_mixed_over_bulk"] = *gp_mixed / *gp_bulk;
    std::printf("# bulk goodput mixed / bulk: %.2f\n", *gp_mixed / *gp_bulk);
  }
  const std::string load_end = loadAverage();
  std::printf("# load at the end %s\n", load_end.c_str());
  const bool pass = failure.empty();
  if (pass)
    std::printf("# mix --face nccl: every message completed, every byte checked and right\n");
  else
    std::printf("# mix --face nccl: FAILED: %s\n", failure.c_str());
  std::fflush(stdout);

  nlohmann::json doc;  // only when --json or --plot asks for it
  if (!o.json.empty() || !o.plot.empty()) {
    nlohmann::json meta = {
        {"tool", "pact-perf mix"}, {"face", "nccl"}, {"plugin_path", o.plugin},
        {"version", o.version}, {"dev", o.dev}, {"dev_name", props.name},
        {"dev_speed_mbps", props.speed}, {"seconds", o.seconds}, {"phases", o.phases},
        {"bulk_tc", o.bulk_tc}, {"bulk_bytes", bulk_bytes}, {"bulk_window", o.bulk_window},
        {"latency_tc", o.latency_tc}, {"latency_bytes", lat_bytes},
        {"bulk_profile_var", var_a}, {"bulk_profile", envOrNull(var_a)},
        {"latency_profile_var", var_b}, {"latency_profile", envOrNull(var_b)},
        {"PACT_TC_DEFAULT", envOrNull("PACT_TC_DEFAULT")}, {"UCX_TLS", envOrNull("UCX_TLS")},
        {"netns", o.ranks.netns}, {"env_a", o.ranks.env_a}, {"env_b", o.ranks.env_b},
        {"link_rate", o.link_rate.empty() ? nlohmann::json(nullptr) : nlohmann::json(o.link_rate)},
        {"link_rate_bps", link_bps ? nlohmann::json(*link_bps) : nlohmann::json(nullptr)},
        {"load_start", load_start}, {"load_end", load_end}, {"pass", pass}, {"failure", failure}};
    doc = {{"meta", meta}, {"results", rows}, {"ratios", ratios}, {"targets", targets}};
  }
  return finishRun(pass ? 0 : 1, "pact-perf mix", doc, o.json, o.plot);
}

std::vector<CLI::Option*> addMixNcclOptions(CLI::App& c, MixNcclOptions* o) {
  std::vector<CLI::Option*> own;
  own.push_back(c.add_option("--plugin", o->plugin,
                             "--face nccl: NCCL net plugin .so (default: <exe dir>/../plugin/libnccl-net-pact.so)"));
  own.push_back(c.add_option("--abi", o->version, "--face nccl: ncclNetPlugin_vN to use (10..12; 0 = newest)")
                    ->check(CLI::Range(0, 12)));
  own.push_back(c.add_option("--dev", o->dev, "--face nccl: plugin device index")->capture_default_str());
  own.push_back(c.add_option("--netns", o->ranks.netns,
                             "--face nccl: A,B: rank 0 (sender) enters network namespace A, rank 1 B")
                    ->delimiter(','));
  own.push_back(c.add_option("--env-a", o->ranks.env_a, "--face nccl: KEY=VALUE set in rank 0 (repeatable)"));
  own.push_back(c.add_option("--env-b", o->ranks.env_b, "--face nccl: KEY=VALUE set in rank 1 (repeatable)"));
  own.push_back(c.add_option("--bulk-tc", o->bulk_tc, "--face nccl: trafficClass of the bulk stream (class A)")
                    ->check(CLI::Range(-1, 255))
                    ->capture_default_str());
  own.push_back(c.add_option("--latency-tc", o->latency_tc,
                             "--face nccl: trafficClass of the latency stream (class B)")
                    ->check(CLI::Range(-1, 255))
                    ->capture_default_str());
  own.push_back(c.add_option("--bulk-bytes", o->bulk_bytes, "--face nccl: bytes of each bulk message")
                    ->capture_default_str());
  own.push_back(c.add_option("--bulk-window", o->bulk_window,
                             "--face nccl: bulk messages in flight, each in its own registered slot")
                    ->check(CLI::Range(1, 32))
                    ->capture_default_str());
  own.push_back(c.add_option("--latency-bytes", o->latency_bytes,
                             "--face nccl: bytes of each latency message (one at a time)")
                    ->capture_default_str());
  own.push_back(c.add_option("--link-rate", o->link_rate,
                             "--face nccl: the link's rate (tc syntax, e.g. 1gbit): judges the bulk goodput"));
  own.push_back(c.add_option("--timeout", o->timeout, "--face nccl: watchdog seconds per step")
                    ->capture_default_str());
  own.push_back(c.add_flag("-v,--verbose", o->verbose, "--face nccl: print the plugin's INFO/TRACE log lines"));
  own.push_back(c.add_option("--inject-wrong-byte", o->inject,
                             "--face nccl: flip a byte of the first timed message of this stream "
                             "(bulk or latency) at the sender: the receiver's check must fail the run"));
  return own;
}

}  // namespace pact::perf
