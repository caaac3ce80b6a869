// `pact-perf mix`: the background article's validation step 4 on one machine. Two engines (a
// receiver listening on 127.0.0.1 and a sender, each with its progress thread) carry three
// streams at once, each from its own thread:
//   kv   requests of --kv-blocks blocks of --kv-block bytes, one every --kv-interval-us (at most
//        --kv-window open): prefill -> decode KV bursts; latency: send to the receiver's commit;
//   a2a  steps of --a2a-count transfers of --a2a-bytes, back to back, each step waited for whole:
//        one rank's share of a MoE dispatch; latency: the step;
//   ckpt transfers of --ckpt-bytes, --ckpt-window in flight, back to back: a checkpoint that
//        saturates the path; latency: per transfer.
// Three phases of --seconds each, fresh engines for each: `alone` (kv only), `isolated` (kv, a2a
// and ckpt on the KV, A2A and CKPT classes, each with its own lanes and a credit budget) and
// `shared` (all three on DEFAULT: one class, one set of lanes). The report gives per phase and
// stream the goodput and P50/P95/P99, and the KV P99 of each phase against `alone`.
//
// Every kv byte is checked in the receiver's commit hook (the pattern of its request); a2a and
// ckpt transfers carry their request id in their first and last 8 bytes, checked there too.
// A transfer that fails, or a wrong byte, fails the run.
//
// `--face nccl` runs class isolation on the NCCL face instead (mix_nccl.h): a bulk and a latency
// stream through a net plugin, each on its own NCCL traffic class. This file parses both faces'
// options and hands the shared ones (--seconds, --phases, --json, --plot) to that face.
#include "mix.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engines.h"
#include "mix_nccl.h"
#include "pact/pact.h"
#include "pattern.h"
#include "report.h"

namespace pact::perf {

namespace {

using Clock = std::chrono::steady_clock;

struct MixOptions {
  std::string face = "engine";
  double seconds = 3;
  std::string kv_block = "64K", a2a_bytes = "256K", ckpt_bytes = "16M";
  size_t kvBlock = 0, a2aBytes = 0, ckptBytes = 0;
  int kv_blocks = 8, kv_window = 4, kv_interval_us = 2000;
  int a2a_count = 8, ckpt_window = 4;
  std::string kv_profile = "credits=4M", a2a_profile = "credits=4M", ckpt_profile = "credits=32M";
  std::string phases = "alone,isolated,shared";
  std::string json;
  std::string plot;  // --plot: an SVG of the run (pact-plot)
};

enum Stream : uint64_t { kKv = 1, kA2a = 2, kCkpt = 3 };
const char* streamName(uint64_t s) { return s == kKv ? "kv" : s == kA2a ? "a2a" : "ckpt"; }
const char* className(uint64_t s) { return s == kKv ? "KV" : s == kA2a ? "A2A" : "CKPT"; }

// request_id: the stream in the top byte, a sequence number below.
uint64_t requestId(uint64_t stream, uint64_t seq) { return stream << 56 | seq; }

struct Shared {
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> wrong{0}, failed{0};
  std::string firstFailure;  // set once, under failMu
  std::mutex failMu;
  void fail(const std::string& why) {
    ++failed;
    std::lock_guard lock(failMu);
    if (firstFailure.empty()) firstFailure = why;
    stop = true;
  }
};

struct Side {
  pact_engine_t engine = nullptr;
  std::vector<uint8_t> memory;
  pact_mr_t mr = nullptr;
};

// The memory of each stream in both sides' region: [kv slots][a2a slots][ckpt slots].
struct Layout {
  size_t kvSlot, a2aSlot, ckptSlot;
  size_t a2aBase, ckptBase, total;  // kv slots start at 0
  explicit Layout(const MixOptions& o)
      : kvSlot(o.kvBlock * static_cast<size_t>(o.kv_blocks)),
        a2aSlot(o.a2aBytes),
        ckptSlot(o.ckptBytes),
        a2aBase(kvSlot * static_cast<size_t>(o.kv_window)),
        ckptBase(a2aBase + a2aSlot * static_cast<size_t>(o.a2a_count)),
        total(ckptBase + ckptSlot * static_cast<size_t>(o.ckpt_window)) {}
};

struct HookCtx {
  Side* rx;
  Shared* shared;
};

void stamp(uint8_t* p, size_t n, uint64_t id) {
  std::memcpy(p, &id, 8);
  std::memcpy(p + n - 8, &id, 8);
}
bool stamped(const uint8_t* p, size_t n, uint64_t id) {
  uint64_t a, b;
  std::memcpy(&a, p, 8);
  std::memcpy(&b, p + n - 8, 8);
  return a == id && b == id;
}

int checkCommit(void* user, pact_xfer_t, const pact_key_t* key, pact_peer_t, const pact_block_t* b,
                size_t n) {
  auto* ctx = static_cast<HookCtx*>(user);
  const uint64_t stream = key->request_id >> 56;
  for (size_t i = 0; i < n; ++i) {
    const uint8_t* p = ctx->rx->memory.data() + b[i].offset;
    const bool good = stream == kKv ? checkPattern(p, b[i].length, key->request_id * 64 + i)
                                    : stamped(p, b[i].length, key->request_id);
    if (!good) ++ctx->shared->wrong;
  }
  return 0;
}

struct Sample {
  std::vector<double> ms;
  uint64_t bytes = 0;
  double seconds = 0;
};

// One stream's traffic until shared.stop: `post` starts unit `seq` in slot `slot` (one or more
// transfer pairs appended to `xfers`); a unit is done when all its pairs are final.
class Driver {
 public:
  Driver(Side& rx, Side& tx, pact_peer_t peer, Shared& shared, const char* cls)
      : rx_(rx), tx_(tx), peer_(peer), shared_(shared), cls_(cls) {}

  struct Pair {
    pact_xfer_t rx = 0, tx = 0;
  };
  // A unit of a stream (a request, a transfer) and when it was started.
  struct Open {
    std::vector<Pair> pairs;
    Clock::time_point t0;
  };
  bool pair(const pact_key_t& key, uint64_t rxOff, uint64_t txOff, uint64_t len, size_t blocks,
            std::vector<Pair>* out) {
    std::vector<pact_block_t> rb, tb;
    const uint64_t each = len / blocks;
    for (size_t i = 0; i < blocks; ++i) {
      rb.push_back({rx_.mr, rxOff + i * each, each});
      tb.push_back({tx_.mr, txOff + i * each, each});
    }
    Pair p;
    constexpr uint64_t kDeadlineUs = 30'000'000;
    if (pact_expect(rx_.engine, &key, rb.data(), rb.size(), kDeadlineUs, cls_, &p.rx) != PACT_OK)
      return failCall("expect");
    if (pact_send(tx_.engine, peer_, &key, tb.data(), tb.size(), kDeadlineUs, cls_, &p.tx) != PACT_OK) {
      const bool f = failCall("send");
      p.tx = 0;
      drop({p});
      return f;
    }
    out->push_back(p);
    return true;
  }
  // Whether the receiver's side of every pair is final (committed or failed): a look, no wait.
  bool landed(const std::vector<Pair>& ps) const {
    for (const Pair& p : ps) {
      pact_xfer_info_t ri{};
      if (pact_xfer_query(rx_.engine, p.rx, &ri) != PACT_OK || !ri.final) return false;
    }
    return true;
  }
  // After a failure: gives up the pairs still open (they end canceled) and waits until their
  // blocks are free, so the registration can go.
  void drop(const std::vector<Pair>& ps) {
    for (const Pair& p : ps) {
      pact_xfer_info_t info{};
      for (auto [e, x] : {std::pair{rx_.engine, p.rx}, {tx_.engine, p.tx}})
        if (x != 0 && pact_xfer_release(e, x) == PACT_IN_PROGRESS) (void)pact_xfer_wait(e, x, 10000, &info);
    }
  }
  // The units still open when the stream stops: finished, or after a failure given up.
  void settle(const std::deque<Open>& open, const char* what) {
    for (const Open& u : open) {
      if (shared_.failed > 0)
        drop(u.pairs);
      else
        (void)finish(u.pairs, what);
    }
  }
  // Waits for every pair; false (and the run fails) when one did not commit.
  bool finish(const std::vector<Pair>& ps, const char* what) {
    for (const Pair& p : ps) {
      pact_xfer_info_t ri{}, ti{};
      const pact_status_t a = pact_xfer_wait(rx_.engine, p.rx, 60000, &ri);
      const pact_status_t b = pact_xfer_wait(tx_.engine, p.tx, 60000, &ti);
      (void)pact_xfer_release(rx_.engine, p.rx);
      (void)pact_xfer_release(tx_.engine, p.tx);
      if (a != PACT_OK || b != PACT_OK || ri.result != PACT_OK || ti.result != PACT_OK) {
        shared_.fail(std::string(what) + ": a transfer did not commit (receiver " +
                     pact_status_string(a != PACT_OK ? a : ri.result) + ", sender " +
                     pact_status_string(b != PACT_OK ? b : ti.result) + ")");
        return false;
      }
    }
    return true;
  }

 private:
  bool failCall(const char* call) {
    shared_.fail(std::string(call) + " (" + cls_name() + "): " + pact_last_error());
    return false;
  }
  std::string cls_name() const { return cls_ ? cls_ : "DEFAULT"; }

  Side& rx_;
  Side& tx_;
  pact_peer_t peer_;
  Shared& shared_;
  const char* cls_;
};

double msSince(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

// kv: paced requests, a window of them open; latency from the request's send to its commit,
// seen by looking at the open requests every 20 us while waiting for the next one's time.
void kvStream(const MixOptions& o, const Layout& l, Side& tx, Driver& d, Shared& shared, Sample* out) {
  std::deque<Driver::Open> open;
  const auto t0 = Clock::now();
  auto due = t0;
  const auto interval = std::chrono::microseconds(o.kv_interval_us);
  for (uint64_t seq = 0; !shared.stop; ++seq) {
    // Requests complete in order per class lane; the oldest is the one to look at.
    while (!shared.stop && (Clock::now() < due || open.size() == static_cast<size_t>(o.kv_window))) {
      if (!open.empty() && d.landed(open.front().pairs)) {
        out->ms.push_back(msSince(open.front().t0));
        const bool ok = d.finish(open.front().pairs, "kv");
        open.pop_front();
        if (!ok) break;
        out->bytes += l.kvSlot;
        continue;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
    if (shared.stop) break;
    due += interval;
    const uint64_t id = requestId(kKv, seq);
    const size_t off = (seq % static_cast<uint64_t>(o.kv_window)) * l.kvSlot;
    for (int b = 0; b < o.kv_blocks; ++b)
      fillPattern(tx.memory.data() + off + static_cast<size_t>(b) * o.kvBlock, o.kvBlock, id * 64 + static_cast<uint64_t>(b));
    Driver::Open u{{}, Clock::now()};
    const bool ok = d.pair(pact_key_t{id, 0, 0, 0}, off, off, l.kvSlot, static_cast<size_t>(o.kv_blocks), &u.pairs);
    open.push_back(std::move(u));
    if (!ok) break;
  }
  d.settle(open, "kv");
  out->seconds = std::chrono::duration<double>(Clock::now() - t0).count();
}

// a2a: steps of a2a_count transfers, each step waited for whole.
void a2aStream(const MixOptions& o, const Layout& l, Side& tx, Driver& d, Shared& shared, Sample* out) {
  const auto t0 = Clock::now();
  for (uint64_t step = 0; !shared.stop; ++step) {
    std::vector<Driver::Pair> pairs;
    const auto s0 = Clock::now();
    bool ok = true;
    for (int k = 0; k < o.a2a_count && ok; ++k) {
      const uint64_t id = requestId(kA2a, step * static_cast<uint64_t>(o.a2a_count) + static_cast<uint64_t>(k));
      const size_t off = l.a2aBase + static_cast<size_t>(k) * l.a2aSlot;
      stamp(tx.memory.data() + off, l.a2aSlot, id);
      ok = d.pair(pact_key_t{id, 0, 0, 0}, off, off, l.a2aSlot, 1, &pairs);
    }
    if (!ok) {
      d.drop(pairs);
      return;
    }
    if (!d.finish(pairs, "a2a")) return;
    out->ms.push_back(msSince(s0));
    out->bytes += l.a2aSlot * static_cast<size_t>(o.a2a_count);
  }
  out->seconds = std::chrono::duration<double>(Clock::now() - t0).count();
}

// ckpt: back-to-back transfers, ckpt_window in flight.
void ckptStream(const MixOptions& o, const Layout& l, Side& tx, Driver& d, Shared& shared, Sample* out) {
  std::deque<Driver::Open> open;
  const auto t0 = Clock::now();
  for (uint64_t seq = 0; !shared.stop; ++seq) {
    if (open.size() == static_cast<size_t>(o.ckpt_window)) {
      const bool ok = d.finish(open.front().pairs, "ckpt");
      const double ms = msSince(open.front().t0);
      open.pop_front();
      if (!ok) break;
      out->ms.push_back(ms);
      out->bytes += l.ckptSlot;
    }
    const uint64_t id = requestId(kCkpt, seq);
    const size_t off = l.ckptBase + (seq % static_cast<uint64_t>(o.ckpt_window)) * l.ckptSlot;
    stamp(tx.memory.data() + off, l.ckptSlot, id);
    Driver::Open u{{}, Clock::now()};
    const bool ok = d.pair(pact_key_t{id, 0, 0, 0}, off, off, l.ckptSlot, 1, &u.pairs);
    open.push_back(std::move(u));
    if (!ok) break;
  }
  d.settle(open, "ckpt");
  out->seconds = std::chrono::duration<double>(Clock::now() - t0).count();
}

pact_engine_t makeEngine(const char* name, bool listen, Shared& shared) {
  pact_engine_t e = nullptr;
  if (progressEngine(name, listen ? "127.0.0.1" : nullptr, 0, &e) != PACT_OK)
    shared.fail(std::string("engine_create: ") + pact_last_error());
  return e;
}

struct PhaseResult {
  std::string phase;
  Sample s[4];  // by Stream
  bool ran[4] = {false, false, false, false};
  std::string failure;
  uint64_t wrong = 0;
};

PhaseResult runPhase(const MixOptions& o, const std::string& phase) {
  PhaseResult r;
  r.phase = phase;
  Shared shared;
  const Layout l(o);
  Side rx, tx;
  rx.engine = makeEngine("mix-rx", true, shared);
  tx.engine = makeEngine("mix-tx", false, shared);
  char address[128] = {};
  pact_peer_t peer = 0;
  HookCtx hook{&rx, &shared};
  bool ready = rx.engine != nullptr && tx.engine != nullptr;
  for (Side* s : {&rx, &tx}) {
    if (!ready) break;
    s->memory.assign(l.total, 0);
    if (pact_mem_register(s->engine, s->memory.data(), s->memory.size(), &s->mr) != PACT_OK) {
      shared.fail(std::string("register: ") + pact_last_error());
      ready = false;
    }
  }
  if (ready && (pact_engine_address(rx.engine, address, sizeof address) != PACT_OK ||
                pact_connect(tx.engine, address, 10000, &peer) != PACT_OK)) {
    shared.fail(std::string("connect: ") + pact_last_error());
    ready = false;
  }
  if (ready) {
    (void)pact_set_commit_hook(rx.engine, &checkCommit, &hook);
    const bool classes = phase != "shared";
    Driver kv(rx, tx, peer, shared, classes ? className(kKv) : nullptr);
    Driver a2a(rx, tx, peer, shared, classes ? className(kA2a) : nullptr);
    Driver ckpt(rx, tx, peer, shared, classes ? className(kCkpt) : nullptr);
    std::vector<std::thread> threads;
    threads.emplace_back([&] { kvStream(o, l, tx, kv, shared, &r.s[kKv]); });
    r.ran[kKv] = true;
    if (phase != "alone") {
      threads.emplace_back([&] { a2aStream(o, l, tx, a2a, shared, &r.s[kA2a]); });
      threads.emplace_back([&] { ckptStream(o, l, tx, ckpt, shared, &r.s[kCkpt]); });
      r.ran[kA2a] = r.ran[kCkpt] = true;
    }
    const auto end = Clock::now() + std::chrono::duration<double>(o.seconds);
    while (!shared.stop && Clock::now() < end) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    shared.stop = true;
    for (auto& t : threads) t.join();
  }
  for (Side* s : {&rx, &tx}) {
    if (s->mr != nullptr) (void)pact_mem_deregister(s->engine, s->mr);
    if (s->engine != nullptr) pact_engine_destroy(s->engine);
  }
  r.wrong = shared.wrong;
  if (shared.wrong > 0 && shared.firstFailure.empty())
    shared.firstFailure = std::to_string(shared.wrong.load()) + " blocks committed with wrong bytes";
  r.failure = shared.firstFailure;
  return r;
}

int runMix(MixOptions o) {
  for (auto [text, out] : {std::pair{&o.kv_block, &o.kvBlock}, {&o.a2a_bytes, &o.a2aBytes}, {&o.ckpt_bytes, &o.ckptBytes}}) {
    if (!parseSize(*text, out) || *out < 16 || *out % 8 != 0) {
      std::fprintf(stderr, "pact-perf mix: size '%s': give a multiple of 8 bytes, at least 16 (e.g. 64K)\n", text->c_str());
      return 2;
    }
  }
  std::vector<std::string> phases;
  for (size_t a = 0; a <= o.phases.size();) {
    const size_t b = std::min(o.phases.find(',', a), o.phases.size());
    const std::string p = o.phases.substr(a, b - a);
    if (p != "alone" && p != "isolated" && p != "shared") {
      std::fprintf(stderr, "pact-perf mix: --phases: '%s' is not alone, isolated or shared\n", p.c_str());
      return 2;
    }
    phases.push_back(p);
    a = b + 1;
  }
  // Each class its own profile (lanes of its own, a credit budget); the user's PACT_TC_* win.
  setenv("PACT_TC_KV", o.kv_profile.c_str(), 0);
  setenv("PACT_TC_A2A", o.a2a_profile.c_str(), 0);
  setenv("PACT_TC_CKPT", o.ckpt_profile.c_str(), 0);
  std::printf("# pact-perf mix: %.1f s per phase; kv %d x %s every %d us (window %d), a2a steps of %d x %s, "
              "ckpt %s (window %d); PACT_TC_KV=%s PACT_TC_A2A=%s PACT_TC_CKPT=%s UCX_TLS=%s\n",
              o.seconds, o.kv_blocks, o.kv_block.c_str(), o.kv_interval_us, o.kv_window, o.a2a_count,
              o.a2a_bytes.c_str(), o.ckpt_bytes.c_str(), o.ckpt_window, std::getenv("PACT_TC_KV"),
              std::getenv("PACT_TC_A2A"), std::getenv("PACT_TC_CKPT"),
              std::getenv("UCX_TLS") ? std::getenv("UCX_TLS") : "(unset)");
  std::printf("%-9s %-5s %-8s %8s %9s %9s %9s %9s\n", "phase", "stream", "class", "count", "GB/s", "p50_ms",
              "p95_ms", "p99_ms");
  nlohmann::json rows = nlohmann::json::array();
  double kvP99[3] = {0, 0, 0};  // alone, isolated, shared
  bool pass = true;
  for (const std::string& phase : phases) {
    PhaseResult r = runPhase(o, phase);
    for (uint64_t s : {kKv, kA2a, kCkpt}) {
      if (!r.ran[s]) continue;
      Sample& x = r.s[s];
      const size_t count = x.ms.size();
      const Percentiles p = percentiles(x.ms);
      const double gbps = x.seconds > 0 ? static_cast<double>(x.bytes) / x.seconds / 1e9 : 0;
      const char* cls = phase == "shared" ? "DEFAULT" : className(s);
      std::printf("%-9s %-5s %-8s %8zu %9.3f %9.3f %9.3f %9.3f\n", phase.c_str(), streamName(s), cls, count,
                  gbps, p.p50, p.p95, p.p99);
      rows.push_back({{"phase", phase}, {"stream", streamName(s)}, {"class", cls}, {"count", count},
                      {"goodput_gbps", gbps}, {"p50_ms", p.p50}, {"p95_ms", p.p95}, {"p99_ms", p.p99}});
      if (s == kKv) kvP99[phase == "alone" ? 0 : phase == "isolated" ? 1 : 2] = p.p99;
      if (count == 0 && r.failure.empty()) r.failure = std::string(streamName(s)) + ": nothing completed";
    }
    std::fflush(stdout);
    if (!r.failure.empty()) {
      std::printf("# %s: FAILED: %s\n", phase.c_str(), r.failure.c_str());
      pass = false;
    }
  }
  nlohmann::json ratios = nlohmann::json::object();
  if (kvP99[0] > 0) {
    for (int i : {1, 2}) {
      if (kvP99[i] <= 0) continue;
      const char* what = i == 1 ? "isolated" : "shared";
      const double ratio = kvP99[i] / kvP99[0];
      ratios[std::string("kv_p99_") + what + "_over_alone"] = ratio;
      std::printf("# kv P99 %s / alone: %.2f%s\n", what, ratio, i == 1 ? " (target <= 1.5)" : "");
    }
    if (kvP99[1] > 0 && kvP99[2] > 0)
      std::printf("# isolation: kv P99 %.3f ms against %.3f ms all on DEFAULT (%.2fx lower)\n", kvP99[1],
                  kvP99[2], kvP99[2] / kvP99[1]);
  }
  std::printf("# mix: %s\n", pass ? "every transfer committed, every checked byte right" : "FAILED");
  if (!o.json.empty() || !o.plot.empty()) {
    nlohmann::json doc = {{"meta", {{"tool", "pact-perf mix"}, {"seconds", o.seconds}, {"kv_block", o.kvBlock},
                                    {"kv_blocks", o.kv_blocks}, {"kv_interval_us", o.kv_interval_us},
                                    {"kv_window", o.kv_window}, {"a2a_bytes", o.a2aBytes}, {"a2a_count", o.a2a_count},
                                    {"ckpt_bytes", o.ckptBytes}, {"ckpt_window", o.ckpt_window},
                                    {"PACT_TC_KV", std::getenv("PACT_TC_KV")}, {"PACT_TC_A2A", std::getenv("PACT_TC_A2A")},
                                    {"PACT_TC_CKPT", std::getenv("PACT_TC_CKPT")},
                                    {"UCX_TLS", std::getenv("UCX_TLS") ? std::getenv("UCX_TLS") : ""}, {"pass", pass}}},
                          {"results", rows}, {"ratios", ratios}};
    std::string e;
    if (!writeOutputs(doc, o.json, o.plot, &e)) {
      std::fprintf(stderr, "pact-perf mix: %s\n", e.c_str());
      return 2;
    }
  }
  return pass ? 0 : 1;
}

}  // namespace

void addMixCommand(CLI::App& app, int* exit_code) {
  auto o = std::make_shared<MixOptions>();
  auto n = std::make_shared<MixNcclOptions>();
  CLI::App* c = app.add_subcommand("mix", "classes at once: KV bursts, all-to-all steps and a checkpoint stream between "
                                          "two engines (alone, each on its class, all on DEFAULT), or with --face nccl "
                                          "a bulk and a latency stream through a net plugin, each on its NCCL class");
  c->add_option("--face", o->face, "engine: the transfer engine's classes; nccl: two NCCL traffic classes "
                                   "through a net plugin (two processes)")
      ->check(CLI::IsMember({"engine", "nccl"}))
      ->capture_default_str();
  c->add_option("--seconds", o->seconds, "seconds per phase")->check(CLI::PositiveNumber)->capture_default_str();
  CLI::Option* phases = c->add_option("--phases", o->phases,
                                      "comma-separated; engine: alone, isolated, shared (default all three); "
                                      "nccl: alone, bulk, mixed (default all three)");
  const std::vector<CLI::Option*> engine_only = {
      c->add_option("--kv-block", o->kv_block, "KV block size")->capture_default_str(),
      c->add_option("--kv-blocks", o->kv_blocks, "blocks per KV request")->check(CLI::Range(1, 64))->capture_default_str(),
      c->add_option("--kv-interval-us", o->kv_interval_us, "a KV request every this many microseconds")
          ->check(CLI::Range(0, 10'000'000))->capture_default_str(),
      c->add_option("--kv-window", o->kv_window, "KV requests open at once")->check(CLI::Range(1, 64))->capture_default_str(),
      c->add_option("--a2a-bytes", o->a2a_bytes, "bytes of each all-to-all transfer")->capture_default_str(),
      c->add_option("--a2a-count", o->a2a_count, "transfers per all-to-all step")->check(CLI::Range(1, 64))->capture_default_str(),
      c->add_option("--ckpt-bytes", o->ckpt_bytes, "bytes of each checkpoint transfer")->capture_default_str(),
      c->add_option("--ckpt-window", o->ckpt_window, "checkpoint transfers in flight")->check(CLI::Range(1, 64))->capture_default_str(),
      c->add_option("--kv-profile", o->kv_profile, "PACT_TC_KV when not set")->capture_default_str(),
      c->add_option("--a2a-profile", o->a2a_profile, "PACT_TC_A2A when not set")->capture_default_str(),
      c->add_option("--ckpt-profile", o->ckpt_profile, "PACT_TC_CKPT when not set")->capture_default_str(),
  };
  c->add_option("--json", o->json, "also write the results to this JSON file");
  c->add_option("--plot", o->plot, "also draw each phase's and stream's P50/P95/P99 as bars into this SVG file (pact-plot)");
  const std::vector<CLI::Option*> nccl_only = addMixNcclOptions(*c, n.get());
  c->footer(
      "--face nccl: rank 0 (the parent) sends, rank 1 (a child forked before the plugin opens)\n"
      "receives; the bulk stream (--bulk-tc, 16M messages, window 8, counted at the receiver) and\n"
      "the latency stream (--latency-tc, 256K messages one at a time, one-way latency from a\n"
      "CLOCK_MONOTONIC stamp in the message) each on a comm of its own class, fresh comms per\n"
      "phase: alone (latency only), bulk (bulk only), mixed (both). Class profiles come from\n"
      "PACT_TC_<n>. Targets: latency P99 mixed / alone <= 1.5; bulk goodput / --link-rate >= 0.9.\n"
      "perf/netns-mix.sh runs it between two network namespaces over a tbf-limited veth.");
  c->callback([o, n, phases, engine_only, nccl_only, exit_code] {
    const bool nccl = o->face == "nccl";
    for (const CLI::Option* opt : nccl ? engine_only : nccl_only) {
      if (opt->count() > 0) {
        std::fprintf(stderr, "pact-perf mix: %s applies to --face %s only\n", opt->get_name().c_str(),
                     nccl ? "engine" : "nccl");
        *exit_code = 2;
        return;
      }
    }
    if (!nccl) {
      *exit_code = runMix(*o);
      return;
    }
    n->seconds = o->seconds;
    if (phases->count() > 0) n->phases = o->phases;
    n->json = o->json;
    n->plot = o->plot;
    *exit_code = runMixNccl(*n);
  });
}

}  // namespace pact::perf
