// `pact-perf p2p`: options, orchestration and output; the data path is in p2p_bench.cpp.
// Options and per-size plans are computed identically in both processes (they fork after
// parsing), so only handles, barriers and the receiver's bandwidth results cross the control
// channel.
#include "p2p.h"

#include "net_plugin.h"
#include "p2p_bench.h"
#include "peer.h"
#include "rank_setup.h"
#include "report.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "pact/nccl_ext.h"

#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace pact::perf {
namespace {

using loader::NetPlugin;

nlohmann::json metadata(const Session& s, const loader::Properties& props, size_t budget) {
  const char* tls = std::getenv("UCX_TLS");
  return {{"tool", "pact-perf p2p"},
          {"plugin_path", s.opt.plugin},
          {"plugin_name", s.net->name() ? s.net->name() : ""},
          {"version", s.net->version()},
          {"dev", s.opt.dev},
          {"dev_name", props.name},
          {"dev_speed_mbps", props.speed},
          {"window", s.opt.window},
          {"budget_bytes", budget},
          {"traffic_class", s.opt.tc},
          {"verify", s.opt.verify},
          {"UCX_TLS", tls ? nlohmann::json(tls) : nlohmann::json(nullptr)},
          {"netns", s.opt.netns},
          {"env_a", s.opt.env_a},
          {"env_b", s.opt.env_b},
          {"vdevice", s.opt.vdevice}};
}

// After init: fuses opt.vdevice into one virtual device and returns its index.
int makeVDevice(loader::NetPlugin& net, const P2pOptions& opt, int ndev) {
  if (!net.hasMakeVDevice()) {
    die("--vdevice: plugin " + opt.plugin + " (ncclNetPlugin_v" + std::to_string(net.version()) +
        ") has no makeVDevice (v9+ with a non-NULL makeVDevice is needed)");
  }
  for (int m : opt.vdevice) {
    if (m < 0 || m >= ndev) {
      die("--vdevice: member " + std::to_string(m) + " out of range (plugin has " +
          std::to_string(ndev) + " devices)");
    }
  }
  int d = -1;
  check(net.makeVDevice(&d, static_cast<int>(opt.vdevice.size()), opt.vdevice.data()),
        "makeVDevice");
  int n = 0;
  check(net.devices(&n), "devices");
  if (d < 0 || d >= n) die("makeVDevice returned device " + std::to_string(d) + " of " +
                           std::to_string(n));
  return d;
}

// The rank-0 send comm's pact_comm_stats (after the bandwidth sweep) as JSON; null when the plugin
// has no pact_comm_stats or it refuses the comm.
nlohmann::json sendStats(Session& s) {
  auto fn = reinterpret_cast<pact_comm_stats_fn>(s.net->symbol("pact_comm_stats"));
  pact_comm_stats_t st{};
  if (fn == nullptr || s.send_comm == nullptr || fn(s.send_comm, &st) != 0) return nullptr;
  const int lanes = std::clamp(st.lanes, 1, PACT_MAX_LANES);
  std::vector<uint64_t> bytes(st.lane_bytes, st.lane_bytes + lanes);
  std::vector<uint64_t> pieces(st.lane_pieces, st.lane_pieces + lanes);
  return {{"messages", st.messages}, {"pieces", st.pieces}, {"unordered", st.unordered},
          {"lanes", st.lanes}, {"chunk", st.chunk}, {"lane_bytes", bytes},
          {"lane_pieces", pieces}};
}

void printSendStats(const nlohmann::json& st) {
  if (st.is_null()) {
    std::printf("# lanes: the plugin has no pact_comm_stats for the send comm\n");
    return;
  }
  uint64_t total = 0;
  for (uint64_t b : st["lane_bytes"]) total += b;
  std::printf("# send comm after the bandwidth sweep: %s, %d lane(s), chunk %s, %" PRIu64
              " messages;", st["unordered"].get<int>() ? "unordered" : "ordered",
              st["lanes"].get<int>(), formatSize(st["chunk"].get<uint64_t>()).c_str(),
              st["messages"].get<uint64_t>());
  for (size_t i = 0; i < st["lane_bytes"].size(); ++i) {
    const uint64_t b = st["lane_bytes"][i];
    std::printf(" lane %zu %" PRIu64 " B (%.1f%%) %" PRIu64 " pieces%s", i, b,
                total ? 100.0 * static_cast<double>(b) / static_cast<double>(total) : 0.0,
                st["lane_pieces"][i].get<uint64_t>(), i + 1 < st["lane_bytes"].size() ? "," : "");
  }
  std::printf("\n");
}

std::vector<size_t> parseSweep(const std::string& lo, const std::string& hi, size_t factor,
                               const char* what) {
  size_t a = 0, b = 0;
  if (!parseSize(lo, &a) || !parseSize(hi, &b)) die(std::string("bad ") + what + " size");
  auto v = sweep(a, b, factor);
  if (v.empty()) die(std::string("empty ") + what + " sweep (need 0 < min <= max, factor >= 2)");
  return v;
}

// Latency runs at the sweep's sizes up to --lat-max-size, or over a sweep of its own when
// --lat-min-size or --lat-factor asks for one.
std::vector<size_t> latencySizes(const P2pOptions& o) {
  if (!o.lat_min.empty() || o.lat_factor != 0) {
    return parseSweep(o.lat_min.empty() ? "8" : o.lat_min, o.lat_max,
                      o.lat_factor != 0 ? o.lat_factor : 4, "latency");
  }
  size_t cap = 0;
  if (!parseSize(o.lat_max, &cap)) die("bad --lat-max-size");
  auto v = parseSweep(o.min_size, o.max_size, o.factor, "size");
  std::erase_if(v, [&](size_t z) { return z > cap; });
  return v;
}

int runP2p(P2pOptions opt) {
  if (opt.plugin.empty()) opt.plugin = defaultPluginPath();
  if (opt.window < 1) die("--window must be >= 1");
  size_t budget = 0;
  if (!parseSize(opt.budget, &budget) || budget == 0) die("bad --budget");
  std::vector<size_t> bw, lat;
  if (!opt.no_bw) bw = parseSweep(opt.min_size, opt.max_size, opt.factor, "size");
  if (!opt.no_lat) lat = latencySizes(opt);
  if (opt.buffers < 0) die("--buffers must be >= 0");
  if (opt.verify && opt.buffers > 0) die("--verify needs a buffer per outstanding message (no --buffers)");
  if (opt.verify && !bw.empty()) {
    // A slot is reused only after its message completed, so verified data cannot be overwritten.
    opt.window = static_cast<int>(slotCount(opt, bw.back()));
  }

  // Catch the common mistake once, before there are two processes to report it.
  if (opt.plugin.find('/') != std::string::npos && access(opt.plugin.c_str(), R_OK) != 0) {
    die("cannot read plugin " + opt.plugin + " (build it, or pass --plugin)");
  }
  const RankSetup ranks{opt.netns, opt.env_a, opt.env_b};
  checkRankSetup(ranks);
  const int rank = forkPeer();
  enterRankSetup(ranks, rank);
  Session s(opt, rank);
  watchdog(opt.timeout, "plugin open/init");
  std::string err;
  s.net = NetPlugin::open(opt.plugin, opt.version, &err);
  if (!s.net) die(err);
  check(s.net->init(opt.tc, !opt.verbose), "init");
  int ndev = 0;
  check(s.net->devices(&ndev), "devices");
  if (!opt.vdevice.empty()) {
    opt.dev = makeVDevice(*s.net, opt, ndev);
    check(s.net->devices(&ndev), "devices");
  }
  if (opt.dev < 0 || opt.dev >= ndev) {
    die("device " + std::to_string(opt.dev) + " out of range (plugin has " + std::to_string(ndev) +
        ")");
  }
  loader::Properties props;
  check(s.net->getProperties(opt.dev, &props), "getProperties");
  std::erase_if(bw, [&](size_t z) { return z > props.maxP2pBytes; });
  std::erase_if(lat, [&](size_t z) { return z > props.maxP2pBytes; });
  if (rank == 0) {
    std::printf("# plugin %s (%s, v%d) dev %d %s, %d Mbps, window %d, UCX_TLS=%s\n",
                s.net->name() ? s.net->name() : "?", opt.plugin.c_str(), s.net->version(), opt.dev,
                props.name.c_str(), props.speed, opt.window,
                std::getenv("UCX_TLS") ? std::getenv("UCX_TLS") : "(unset)");
    if (!opt.netns.empty() || !opt.vdevice.empty()) {
      std::string members;
      for (int m : opt.vdevice) members += (members.empty() ? "" : ",") + std::to_string(m);
      std::printf("# netns %s | %s, vdevice %s\n",
                  opt.netns.empty() ? "-" : opt.netns[0].c_str(),
                  opt.netns.empty() ? "-" : opt.netns[1].c_str(),
                  members.empty() ? "-" : (members + " -> dev " + std::to_string(opt.dev)).c_str());
    }
    std::fflush(stdout);
  }
  connectPair(s);
  registerBuffers(s, bw.empty() ? 0 : bw.back(), lat.empty() ? 0 : lat.back());

  std::vector<SizeRow> rows;
  auto rowFor = [&](size_t z) -> SizeRow& {
    for (SizeRow& r : rows)
      if (r.size == z) return r;
    rows.push_back(SizeRow{});
    rows.back().size = z;
    return rows.back();
  };
  // Rank 0's send comm carries the stream: its lane bytes per size (warmup included), if exported.
  nlohmann::json per_size = nlohmann::json::object();
  for (size_t z : bw) {
    nlohmann::json before = rank == 0 ? sendStats(s) : nlohmann::json(nullptr);
    runBandwidth(s, z, budget, &rowFor(z));
    nlohmann::json after = before.is_null() ? nlohmann::json(nullptr) : sendStats(s);
    if (after.is_null()) continue;
    std::vector<uint64_t> d = after["lane_bytes"];
    for (size_t i = 0; i < d.size() && i < before["lane_bytes"].size(); ++i)
      d[i] -= before["lane_bytes"][i].get<uint64_t>();
    per_size[formatSize(z)] = d;
  }
  nlohmann::json stats = rank == 0 && !bw.empty() ? sendStats(s) : nlohmann::json(nullptr);
  if (!stats.is_null()) stats["lane_bytes_per_size"] = per_size;
  for (size_t z : lat) runLatency(s, z, &rowFor(z));
  teardown(s);
  nlohmann::json meta = metadata(s, props, budget);
  meta["send_comm_stats"] = stats;
  watchdog(opt.timeout, "close");
  s.net.reset();  // dlclose
  watchdog(0, "done");
  if (rank == 1) {
    std::fflush(stdout);
    _exit(0);
  }
  std::sort(rows.begin(), rows.end(),
            [](const SizeRow& a, const SizeRow& b) { return a.size < b.size; });
  printTable(stdout, rows);
  if (opt.lane_stats && !bw.empty()) printSendStats(stats);
  std::fflush(stdout);
  // The document only when --json or --plot asks for it.
  const nlohmann::json doc = opt.json.empty() && opt.plot.empty() ? nlohmann::json() : toJson(meta, rows);
  return finishRun(0, "pact-perf", doc, opt.json, opt.plot);
}

}  // namespace

void addP2pCommand(CLI::App& app, int* exit_code) {
  auto o = std::make_shared<P2pOptions>();
  CLI::App* c =
      app.add_subcommand("p2p", "point-to-point bandwidth and latency through a net plugin");
  auto sizeCheck = CLI::Validator(
      [](std::string& v) {
        size_t n = 0;
        return parseSize(v, &n) ? std::string() : "not a size (e.g. 8, 4K, 1M, 1G): " + v;
      },
      "SIZE");
  c->add_option("--plugin", o->plugin,
                "NCCL net plugin .so (default: <exe dir>/../plugin/libnccl-net-pact.so)");
  c->add_option("--abi", o->version, "ncclNetPlugin_vN to use; 0 = newest exported")
      ->check(CLI::Range(0, 12));
  CLI::Option* dev = c->add_option("--dev", o->dev, "plugin device index")->capture_default_str();
  c->add_option("--vdevice", o->vdevice,
                "fuse these devices (e.g. 0,1) with makeVDevice after init and run on the result")
      ->delimiter(',')
      ->excludes(dev);
  c->add_option("--netns", o->netns,
                "A,B: rank 0 enters network namespace A, rank 1 enters B (/var/run/netns) before "
                "opening the plugin")
      ->delimiter(',');
  c->add_option("--env-a", o->env_a,
                "KEY=VALUE set in rank 0 before the plugin opens (repeatable)");
  c->add_option("--env-b", o->env_b,
                "KEY=VALUE set in rank 1 before the plugin opens (repeatable)");
  c->add_flag("--lane-stats", o->lane_stats,
              "print the send comm's per-lane bytes after the table (pact_comm_stats, if any)");
  c->add_option("-b,--minbytes,--min-size", o->min_size, "smallest message")
      ->check(sizeCheck)
      ->capture_default_str();
  c->add_option("-e,--maxbytes,--max-size", o->max_size, "largest message")
      ->check(sizeCheck)
      ->capture_default_str();
  c->add_option("-f,--stepfactor,--factor", o->factor, "size multiplier")
      ->check(CLI::Range(2, 1024))
      ->capture_default_str();
  c->add_option("--window", o->window, "outstanding sends/receives")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  c->add_option("--buffers", o->buffers,
                "bandwidth buffers per side, reused in turn (0 = one per outstanding message; "
                "1 = like ucx_perftest, keeps the data in cache)")
      ->check(CLI::Range(0, 1024))
      ->capture_default_str();
  c->add_option("-n,--iters", o->iters,
                "measured messages per bandwidth size (default: --budget bytes, >= 5)");
  c->add_option("--budget", o->budget, "bytes per bandwidth size when --iters is not given")
      ->check(sizeCheck)
      ->capture_default_str();
  c->add_option("--max-iters", o->max_iters, "cap on budget-derived iterations")
      ->capture_default_str();
  c->add_option("--lat-iters", o->lat_iters,
                "ping-pongs per size (default 1000, fewer above 64K, >= 50)");
  c->add_option("--lat-max-size", o->lat_max,
                "largest latency message (ping-pong above it measures bandwidth again)")
      ->check(sizeCheck)
      ->capture_default_str();
  c->add_option("--lat-min-size", o->lat_min,
                "give latency a sweep of its own, from this size (default: the -b/-e/-f sizes)")
      ->check(sizeCheck);
  c->add_option("--lat-factor", o->lat_factor,
                "step of latency's own sweep (default 4 when --lat-min-size is given)")
      ->check(CLI::Range(2, 1024));
  c->add_option("--tc", o->tc, "trafficClass passed to init (v11+) / connect (v10)")
      ->capture_default_str();
  c->add_option("--timeout", o->timeout, "watchdog seconds per step")->capture_default_str();
  c->add_option("--json", o->json, "also write the results to this JSON file");
  c->add_option("--plot", o->plot, "also draw the bandwidth against the size into this SVG file (pact-plot)");
  c->add_flag("--no-bw", o->no_bw, "skip the bandwidth sweep");
  c->add_flag("--no-lat", o->no_lat, "skip the latency sweep");
  c->add_flag("--verify", o->verify, "check every payload byte on the receiver (slows the sender)");
  c->add_flag("-v,--verbose", o->verbose, "print the plugin's INFO/TRACE log lines");
  c->footer(
      "Bandwidth: GB/s (1e9 B/s) measured at the receiver over the timed messages of each size,\n"
      "after a warmup of iters/10 (1..1000); bw_pNN = gap between consecutive receive\n"
      "completions in us (its mean is size/bandwidth; the tail shows stalls).\n"
      "Latency: ping-pong over two comms; one-way = RTT/2; percentiles over --lat-iters.\n"
      "Sizes follow nccl-tests: -b/-e/-f (the long names --min-size/--max-size/--factor work too);\n"
      "each table lists only the sizes it measured.\n"
      "Rank 1 is a child forked before the plugin is opened; both ranks open it themselves.\n"
      "--netns and --env-a/--env-b apply in each rank right after the fork (so each side can have\n"
      "its own PACT_NET_DEVICES); --netns needs root and namespaces made by `ip netns add`\n"
      "(e.g. ci/netns.sh up). perf/netns-rails.sh runs the multi-rail comparison with them.");
  c->callback([o, exit_code] { *exit_code = runP2p(*o); });
}

}  // namespace pact::perf