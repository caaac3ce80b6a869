// `pact-perf soak`: mixed plugin and engine traffic in one process, with faults on, for minutes:
// every interval a line with RSS, open registrations and the counters; at the end a verdict
// (miscommits, plugin data errors and leaked registrations must be 0) and --json.
//
// Engine traffic: a receiver and a sender engine (progress threads) keep a window of transfers
// of mixed sizes in flight through class SOAK_CLASS (KV; verify=crc32c,retries=3 unless
// PACT_TC_KV is set); the receiver's commit hook checks every committed byte. Plugin traffic: the
// NCCL net plugin opened through pact::loader, a send and a receive comm over loopback in one
// thread (class DEFAULT: verify=crc32c,retries=3 unless PACT_TC_DEFAULT is set), messages of mixed
// sizes checked byte for byte.
#include "soak.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <fstream>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "net_plugin.h"
#include "pact/nccl_ext.h"
#include "engines.h"
#include "pact/pact.h"
#include "pattern.h"
#include "report.h"

namespace pact::perf {

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  double minutes = 0;
  double seconds = 0;
  double interval = 10;
  std::string fault;
  std::string plugin;
  std::string json;
  int window = 16;
};

uint64_t rssBytes() {
  std::ifstream statm("/proc/self/statm");
  uint64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

std::string defaultPlugin() {
  char self[4096] = {};
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  std::string dir = n > 0 ? std::string(self, static_cast<size_t>(n)) : std::string(".");
  dir = dir.substr(0, dir.rfind('/'));
  return dir + "/../plugin/libnccl-net-pact.so";
}

struct Counters {
  std::atomic<uint64_t> engineOk{0}, engineFailed{0}, miscommits{0}, hookCalls{0};
  std::atomic<uint64_t> pluginMessages{0}, pluginBytes{0}, pluginErrors{0};
  std::atomic<uint64_t> pluginCommFailures{0}, pluginFaults{0}, pluginLeaked{0};
  std::atomic<bool> stop{false};
  std::string pluginFailure;  // first failure, set once by the plugin thread
};

// ---- engine traffic -----------------------------------------------------------------------------

struct EngineSide {
  pact_engine_t engine = nullptr;
  std::vector<uint8_t> memory;
  pact_mr_t mr = nullptr;
};

struct HookCtx {
  EngineSide* receiver;
  Counters* counters;
};

int checkCommit(void* user, pact_xfer_t, const pact_key_t* key, pact_peer_t, const pact_block_t* b,
                size_t n) {
  auto* ctx = static_cast<HookCtx*>(user);
  ++ctx->counters->hookCalls;
  for (size_t i = 0; i < n; ++i) {  // soak transfers have one block, filled from the request id
    if (!checkPattern(ctx->receiver->memory.data() + b[i].offset, b[i].length, key->request_id + i))
      ++ctx->counters->miscommits;
  }
  return 0;
}

bool check(pact_status_t st, const char* what) {
  if (st == PACT_OK) return true;
  std::fprintf(stderr, "pact-perf soak: %s: %s: %s\n", what, pact_status_string(st), pact_last_error());
  return false;
}

pact_engine_t makeEngine(const char* name, bool listen) {
  pact_engine_t e = nullptr;
  return check(progressEngine(name, listen ? "127.0.0.1" : nullptr, 0, &e), "engine_create") ? e : nullptr;
}

// Runs engine transfers until counters.stop; returns false on a setup failure.
bool engineTraffic(const Options& o, EngineSide& rx, EngineSide& tx, Counters& counters) {
  char address[128];
  pact_peer_t peer = 0;
  if (!check(pact_engine_address(rx.engine, address, sizeof address), "address") ||
      !check(pact_connect(tx.engine, address, 10000, &peer), "connect"))
    return false;
  constexpr uint64_t kSlot = 4u << 20;
  const uint64_t sizes[] = {4096, 65536, 1u << 20, 3u << 20};
  std::mt19937_64 rng(7);
  struct InFlight {
    pact_xfer_t rx, tx;
  };
  std::deque<InFlight> window;
  uint64_t next = 1;
  size_t slot = 0;
  const auto finish = [&](const InFlight& f) {
    pact_xfer_info_t ri{}, ti{};
    const bool done = pact_xfer_wait(rx.engine, f.rx, 10000, &ri) == PACT_OK &&
                      pact_xfer_wait(tx.engine, f.tx, 10000, &ti) == PACT_OK;
    if (done && ri.result == PACT_OK && ti.result == PACT_OK) {
      ++counters.engineOk;
    } else {
      ++counters.engineFailed;  // a clean failure (deadline, checksum, ...): counted, not an error
    }
    (void)pact_xfer_release(rx.engine, f.rx);
    (void)pact_xfer_release(tx.engine, f.tx);
  };
  while (!counters.stop) {
    if (window.size() >= static_cast<size_t>(o.window)) {
      finish(window.front());
      window.pop_front();
    }
    const uint64_t size = sizes[rng() % 4];
    const uint64_t offset = (slot++ % static_cast<size_t>(2 * o.window)) * kSlot;
    pact_key_t key{next++, 0, 0, 0};
    fillPattern(tx.memory.data() + offset, size, key.request_id);
    pact_block_t rb{rx.mr, offset, size}, tb{tx.mr, offset, size};
    InFlight f{};
    if (!check(pact_expect(rx.engine, &key, &rb, 1, 2000000, "KV", &f.rx), "expect")) return false;
    if (!check(pact_send(tx.engine, peer, &key, &tb, 1, 2000000, "KV", &f.tx), "send")) return false;
    window.push_back(f);
  }
  for (const auto& f : window) finish(f);
  return true;
}

// ---- plugin traffic -----------------------------------------------------------------------------

// One connected send/receive comm pair with a registered buffer each; closed by the destructor.
struct PluginSession {
  loader::NetPlugin& plugin;
  void *sc = nullptr, *rc = nullptr, *smh = nullptr, *rmh = nullptr;
  ~PluginSession() {
    if (smh) plugin.deregMr(sc, smh);
    if (rmh) plugin.deregMr(rc, rmh);
    if (sc) plugin.closeSend(sc);
    if (rc) plugin.closeRecv(rc);
  }
};

// Messages of 0..1 MiB over one comm pair until the soak stops. With PACT_FAULT the plugin fails
// a comm on purpose (a piece lost past the class's retries, a refused message): that is a clean
// failure when both comms report it; the pair is then closed and a new one connected. A message
// that completes with the wrong size or bytes is always an error.
void pluginTraffic(const Options& o, Counters& counters) {
  const auto failed = [&](const std::string& why) {
    if (counters.pluginFailure.empty()) counters.pluginFailure = why;
    ++counters.pluginErrors;
  };
  std::string error;
  auto plugin = loader::NetPlugin::open(o.plugin, 0, &error);
  if (!plugin) return failed("open " + o.plugin + ": " + error);
  if (plugin->init() != 0) return failed("plugin init failed");
  char handle[loader::kHandleSize] = {};
  void* lc = nullptr;
  if (plugin->listen(0, handle, &lc) != 0) return failed("listen failed");
  constexpr size_t kMax = 1u << 20;
  std::vector<uint8_t> src(kMax), dst(kMax);
  std::mt19937_64 rng(11);
  uint64_t n = 0;
  while (!counters.stop) {
    PluginSession p{*plugin};
    const auto limit = Clock::now() + std::chrono::seconds(10);
    while ((p.sc == nullptr || p.rc == nullptr) && Clock::now() < limit) {
      if (p.sc == nullptr && plugin->connect(0, handle, &p.sc) != 0) return failed("connect failed");
      if (p.rc == nullptr && plugin->accept(lc, &p.rc) != 0) return failed("accept failed");
    }
    if (p.sc == nullptr || p.rc == nullptr) return failed("connect/accept did not complete in 10 s");
    if (plugin->regMr(p.sc, src.data(), kMax, loader::kPtrHost, &p.smh) != 0 ||
        plugin->regMr(p.rc, dst.data(), kMax, loader::kPtrHost, &p.rmh) != 0)
      return failed("regMr failed");
    while (!counters.stop) {
      const size_t size = static_cast<size_t>(rng() % (kMax + 1)) & ~size_t{3};
      fillPattern(src.data(), size, ++n);
      void *sreq = nullptr, *rreq = nullptr;
      void* data = dst.data();
      size_t rsize = kMax;
      int tag = 1, srv = 0, rrv = 0;
      while (rreq == nullptr && (rrv = plugin->irecv(p.rc, 1, &data, &rsize, &tag, &p.rmh, &rreq)) == 0) {}
      while (sreq == nullptr && (srv = plugin->isend(p.sc, src.data(), size, 1, p.smh, &sreq)) == 0) {}
      int sdone = sreq == nullptr, rdone = rreq == nullptr, got = 0;
      const auto deadline = Clock::now() + std::chrono::seconds(30);
      // After one side fails, the other must fail too (the abort reaches it) or finish.
      while ((!sdone || !rdone) && Clock::now() < deadline) {
        if (!sdone && (srv = plugin->test(sreq, &sdone, nullptr)) != 0) sdone = 1;
        if (!rdone && (rrv = plugin->test(rreq, &rdone, &got)) != 0) rdone = 1;
      }
      if (!sdone || !rdone) return failed("a message did not complete or fail within 30 s");
      if (srv != 0 || rrv != 0) {
        if (o.fault.empty()) return failed("a comm failed without injected faults");
        ++counters.pluginCommFailures;
        break;  // a new pair
      }
      if (static_cast<size_t>(got) != size || !checkPattern(dst.data(), size, n)) {
        failed("message " + std::to_string(n) + ": wrong size or bytes");
        continue;
      }
      ++counters.pluginMessages;
      counters.pluginBytes += size;
    }
  }
  auto total = reinterpret_cast<pact_faults_injected_fn>(plugin->symbol("pact_faults_injected"));
  if (total != nullptr) counters.pluginFaults = total();
  // Every pair is closed: the plugin must hold no comm and no registration any more.
  auto held = reinterpret_cast<pact_plugin_resources_fn>(plugin->symbol("pact_plugin_resources"));
  pact_plugin_resources_t r{};
  if (held == nullptr || held(&r) != 0) return failed("pact_plugin_resources unavailable");
  counters.pluginLeaked = static_cast<uint64_t>(r.comms + r.registrations);
  plugin->closeListen(lc);
  plugin->finalize();
}

int run(const Options& o) {
  if (!o.fault.empty()) setenv("PACT_FAULT", o.fault.c_str(), 1);
  setenv("PACT_TC_KV", "verify=crc32c,retries=3", 0);  // the user's PACT_TC_KV wins
  // The plugin's class, likewise: verified, since PACT_FAULT corrupt flips real bits on the wire.
  setenv("PACT_TC_DEFAULT", "verify=crc32c,retries=3", 0);
  const double seconds = o.minutes * 60 + o.seconds;
  Counters counters;
  EngineSide rx, tx;
  rx.engine = makeEngine("soak-rx", true);
  tx.engine = makeEngine("soak-tx", false);
  if (rx.engine == nullptr || tx.engine == nullptr) return 2;
  for (EngineSide* s : {&rx, &tx}) {
    s->memory.assign(static_cast<size_t>(2 * o.window) * (4u << 20), 0);
    if (!check(pact_mem_register(s->engine, s->memory.data(), s->memory.size(), &s->mr), "register"))
      return 2;
  }
  HookCtx hook{&rx, &counters};
  (void)pact_set_commit_hook(rx.engine, &checkCommit, &hook);
  std::atomic<bool> engineOk{true};
  std::thread engineThread([&] { engineOk = engineTraffic(o, rx, tx, counters); });
  std::thread pluginThread([&] { pluginTraffic(o, counters); });

  std::printf("%8s %9s %5s %6s %9s %7s %7s %6s %6s %7s %7s %9s %6s %5s\n", "time_s", "rss_MiB",
              "regs", "open", "committed", "aborted", "retried", "dups", "stale", "cksum",
              "faults", "plugin_msg", "p_err", "mis");
  const auto t0 = Clock::now();
  uint64_t rssFirst = 0, rssLast = 0;
  pact_stats_t rs{}, ts{};
  for (int tick = 1;; ++tick) {
    const auto due = t0 + std::chrono::duration<double>(std::min(seconds, tick * o.interval));
    while (Clock::now() < due && engineOk) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    (void)pact_stats(rx.engine, &rs);
    (void)pact_stats(tx.engine, &ts);
    rssLast = rssBytes();
    if (tick == 1) rssFirst = rssLast;
    const double t = std::chrono::duration<double>(Clock::now() - t0).count();
    std::printf("%8.0f %9.1f %5lu %6lu %9lu %7lu %7lu %6lu %6lu %7lu %7lu %9lu %6lu %5lu\n", t,
                static_cast<double>(rssLast) / (1 << 20),
                static_cast<unsigned long>(rs.open_registrations + ts.open_registrations),
                static_cast<unsigned long>(rs.open_transfers + ts.open_transfers),
                static_cast<unsigned long>(rs.committed), static_cast<unsigned long>(rs.aborted),
                static_cast<unsigned long>(rs.retried + ts.retried),
                static_cast<unsigned long>(rs.duplicates_dropped),
                static_cast<unsigned long>(rs.stale_rejected),
                static_cast<unsigned long>(rs.checksum_failures),
                static_cast<unsigned long>(rs.faults_injected + ts.faults_injected),
                static_cast<unsigned long>(counters.pluginMessages.load()),
                static_cast<unsigned long>(counters.pluginErrors.load()),
                static_cast<unsigned long>(counters.miscommits.load()));
    std::fflush(stdout);
    if (t >= seconds || !engineOk) break;
  }
  counters.stop = true;
  engineThread.join();
  pluginThread.join();
  (void)pact_stats(rx.engine, &rs);
  (void)pact_stats(tx.engine, &ts);
  const uint64_t openTransfers = rs.open_transfers + ts.open_transfers;
  uint64_t leaked = 0;
  for (EngineSide* s : {&rx, &tx}) {
    if (pact_mem_deregister(s->engine, s->mr) != PACT_OK) ++leaked;
    pact_stats_t st{};
    (void)pact_stats(s->engine, &st);
    leaked += st.open_registrations;
    pact_engine_destroy(s->engine);
  }
  leaked += counters.pluginLeaked;  // plugin comms and registrations still open after close
  const double elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
  const bool pass = engineOk && counters.miscommits == 0 && counters.pluginErrors == 0 &&
                    leaked == 0 && openTransfers == 0;
  std::printf("soak: %.0f s, engine %lu committed / %lu failed cleanly, %lu faults injected, "
              "plugin %lu messages (%.1f GB, %lu faults, %lu comms failed cleanly), RSS %.1f -> %.1f MiB, miscommits %lu, plugin errors %lu, "
              "leaked registrations %lu, open transfers %lu: %s\n",
              elapsed, static_cast<unsigned long>(counters.engineOk.load()),
              static_cast<unsigned long>(counters.engineFailed.load()),
              static_cast<unsigned long>(rs.faults_injected + ts.faults_injected),
              static_cast<unsigned long>(counters.pluginMessages.load()),
              static_cast<double>(counters.pluginBytes.load()) / 1e9,
              static_cast<unsigned long>(counters.pluginFaults.load()),
              static_cast<unsigned long>(counters.pluginCommFailures.load()),
              static_cast<double>(rssFirst) / (1 << 20), static_cast<double>(rssLast) / (1 << 20),
              static_cast<unsigned long>(counters.miscommits.load()),
              static_cast<unsigned long>(counters.pluginErrors.load()),
              static_cast<unsigned long>(leaked), static_cast<unsigned long>(openTransfers),
              pass ? "PASS" : "FAIL");
  if (!counters.pluginFailure.empty())
    std::printf("soak: first plugin failure: %s\n", counters.pluginFailure.c_str());
  if (!o.json.empty()) {
    nlohmann::json doc = {
        {"seconds", elapsed}, {"fault", o.fault}, {"rss_first_bytes", rssFirst},
        {"rss_last_bytes", rssLast}, {"rss_growth_bytes", static_cast<int64_t>(rssLast - rssFirst)},
        {"committed", counters.engineOk.load()}, {"failed_cleanly", counters.engineFailed.load()},
        {"retried", rs.retried + ts.retried}, {"duplicates_dropped", rs.duplicates_dropped},
        {"stale_rejected", rs.stale_rejected}, {"checksum_failures", rs.checksum_failures},
        {"faults_injected", rs.faults_injected + ts.faults_injected},
        {"plugin_messages", counters.pluginMessages.load()},
        {"plugin_errors", counters.pluginErrors.load()},
        {"plugin_comm_failures", counters.pluginCommFailures.load()},
        {"plugin_faults_injected", counters.pluginFaults.load()},
        {"miscommits", counters.miscommits.load()},
        {"leaked_registrations", leaked}, {"open_transfers", openTransfers}, {"pass", pass}};
    std::string err;
    if (!writeJson(o.json, doc, &err)) std::fprintf(stderr, "pact-perf soak: %s\n", err.c_str());
  }
  return pass ? 0 : 1;
}

}  // namespace

void addSoakCommand(CLI::App& app, int* exit_code) {
  auto o = std::make_shared<Options>();
  o->plugin = defaultPlugin();
  auto* cmd = app.add_subcommand("soak", "Mixed plugin and engine traffic with faults, for minutes: "
                                         "RSS, registrations and counters every interval");
  cmd->add_option("--minutes", o->minutes, "Run time in minutes (adds to --seconds)");
  cmd->add_option("--seconds", o->seconds, "Run time in seconds (adds to --minutes)");
  cmd->add_option("--interval", o->interval, "Seconds between report lines")->default_val(10);
  cmd->add_option("--fault", o->fault,
                  "PACT_FAULT for both engines and the plugin (kill_after would end the soak)");
  cmd->add_option("--plugin", o->plugin, "The NCCL net plugin to drive")->default_str(o->plugin);
  cmd->add_option("--window", o->window, "Engine transfers in flight")->default_val(16);
  cmd->add_option("--json", o->json, "Write the summary as JSON");
  cmd->callback([o, exit_code] {
    if (o->minutes * 60 + o->seconds <= 0 || o->interval <= 0 || o->window < 1) {
      std::fprintf(stderr, "pact-perf soak: give a positive --minutes or --seconds, --interval and --window\n");
      *exit_code = 2;
      return;
    }
    if (o->fault.find("kill_after") != std::string::npos) {
      std::fprintf(stderr, "pact-perf soak: kill_after would end the soak; leave it out\n");
      *exit_code = 2;
      return;
    }
    *exit_code = run(*o);
  });
}

}  // namespace pact::perf
