// `pact-perf a2a`: all-to-all steps through pact groups. N engines live in this process, each
// connected to every rank (itself included), with one group per rank and one thread per rank.
// Step g (generation g, epoch 1) sends chunk [r -> q] to every rank q and expects one from each;
// the thread waits for the step (pact_group_wait progresses its engine), then checks every
// received chunk byte for byte against the pattern of (sender, receiver, epoch, generation).
// Send chunks are double-buffered by generation parity, so a chunk still in flight for step g is
// never overwritten by step g+1's data.
#include "a2a.h"

#include "pattern.h"
#include "peer.h"
#include "report.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <pact/pact.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <memory>
#include <thread>
#include <vector>

namespace pact::perf {
namespace {

using namespace ::pact::xfer;  // the engine's public C++ API

using Clock = std::chrono::steady_clock;

struct A2aOptions {
  int ranks = 4;
  double seconds = 5;
  std::string chunk = "256K";
  size_t chunk_bytes = 0;
  std::string json;
  uint64_t seed = 1;
  bool progress_threads = false;
  double deadline_ms = 0;
  int wait_ms = 10000;
};

constexpr uint64_t kEpoch = 1;
constexpr uint64_t kGroupId = 0xa2a;

struct Rank {
  int idx = 0;
  Engine eng;
  std::string address;
  std::vector<uint8_t> send_mem, recv_mem;  // send: 2 x ranks chunks (by parity); recv: ranks
  MemoryRegion send_mr, recv_mr;
  std::vector<pact_peer_t> peers;
  Group group;
  // results (this rank's thread)
  std::vector<double> step_us;
  uint64_t steps_ok = 0, miscommits = 0, bytes_ok = 0;
  std::string failure;
};

uint64_t chunkSeed(uint64_t seed, int from, int to, uint32_t gen) {
  return patternSeed(seed, static_cast<uint64_t>(from), static_cast<uint64_t>(to), kEpoch, gen);
}

// The rank that first sees the time is up names the last step: every rank is at most one step
// ahead of the slowest (a step needs every rank's chunk), so all of them can still finish it.
void rankLoop(const A2aOptions& o, Rank& r, int n, std::atomic<uint32_t>& last_step,
              Clock::time_point end) {
  const size_t chunk = o.chunk_bytes;
  const uint64_t deadline_us = static_cast<uint64_t>(o.deadline_ms * 1000.0);
  for (uint32_t gen = 1;; ++gen) {
    uint32_t last = last_step.load(std::memory_order_acquire);
    if (last == std::numeric_limits<uint32_t>::max() && Clock::now() >= end) {
      last_step.compare_exchange_strong(last, gen, std::memory_order_acq_rel);
      last = last_step.load(std::memory_order_acquire);
    }
    if (gen > last) return;
    const size_t half = (gen % 2) * static_cast<size_t>(n) * chunk;
    std::vector<pact_block_t> send, recv;
    for (int q = 0; q < n; ++q) {
      const size_t off = half + static_cast<size_t>(q) * chunk;
      fillPattern(r.send_mem.data() + off, chunk, chunkSeed(o.seed, r.idx, q, gen));
      send.push_back(r.send_mr.block(off, chunk));
      recv.push_back(r.recv_mr.block(static_cast<size_t>(q) * chunk, chunk));
    }
    const auto t0 = Clock::now();
    Result<void> rc = r.group.step(kEpoch, gen, send, recv, deadline_us);
    if (rc.ok()) rc = r.group.wait(o.wait_ms);
    const auto t1 = Clock::now();
    if (!rc.ok()) {
      r.failure = "step " + std::to_string(gen) + ": " + rc.error().str();
      last_step.store(0, std::memory_order_release);  // the others cannot finish without us
      return;
    }
    for (int q = 0; q < n; ++q) {
      if (!checkPattern(r.recv_mem.data() + static_cast<size_t>(q) * chunk, chunk,
                        chunkSeed(o.seed, q, r.idx, gen)))
        ++r.miscommits;
    }
    r.step_us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    ++r.steps_ok;
    r.bytes_ok += static_cast<uint64_t>(n) * chunk;
  }
}

void setup(const A2aOptions& o, std::vector<std::unique_ptr<Rank>>& ranks) {
  const int n = o.ranks;
  const size_t chunk = o.chunk_bytes;
  for (int i = 0; i < n; ++i) {
    auto r = std::make_unique<Rank>();
    r->idx = i;
    EngineConfig c;
    c.name = "rank-" + std::to_string(i);
    c.listen_ip = "127.0.0.1";
    c.model_epoch = kEpoch;
    c.progress_thread = o.progress_threads;
    auto e = Engine::create(c);
    if (!e) die("a2a: rank " + std::to_string(i) + ": " + e.error().str());
    r->eng = std::move(e).value();
    auto a = r->eng.address();
    if (!a) die("a2a: address: " + a.error().str());
    r->address = *a;
    r->send_mem.assign(2 * static_cast<size_t>(n) * chunk, 0);
    r->recv_mem.assign(static_cast<size_t>(n) * chunk, 0);
    auto sm = r->eng.registerMemory(r->send_mem.data(), r->send_mem.size());
    auto rm = r->eng.registerMemory(r->recv_mem.data(), r->recv_mem.size());
    if (!sm || !rm) die("a2a: register: " + (sm ? rm.error() : sm.error()).str());
    r->send_mr = std::move(sm).value();
    r->recv_mr = std::move(rm).value();
    ranks.push_back(std::move(r));
  }
  // Connecting blocks on the connecting engine only: progress the others meanwhile.
  std::atomic<bool> done{false};
  std::thread helper([&] {
    while (!done.load(std::memory_order_acquire))
      for (auto& r : ranks) r->eng.progress(0);
  });
  for (auto& r : ranks) {
    for (auto& q : ranks) {
      auto p = r->eng.connect(q->address, 10000);
      if (!p) die("a2a: rank " + std::to_string(r->idx) + " connect to rank " +
                  std::to_string(q->idx) + ": " + p.error().str());
      r->peers.push_back(*p);
    }
  }
  done.store(true, std::memory_order_release);
  helper.join();
  for (auto& r : ranks) {
    auto g = r->eng.createGroup(kGroupId, r->peers, static_cast<uint32_t>(r->idx));
    if (!g) die("a2a: rank " + std::to_string(r->idx) + " group: " + g.error().str());
    r->group = std::move(g).value();
  }
}

int runA2a(A2aOptions o) {
  if (!parseSize(o.chunk, &o.chunk_bytes) || o.chunk_bytes == 0) die("a2a: bad --chunk " + o.chunk);
  watchdog(120, "a2a: setup");
  std::vector<std::unique_ptr<Rank>> ranks;
  setup(o, ranks);

  watchdog(static_cast<unsigned>(o.seconds) + static_cast<unsigned>(o.wait_ms / 1000) * 2 + 60,
           "a2a: run");
  std::atomic<uint32_t> last_step{std::numeric_limits<uint32_t>::max()};
  const auto start = Clock::now();
  const auto end = start + std::chrono::duration_cast<Clock::duration>(
                               std::chrono::duration<double>(o.seconds));
  std::vector<std::thread> threads;
  for (auto& r : ranks)
    threads.emplace_back(rankLoop, std::cref(o), std::ref(*r), o.ranks, std::ref(last_step), end);
  for (std::thread& t : threads) t.join();
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();

  watchdog(60, "a2a: teardown");
  pact_stats_t sum{};
  uint64_t peak_staged = 0;
  for (auto& r : ranks) {
    auto st = r->eng.stats();
    if (!st) continue;
    sum.committed += st->committed;
    sum.aborted += st->aborted;
    sum.retried += st->retried;
    sum.duplicates_dropped += st->duplicates_dropped;
    sum.stale_rejected += st->stale_rejected;
    sum.credit_stall_ns += st->credit_stall_ns;
    peak_staged = std::max(peak_staged, st->peak_staged_bytes);
  }
  uint64_t leaked = 0;
  for (auto& r : ranks) {
    r->group.reset();
    for (MemoryRegion* m : {&r->send_mr, &r->recv_mr}) {
      Result<void> rc = m->deregister();
      for (int i = 0; i < 1000 && !rc.ok() && rc.status() == PACT_ERR_BUSY; ++i) {
        r->eng.progress(1);
        rc = m->deregister();
      }
      if (!rc.ok()) std::fprintf(stderr, "pact-perf a2a: deregister: %s\n", rc.error().str().c_str());
    }
    auto st = r->eng.stats();
    if (st) leaked += st->open_registrations;
  }
  // All at once: closing a connection waits for the peer engine, which answers only while
  // something progresses it (here: its own destroy).
  std::vector<std::thread> closers;
  for (auto& r : ranks) closers.emplace_back([&r] { r->eng.reset(); });
  for (std::thread& t : closers) t.join();
  watchdog(0, "a2a: done");

  std::vector<double> lat;
  uint64_t steps = std::numeric_limits<uint64_t>::max(), chunks = 0, miscommits = 0, bytes = 0;
  std::string failures;
  for (auto& r : ranks) {
    lat.insert(lat.end(), r->step_us.begin(), r->step_us.end());
    steps = std::min(steps, r->steps_ok);
    chunks += r->steps_ok * static_cast<uint64_t>(o.ranks);
    miscommits += r->miscommits;
    bytes += r->bytes_ok;
    if (!r->failure.empty()) failures += "rank " + std::to_string(r->idx) + " " + r->failure + "; ";
  }
  const size_t samples = lat.size();
  const Percentiles p = percentiles(lat);
  const double goodput = static_cast<double>(bytes) / elapsed / 1e9;
  std::printf("# pact-perf a2a: %d ranks, chunk %s, %.1f s (%.2f s with the last step), %s\n",
              o.ranks, formatSize(o.chunk_bytes).c_str(), o.seconds, elapsed,
              o.progress_threads ? "engine progress threads" : "progress in pact_group_wait");
  std::printf("%-22s %12llu  (%.1f steps/s, %llu chunks)\n", "steps committed",
              static_cast<unsigned long long>(steps), static_cast<double>(steps) / elapsed,
              static_cast<unsigned long long>(chunks));
  std::printf("%-22s %12zu samples  p50 %.0f  p95 %.0f  p99 %.0f\n", "step latency (us)", samples,
              p.p50, p.p95, p.p99);
  std::printf("%-22s %12.3f GB/s\n", "goodput", goodput);
  std::printf("%-22s %llu aborted, %llu retried, %llu duplicates, %llu stale\n", "engine",
              static_cast<unsigned long long>(sum.aborted), static_cast<unsigned long long>(sum.retried),
              static_cast<unsigned long long>(sum.duplicates_dropped),
              static_cast<unsigned long long>(sum.stale_rejected));
  std::printf("%-22s %12llu\n%-22s %12llu\n", "miscommits", static_cast<unsigned long long>(miscommits),
              "leaked registrations", static_cast<unsigned long long>(leaked));
  if (!failures.empty()) std::printf("# failed: %s\n", failures.c_str());
  std::fflush(stdout);

  int rc = miscommits == 0 && leaked == 0 && failures.empty() ? 0 : 1;
  if (!o.json.empty()) {
    nlohmann::json doc = {
        {"committed", steps},
        {"aborted", sum.aborted},
        {"retried", sum.retried},
        {"duplicates_dropped", sum.duplicates_dropped},
        {"stale_rejected", sum.stale_rejected},
        {"miscommits", miscommits},
        {"leaked_registrations", leaked},
        {"p50_commit_us", p.p50},
        {"p95_commit_us", p.p95},
        {"p99_commit_us", p.p99},
        {"goodput_gbps", goodput},
        {"credit_stall_ms", sum.credit_stall_ns / 1e6},
        {"peak_staged_bytes", peak_staged},
        {"credit_budget_bytes", 0},
        {"steps_per_s", static_cast<double>(steps) / elapsed},
        {"chunks_committed", chunks},
        {"engine_committed", sum.committed},
        {"failures", failures},
        {"meta",
         {{"tool", "pact-perf a2a"}, {"ranks", o.ranks}, {"chunk_bytes", o.chunk_bytes},
          {"seconds", o.seconds}, {"elapsed_s", elapsed}, {"seed", o.seed},
          {"progress_threads", o.progress_threads}, {"deadline_ms", o.deadline_ms}}}};
    std::string err;
    if (!writeJson(o.json, doc, &err)) {
      std::fprintf(stderr, "pact-perf a2a: %s\n", err.c_str());
      rc = 1;
    }
  }
  return rc;
}

}  // namespace

void addA2aCommand(CLI::App& app, int* exit_code) {
  auto o = std::make_shared<A2aOptions>();
  CLI::App* c = app.add_subcommand("a2a", "all-to-all steps through transfer-engine groups");
  c->add_option("--ranks", o->ranks, "ranks (engines in this process)")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  c->add_option("--seconds", o->seconds, "timed run")->check(CLI::Range(0.1, 3600.0))->capture_default_str();
  c->add_option("--chunk", o->chunk, "bytes each rank sends to each rank per step")
      ->capture_default_str();
  c->add_option("--json", o->json, "also write the results to this JSON file");
  c->add_option("--seed", o->seed, "data patterns")->capture_default_str();
  c->add_flag("--progress-threads", o->progress_threads,
              "one engine progress thread per engine (default: pact_group_wait progresses)");
  c->add_option("--deadline-ms", o->deadline_ms, "per-step deadline (0 = the class's)")
      ->check(CLI::Range(0.0, 3600e3))
      ->capture_default_str();
  c->add_option("--wait-ms", o->wait_ms, "pact_group_wait timeout per step")
      ->check(CLI::Range(1, 600000))
      ->capture_default_str();
  c->footer(
      "committed: steps every rank committed (chunks_committed = steps x ranks per rank, summed).\n"
      "Latency: per rank and step, from pact_group_step to pact_group_wait returning OK.\n"
      "goodput_gbps: bytes received in committed steps (every chunk, the rank's own included)\n"
      "/ elapsed seconds. miscommits: received chunks whose bytes differ from what was sent.\n"
      "Exit status 1 on a miscommit, a leaked registration or a failed step.");
  c->callback([o, exit_code] { *exit_code = runA2a(*o); });
}

}  // namespace pact::perf
