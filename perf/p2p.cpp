// `pact-perf p2p`: options, orchestration and output; the data path is in p2p_bench.cpp.
// Options and per-size plans are computed identically in both processes (they fork after
// parsing), so only handles, barriers and the receiver's bandwidth results cross the control
// channel.
#include "p2p.h"

#include "net_plugin.h"
#include "p2p_bench.h"
#include "peer.h"
#include "report.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace pact::perf {
namespace {

using loader::NetPlugin;

std::string defaultPluginPath() {
  std::error_code ec;
  auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return "libnccl-net-pact.so";
  return (exe.parent_path() / ".." / "plugin" / "libnccl-net-pact.so").lexically_normal().string();
}

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
          {"UCX_TLS", tls ? nlohmann::json(tls) : nlohmann::json(nullptr)}};
}

std::vector<size_t> parseSweep(const std::string& lo, const std::string& hi, size_t factor,
                               const char* what) {
  size_t a = 0, b = 0;
  if (!parseSize(lo, &a) || !parseSize(hi, &b)) die(std::string("bad ") + what + " size");
  auto v = sweep(a, b, factor);
  if (v.empty()) die(std::string("empty ") + what + " sweep (need 0 < min <= max, factor >= 2)");
  return v;
}

int runP2p(P2pOptions opt) {
  if (opt.plugin.empty()) opt.plugin = defaultPluginPath();
  if (opt.window < 1) die("--window must be >= 1");
  size_t budget = 0;
  if (!parseSize(opt.budget, &budget) || budget == 0) die("bad --budget");
  std::vector<size_t> bw, lat;
  if (!opt.no_bw) bw = parseSweep(opt.min_size, opt.max_size, opt.factor, "bandwidth");
  if (!opt.no_lat) lat = parseSweep(opt.lat_min, opt.lat_max, opt.lat_factor, "latency");
  if (opt.verify && !bw.empty()) {
    // A slot is reused only after its message completed, so verified data cannot be overwritten.
    opt.window = static_cast<int>(slotCount(opt, bw.back()));
  }

  // Catch the common mistake once, before there are two processes to report it.
  if (opt.plugin.find('/') != std::string::npos && access(opt.plugin.c_str(), R_OK) != 0) {
    die("cannot read plugin " + opt.plugin + " (build it, or pass --plugin)");
  }
  const int rank = forkPeer();
  Session s(opt, rank);
  watchdog(opt.timeout, "plugin open/init");
  std::string err;
  s.net = NetPlugin::open(opt.plugin, opt.version, &err);
  if (!s.net) die(err);
  check(s.net->init(opt.tc, !opt.verbose), "init");
  int ndev = 0;
  check(s.net->devices(&ndev), "devices");
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
  for (size_t z : bw) runBandwidth(s, z, budget, &rowFor(z));
  for (size_t z : lat) runLatency(s, z, &rowFor(z));
  teardown(s);
  nlohmann::json meta = metadata(s, props, budget);
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
  int rc = 0;
  if (!opt.json.empty() && !writeJson(opt.json, toJson(meta, rows), &err)) {
    std::fprintf(stderr, "pact-perf: %s\n", err.c_str());
    rc = 1;
  }
  if (!reapPeer()) {
    std::fprintf(stderr, "pact-perf: peer process failed\n");
    rc = 1;
  }
  return rc;
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
  c->add_option("--version", o->version, "ncclNetPlugin_vN to use; 0 = newest exported")
      ->check(CLI::Range(0, 12));
  c->add_option("--dev", o->dev, "plugin device index")->capture_default_str();
  c->add_option("--min-size", o->min_size, "smallest bandwidth message")
      ->check(sizeCheck)
      ->capture_default_str();
  c->add_option("--max-size", o->max_size, "largest bandwidth message")
      ->check(sizeCheck)
      ->capture_default_str();
  c->add_option("--factor", o->factor, "bandwidth size step")
      ->check(CLI::Range(2, 1024))
      ->capture_default_str();
  c->add_option("--window", o->window, "outstanding sends/receives")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  c->add_option("--iters", o->iters, "measured messages per size (default: --budget bytes, >= 5)");
  c->add_option("--budget", o->budget, "bytes per bandwidth size when --iters is not given")
      ->check(sizeCheck)
      ->capture_default_str();
  c->add_option("--max-iters", o->max_iters, "cap on budget-derived iterations")
      ->capture_default_str();
  c->add_option("--lat-iters", o->lat_iters,
                "ping-pongs per size (default 1000, fewer above 64K, >= 50)");
  c->add_option("--lat-min-size", o->lat_min, "smallest latency message")
      ->check(sizeCheck)
      ->capture_default_str();
  c->add_option("--lat-max-size", o->lat_max, "largest latency message")
      ->check(sizeCheck)
      ->capture_default_str();
  c->add_option("--lat-factor", o->lat_factor, "latency size step")
      ->check(CLI::Range(2, 1024))
      ->capture_default_str();
  c->add_option("--tc", o->tc, "trafficClass passed to init (v11+) / connect (v10)")
      ->capture_default_str();
  c->add_option("--timeout", o->timeout, "watchdog seconds per step")->capture_default_str();
  c->add_option("--json", o->json, "also write the results to this JSON file");
  c->add_flag("--no-bw", o->no_bw, "skip the bandwidth sweep");
  c->add_flag("--no-lat", o->no_lat, "skip the latency sweep");
  c->add_flag("--verify", o->verify, "check every payload byte on the receiver (slows the sender)");
  c->add_flag("-v,--verbose", o->verbose, "print the plugin's INFO/TRACE log lines");
  c->footer(
      "Bandwidth: GB/s (1e9 B/s) measured at the receiver over the timed messages of each size,\n"
      "after a warmup of iters/10 (1..1000); bw_pNN = gap between consecutive receive\n"
      "completions in us (its mean is size/bandwidth; the tail shows stalls).\n"
      "Latency: ping-pong over two comms; one-way = RTT/2; percentiles over --lat-iters.\n"
      "Rank 1 is a child forked before the plugin is opened; both ranks open it themselves.");
  c->callback([o, exit_code] { *exit_code = runP2p(*o); });
}

}  // namespace pact::perf