// `pact-perf scale`: see scale.h. Both processes run the same rounds (one per N and close order)
// in the same order, computed from the options before the fork; the control channel (peer.h)
// carries the handles, one status per phase from each side, and B's results.
//
// A round that fails (a plugin call's error, or a deadline) is reported with its step, comm and
// the plugin's last WARN line; both sides then close what they have and go on with the next round.
// Every wait has a deadline (--timeout-s); the watchdog (peer.h) ends the run only if a single
// plugin call blocks past twice that.
#include "scale.h"
#include "scale_round.h"

#include "net_plugin.h"
#include "peer.h"
#include "report.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "pact/nccl_ext.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace pact::perf {
namespace {

using loader::NetPlugin;
using nlohmann::json;
using namespace scale;

struct FreeDeleter {
  void operator()(char* p) const { std::free(p); }
};

// ---- output -------------------------------------------------------------------------------------

std::string mib(uint64_t bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f", static_cast<double>(bytes) / (1 << 20));
  return b;
}

std::string triple(const json& side, const char* key, bool as_mib) {
  std::string out;
  for (const char* when : {"before", "after_setup", "after_close"}) {
    if (!out.empty()) out += "/";
    const json& s = side[when];
    if (s.is_null()) {
      out += "-";
    } else if (as_mib) {
      out += mib(s[key].get<uint64_t>());
    } else {
      out += std::to_string(s[key].get<long>());
    }
  }
  return out;
}

std::string num(const json& v, const char* fmt) {
  if (v.is_null()) return "-";
  char b[32];
  std::snprintf(b, sizeof b, fmt, v.get<double>());
  return b;
}

void printHeader() {
  std::printf("%7s %-10s %-4s %9s %9s %8s %9s %8s %9s %20s %11s %20s %20s %10s\n", "comms", "order",
              "side", "setup_s", "comms/s", "reg_s", "msg_ms", "dereg_s", "close_s",
              "fds(0/setup/close)", "threads", "rss_MiB", "maps", "rss_B/comm");
  std::printf(
      "# 0/setup/close: before setup, after setup, after close. close_s*: not every comm "
      "was closed by the timed close (a failure or its deadline; the rest closed after)\n");
  std::fflush(stdout);
}

void printRound(const json& r) {
  for (const char* side : {"recv", "send"}) {
    const json& s = r[side];
    std::printf("%7ld %-10s %-4s %9s %9s %8s %9s %8s %8s%s %20s %11s %20s %20s %10s\n",
                r["comms"].get<long>(), r["order"].get<std::string>().c_str(), side,
                num(s["setup_s"], "%.3f").c_str(), num(s["comms_per_s"], "%.0f").c_str(),
                num(s["reg_s"], "%.3f").c_str(),
                s["message_s"].is_null()
                    ? "-"
                    : num(json(s["message_s"].get<double>() * 1e3), "%.2f").c_str(),
                num(s["dereg_s"], "%.3f").c_str(), num(s["close_s"], "%.3f").c_str(),
                s["comms_closed_in_order"].get<long>() < r["comms"].get<long>() ? "*" : " ",
                triple(s, "fds", false).c_str(), triple(s, "threads", false).c_str(),
                triple(s, "rss_bytes", true).c_str(), triple(s, "maps", false).c_str(),
                num(s["rss_per_comm_bytes"], "%.0f").c_str());
  }
  if (r["ok"].get<bool>()) {
    std::printf("#   round %ld %s: ok, message round %.2f ms (first isend to last completion)\n",
                r["comms"].get<long>(), r["order"].get<std::string>().c_str(),
                r["message_round_s"].get<double>() * 1e3);
  } else {
    const json& f = r["failed"];
    std::printf("#   round %ld %s: FAILED on the %s side at %s of comm %ld: %s\n",
                r["comms"].get<long>(), r["order"].get<std::string>().c_str(),
                f["side"].get<std::string>().c_str(), f["step"].get<std::string>().c_str(),
                f["index"].get<long>(), f["error"].get<std::string>().c_str());
  }
  for (const char* side : {"recv", "send"}) {
    const json& s = r[side];
    if (s["leftover_close_s"].get<double>() >= 0.001) {
      std::printf(
          "#   %s side: %ld of %ld comms closed in order, the rest (with listens) in %.3f s "
          "after\n",
          side, s["comms_closed_in_order"].get<long>(), s["comms_opened"].get<long>(),
          s["leftover_close_s"].get<double>());
    }
  }
  std::fflush(stdout);
}

// The round's entry, from A's and B's results: the earlier failure (by phase) is the round's.
json roundJson(long n, Order order, const SideResult& a, const json& b_json) {
  json r = {{"comms", n}, {"order", orderName(order)}, {"recv", a.toJson(n)}, {"send", b_json}};
  const bool ok = r["recv"]["ok"].get<bool>() && r["send"]["ok"].get<bool>();
  r["ok"] = ok;
  r["message_round_s"] = nullptr;
  r["failed"] = nullptr;
  if (a.msg_last > 0 && b_json["message_t1"].get<double>() > 0) {
    // The message round completed on both sides (a later close may still fail the round). Both
    // processes read one CLOCK_MONOTONIC (same host): first isend to the last completion.
    const double t0 = b_json["message_t0"].get<double>();
    const double t1 = std::max(a.msg_last, b_json["message_t1"].get<double>());
    r["message_round_s"] = t1 - t0;
  }
  if (!ok) {
    const char* side = !r["recv"]["ok"].get<bool>() ? "recv" : "send";
    if (!r["recv"]["ok"].get<bool>() && !r["send"]["ok"].get<bool>() &&
        b_json["failure_phase"].get<int>() < a.status.phase) {
      side = "send";
    }
    r["failed"] = r[side]["failure"];
    r["failed"]["side"] = side;
  }
  return r;
}

int runScale(ScaleOptions o) {
  if (o.plugin.empty()) o.plugin = defaultPluginPath();
  size_t size = 0;
  if (!parseSize(o.size, &size) || size > kMaxMessage) {
    std::fprintf(stderr, "pact-perf scale: --size must be a size up to 1M, got '%s'\n",
                 o.size.c_str());
    return 2;
  }
  if (o.comms.empty() ||
      std::any_of(o.comms.begin(), o.comms.end(), [](long n) { return n < 1; }) || o.batch < 1 ||
      o.timeout_s <= 0) {
    std::fprintf(stderr, "pact-perf scale: --comms, --batch and --timeout-s must be positive\n");
    return 2;
  }
  std::vector<Order> orders;
  if (o.order == "all") {
    orders = {Order::kBoth, Order::kRecvFirst, Order::kSendFirst};
  } else if (o.order == "both") {
    orders = {Order::kBoth};
  } else if (o.order == "recv-first") {
    orders = {Order::kRecvFirst};
  } else if (o.order == "send-first") {
    orders = {Order::kSendFirst};
  } else {
    std::fprintf(stderr, "pact-perf scale: --order is both, recv-first, send-first or all\n");
    return 2;
  }
  if (o.plugin.find('/') != std::string::npos && access(o.plugin.c_str(), R_OK) != 0) {
    std::fprintf(stderr, "pact-perf scale: cannot read plugin %s (build it, or pass --plugin)\n",
                 o.plugin.c_str());
    return 2;
  }
  // NCCL jobs usually run with the soft descriptor limit at the hard one (ulimit -n); so does this.
  rlimit lim{};
  getrlimit(RLIMIT_NOFILE, &lim);
  if (o.nofile != 0) {
    rlim_t want =
        o.nofile < 0 ? lim.rlim_max : std::min<rlim_t>(static_cast<rlim_t>(o.nofile), lim.rlim_max);
    lim.rlim_cur = want;
    if (setrlimit(RLIMIT_NOFILE, &lim) != 0)
      std::perror("pact-perf scale: setrlimit(RLIMIT_NOFILE)");
    getrlimit(RLIMIT_NOFILE, &lim);
  }

  const int rank = forkPeer();
  watchdog(static_cast<unsigned>(2 * o.timeout_s + 60), "scale: plugin open/init");
  std::string err;
  auto net = NetPlugin::open(o.plugin, o.version, &err);
  if (!net) die(err);
  check(net->init(-1, !o.verbose), "init");
  int ndev = 0;
  check(net->devices(&ndev), "devices");
  if (o.dev < 0 || o.dev >= ndev) {
    die("device " + std::to_string(o.dev) + " out of range (plugin has " + std::to_string(ndev) +
        ")");
  }
  loader::Properties props;
  check(net->getProperties(o.dev, &props), "getProperties");
  const size_t buf_bytes = std::max<size_t>(size, 4096);
  void* raw = nullptr;
  if (posix_memalign(&raw, 4096, buf_bytes) != 0) die("cannot allocate the message buffer");
  std::unique_ptr<char, FreeDeleter> buf(static_cast<char*>(raw));
  std::memset(buf.get(), rank == kSend ? 0x5a : 0, buf_bytes);
  const Snapshot init = snapshot();
  watchdog(0, "scale: rounds");

  auto env = [](const char* k) {
    const char* v = std::getenv(k);
    return v ? json(v) : json(nullptr);
  };
  json doc = {{"meta",
               {{"tool", "pact-perf scale"},
                {"plugin_path", o.plugin},
                {"plugin_name", net->name() ? net->name() : ""},
                {"version", net->version()},
                {"dev", o.dev},
                {"dev_name", props.name},
                {"max_comms", props.maxComms},
                {"size", size},
                {"batch", o.batch},
                {"timeout_s", o.timeout_s},
                {"nofile_soft", static_cast<long>(lim.rlim_cur)},
                {"nofile_hard", static_cast<long>(lim.rlim_max)},
                {"UCX_TLS", env("UCX_TLS")},
                {"UCX_NET_DEVICES", env("UCX_NET_DEVICES")},
                {"PACT_NET_DEVICES", env("PACT_NET_DEVICES")},
                {"after_init", {{"recv", snapJson(init)}}}}},
              {"results", json::array()}};
  if (rank == kSend) {
    sendString(snapJson(init).dump());
  } else {
    doc["meta"]["after_init"]["send"] = json::parse(recvString());
    std::printf(
        "# plugin %s (%s, v%d) dev %d %s (maxComms %d), message %zu B, batch %ld, "
        "UCX_TLS=%s, fd limit %ld/%ld, timeout %g s per wait\n",
        net->name() ? net->name() : "?", o.plugin.c_str(), net->version(), o.dev,
        props.name.c_str(), props.maxComms, size, o.batch,
        std::getenv("UCX_TLS") ? std::getenv("UCX_TLS") : "(unset)",
        static_cast<long>(lim.rlim_cur), static_cast<long>(lim.rlim_max), o.timeout_s);
    printHeader();
  }

  bool all_ok = true;
  for (long n : o.comms) {
    for (Order order : orders) {
      SideResult me = runRound(*net, o, size, buf.get(), buf_bytes, rank, n, order);
      if (rank == kSend) {
        json j = me.toJson(n);
        j["failure_phase"] = me.status.ok ? 99 : me.status.phase;
        sendString(j.dump());
        continue;
      }
      json b = json::parse(recvString());
      json r = roundJson(n, order, me, b);
      r["send"].erase("failure_phase");
      all_ok = all_ok && r["ok"].get<bool>();
      printRound(r);
      doc["results"].push_back(r);
      // Rewritten after every round: a run the watchdog ends still leaves what it measured.
      if (!o.json.empty() && !writeJson(o.json, doc, &err)) {
        std::fprintf(stderr, "pact-perf scale: %s\n", err.c_str());
      }
    }
  }
  watchdog(static_cast<unsigned>(2 * o.timeout_s + 60), "scale: finalize");
  barrier();
  net.reset();  // finalize, dlclose
  watchdog(0, "done");
  if (rank == kSend) {
    std::fflush(stdout);
    _exit(0);
  }
  int rc = all_ok ? 0 : 1;
  if (!reapPeer()) {
    std::fprintf(stderr, "pact-perf scale: peer process failed\n");
    rc = 1;
  }
  return rc;
}

}  // namespace

void addScaleCommand(CLI::App& app, int* exit_code) {
  auto o = std::make_shared<ScaleOptions>();
  CLI::App* c = app.add_subcommand(
      "scale",
      "many comm pairs between two processes: setup, one message each, close; fds, "
      "threads, RSS, mappings");
  c->add_option("--comms", o->comms, "comm pairs per round (repeatable, or a comma list)")
      ->delimiter(',')
      ->capture_default_str();
  c->add_option("--order", o->order,
                "close order: both, recv-first, send-first, or all (each its own round)")
      ->capture_default_str();
  c->add_option("--plugin", o->plugin,
                "NCCL net plugin .so (default: <exe dir>/../plugin/libnccl-net-pact.so)");
  c->add_option("--abi", o->version, "ncclNetPlugin_vN to use; 0 = newest exported")
      ->check(CLI::Range(0, 12));
  c->add_option("--size", o->size, "bytes of the one message per comm (up to 1M)")
      ->capture_default_str();
  c->add_option("--batch", o->batch,
                "listens (handles) per bootstrap round trip; NCCL sends one at a time, but the "
                "bootstrap is not what is measured")
      ->capture_default_str();
  c->add_option("--dev", o->dev, "plugin device index")->capture_default_str();
  c->add_option("--timeout-s", o->timeout_s,
                "deadline of every wait (a batch's connect/accept, the message round, each close "
                "loop, the peer's word); past it the round fails")
      ->capture_default_str();
  c->add_option("--nofile", o->nofile,
                "soft RLIMIT_NOFILE for both processes: -1 = the hard limit, 0 = leave it")
      ->capture_default_str();
  c->add_option("--json", o->json, "also write the results to this JSON file");
  c->add_flag("-v,--verbose", o->verbose, "print the plugin's INFO/TRACE log lines");
  c->footer(
      "Rank 0 (A) listens and accepts (receiver), rank 1 (B, forked before the plugin opens)\n"
      "connects and isends. Per round: setup (batches of --batch connections: A listens, sends\n"
      "the handles, both poll accept/connect until each comm exists), regMr per comm of one "
      "shared\n"
      "buffer, one message per comm, deregMr, close in the round's order; snapshots of fds,\n"
      "threads, RSS and /proc/self/maps lines before setup, after setup and after close.\n"
      "A failed round names its step, comm and the plugin's error; both sides close what they\n"
      "have and the next round runs. Exit status 0 only if every round succeeded.");
  c->callback([o, exit_code] { *exit_code = runScale(*o); });
}

}  // namespace pact::perf
