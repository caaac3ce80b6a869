// `pact-perf kv`: the deployment of the background article, section 9, on loopback in one process.
//
// The model (kv_worker.{h,cpp}):
//  - A prefill worker holds `--window` requests at once (source slots: the KV it produced and
//    must keep until its transfer is final). A new request takes a free slot at once (closed loop).
//  - The router, for each request, picks a decode worker: with credits, the one with the most
//    spare credit (the budget the receiver granted, read with pact_peer_credit, less the bytes
//    already assigned to it and not final), and only if the request fits; otherwise the request
//    waits at the router (router_wait). With --no-credits: round-robin.
//  - The prefill worker fills the blocks with the key's pattern and calls pact_send; the decode
//    worker gets the assignment and calls pact_expect into free pages of its pool (`--pages` pages
//    of `--block-size`: its credit budget). Commit latency runs from that assignment (just before
//    pact_send) to the receiver's commit hook.
//  - The commit hook checks every byte against the key's pattern (and the epoch); a mismatch is a
//    miscommit (counted, rejected). A committed request keeps its pages for a decode time
//    (--decode-ms, uniform +-50%); decode worker 0 keeps them --slow-decode K times longer. With
//    credits each decode worker sets its budget (pact_set_credit) to the pages not held by decoding
//    requests, so the slow worker's credit shrinks as its pages fill.
//  - --no-credits: every decode worker grants unlimited credit; when its pool is full, it expects
//    into a spill area (--spill times the pool; memory above its budget) and such a request
//    decodes once pool pages free up. Only when the spill is full too does the sender wait.
//  - --epoch-switch-after N: after N commits in all, the last decode worker moves to the next
//    model epoch (pact_set_epoch), at a moment when at least one old-epoch transfer is on its way
//    to it (it holds its expects back, up to 1 s, until an assignment is waiting). Its open
//    transfers and the offers it holds abort with EPOCH_MISMATCH, and the router re-targets those
//    requests to another worker as a new transfer (transfer_id = attempt).
//
// Driver threads (--threads, default 1) each own a fixed set of workers and step them in turn.
// By default every engine has its own progress thread (so the commit hook runs there); with --poll
// the driver threads call pact_progress on their engines before stepping them.
#include "kv.h"

#include "kv_breakdown.h"
#include "kv_worker.h"
#include "peer.h"
#include "report.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace pact::perf {

using namespace ::pact::xfer;  // the engine's public C++ API
namespace {

using kv::Clock;
using kv::Options;
using kv::Shared;

void driveLoop(Shared& s, std::vector<kv::Decode*> decodes, std::vector<kv::Prefill*> prefills,
               const std::atomic<bool>& quit) {
  const bool poll = !s.opt.progress_threads;
  while (!quit.load(std::memory_order_acquire)) {
    const bool run = s.running.load(std::memory_order_acquire);
    for (kv::Decode* d : decodes) {
      if (poll) d->eng.progress(0);
      if (run) d->step(Clock::now());
    }
    for (kv::Prefill* p : prefills) {
      if (poll) p->eng.progress(0);
      if (run) p->step(Clock::now());
    }
    if (!poll) std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

void connectAll(Shared& s) {
  for (auto& p : s.prefills) {
    for (auto& d : s.decodes) {
      auto peer = p->eng.connect(d->address, 10000);
      if (!peer) {
        die("kv: prefill-" + std::to_string(p->idx) + " connect to decode-" +
            std::to_string(d->idx) + " (" + d->address + "): " + peer.error().str());
      }
      p->peers.push_back(*peer);
    }
  }
}

// Every engine's name and the events its trace ring still holds (pact_trace_read), read once.
using Rings = std::vector<std::pair<std::string, std::vector<pact_event_t>>>;
Rings readTraces(Shared& s) {
  Rings rings;
  auto read = [&](Engine& e, std::string name) {
    std::vector<pact_event_t> all, ev(4096);
    uint64_t cursor = 0;
    for (size_t n; (n = e.readTrace(ev, &cursor)) > 0;) all.insert(all.end(), ev.begin(), ev.begin() + static_cast<long>(n));
    rings.emplace_back(std::move(name), std::move(all));
  };
  for (auto& d : s.decodes) read(d->eng, "decode-" + std::to_string(d->idx));
  for (auto& p : s.prefills) read(p->eng, "prefill-" + std::to_string(p->idx));
  return rings;
}

// Writes the rings to path, one JSON object an event.
void dumpTrace(const Rings& rings, const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) die("kv: cannot open --trace file " + path);
  for (const auto& [name, events] : rings) {
    for (const pact_event_t& x : events) {
      std::fprintf(f,
                   "{\"engine\":\"%s\",\"t_ns\":%llu,\"request\":%llu,\"transfer\":%llu,"
                   "\"epoch\":%llu,\"generation\":%u,\"peer\":%llu,\"role\":%u,"
                   "\"state\":%u,\"event\":%u}\n",
                   name.c_str(), static_cast<unsigned long long>(x.time_ns),
                   static_cast<unsigned long long>(x.key.request_id),
                   static_cast<unsigned long long>(x.key.transfer_id),
                   static_cast<unsigned long long>(x.key.model_epoch), x.key.generation,
                   static_cast<unsigned long long>(x.peer), x.role, x.state, x.event);
    }
  }
  std::fclose(f);
}

// Releases every transfer, deregisters every region (progressing the engines while one is still
// busy), reads the engines' registration counters, then destroys the engines. Returns the
// registrations left open or leaked.
uint64_t teardown(Shared& s) {
  for (auto& d : s.decodes) d->releaseAll();
  for (auto& p : s.prefills) p->releaseAll();
  std::vector<MemoryRegion*> regions;
  for (auto& d : s.decodes) regions.insert(regions.end(), {&d->pool_mr, &d->spill_mr});
  for (auto& p : s.prefills) regions.push_back(&p->mr);
  const auto until = Clock::now() + std::chrono::seconds(5);
  for (;;) {
    bool busy = false;
    for (MemoryRegion* r : regions) {
      Result<void> rc = r->deregister();
      if (!rc.ok() && rc.status() == PACT_ERR_BUSY) busy = true;
      if (!rc.ok() && rc.status() != PACT_ERR_BUSY)
        std::fprintf(stderr, "pact-perf kv: deregister: %s\n", rc.error().str().c_str());
    }
    if (!busy || Clock::now() > until) break;
    for (auto& d : s.decodes) d->eng.progress(1);
    for (auto& p : s.prefills) p->eng.progress(1);
  }
  uint64_t leaked = 0;
  std::vector<Engine*> engines;
  for (auto& d : s.decodes) engines.push_back(&d->eng);
  for (auto& p : s.prefills) engines.push_back(&p->eng);
  for (Engine* e : engines) {
    auto st = e->stats();
    if (st) leaked += st->open_registrations;
  }
  // All at once: closing a connection waits for its peer engine to answer, and an engine answers
  // only while something progresses it (here: its own destroy).
  std::vector<std::thread> closers;
  for (Engine* e : engines) closers.emplace_back([e] { e->reset(); });
  for (std::thread& t : closers) t.join();
  return leaked;
}

std::string slowText(double k) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "worker 0 x%g", k);
  return buf;
}

nlohmann::json latencyJson(std::vector<double> v) {
  const Percentiles p = percentiles(v);
  return {{"samples", v.size()}, {"p50_us", p.p50}, {"p95_us", p.p95}, {"p99_us", p.p99}};
}

int runKv(Options opt) {
  if (!parseSize(opt.block_size, &opt.block_bytes) || opt.block_bytes == 0)
    die("kv: bad --block-size " + opt.block_size);
  if (opt.pages < opt.blocks) die("kv: --pages must hold at least one request (--blocks-per-request)");
  if (!opt.fault.empty() && setenv("PACT_FAULT", opt.fault.c_str(), 1) != 0) die("setenv PACT_FAULT");
  if (opt.epoch_switch_after > 0 && opt.decode < 2)
    die("kv: --epoch-switch-after needs at least 2 decode workers (the router re-targets)");

  Shared s;
  s.opt = opt;
  s.request_bytes = static_cast<uint64_t>(opt.blocks) * opt.block_bytes;
  s.epoch_worker = opt.epoch_switch_after > 0 ? opt.decode - 1 : -1;
  watchdog(120, "kv: engine setup");
  for (int i = 0; i < opt.decode; ++i) {
    s.decodes.push_back(std::make_unique<kv::Decode>(s, i));
    if (Result<void> r = s.decodes.back()->init(); !r.ok())
      die("kv: decode-" + std::to_string(i) + ": " + r.error().str());
  }
  for (int i = 0; i < opt.prefill; ++i) {
    s.prefills.push_back(std::make_unique<kv::Prefill>(s, i));
    if (Result<void> r = s.prefills.back()->init(); !r.ok())
      die("kv: prefill-" + std::to_string(i) + ": " + r.error().str());
  }

  // Threads own workers round-robin over one list, so decode and prefill work mixes.
  std::atomic<bool> quit{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < opt.threads; ++t) {
    std::vector<kv::Decode*> ds;
    std::vector<kv::Prefill*> ps;
    for (int w = 0; w < opt.decode + opt.prefill; ++w) {
      if (w % opt.threads != t) continue;
      if (w < opt.decode) {
        ds.push_back(s.decodes[static_cast<size_t>(w)].get());
      } else {
        ps.push_back(s.prefills[static_cast<size_t>(w - opt.decode)].get());
      }
    }
    threads.emplace_back(driveLoop, std::ref(s), ds, ps, std::cref(quit));
  }
  connectAll(s);

  watchdog(static_cast<unsigned>(opt.seconds + opt.drain_s) + 60, "kv: run");
  s.start = Clock::now();
  s.running.store(true, std::memory_order_release);
  std::this_thread::sleep_for(std::chrono::duration<double>(opt.seconds));
  s.stop = Clock::now();
  s.stopping.store(true, std::memory_order_release);
  const auto drain_until = s.stop + std::chrono::duration<double>(opt.drain_s);
  auto busy = [&] {
    int n = 0;
    for (auto& p : s.prefills) n += p->active.load(std::memory_order_relaxed);
    return n;
  };
  while (busy() > 0 && Clock::now() < drain_until)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const int unfinished = busy();
  const double drain_ms = std::chrono::duration<double, std::milli>(Clock::now() - s.stop).count();
  // One more pass so that decode workers take the last commit records.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  quit.store(true, std::memory_order_release);
  for (std::thread& t : threads) t.join();
  // Decode results are complete only after a final step on this thread (nothing else runs now).
  for (auto& d : s.decodes) {
    d->eng.progress(0);
    d->step(Clock::now());
  }

  watchdog(60, "kv: teardown");
  // Engine counters before teardown (releasing open transfers aborts them).
  pact_stats_t rx{}, tx{};
  uint64_t peak_staged = 0, receiver_aborted = 0;
  // Sums the counters of a side's engines (peak staged bytes: the largest of one engine).
  // Every counter summed (pact_stats_t is uint64_t counters only, the engine catalog in order).
  const auto add = [&](pact_stats_t& sum, const pact_stats_t& st) {
    constexpr size_t n = sizeof(pact_stats_t) / sizeof(uint64_t);
    static_assert(n * sizeof(uint64_t) == sizeof(pact_stats_t));
    uint64_t a[n], b[n];
    std::memcpy(a, &sum, sizeof a);
    std::memcpy(b, &st, sizeof b);
    for (size_t i = 0; i < n; ++i) a[i] += b[i];
    std::memcpy(&sum, a, sizeof a);
    peak_staged = std::max(peak_staged, st.peak_staged_bytes);
  };
  for (auto& d : s.decodes)
    if (auto st = d->eng.stats()) add(rx, *st);
  receiver_aborted = rx.aborted;
  for (auto& p : s.prefills)
    if (auto st = p->eng.stats()) add(tx, *st);
  std::vector<pact_event_t> traced;  // --breakdown: every engine's events, read before teardown
  if (!opt.trace.empty() || opt.breakdown) {
    const Rings rings = readTraces(s);
    if (!opt.trace.empty()) dumpTrace(rings, opt.trace);
    if (opt.breakdown)
      for (const auto& [name, events] : rings) traced.insert(traced.end(), events.begin(), events.end());
  }
  const uint64_t leaked = teardown(s);
  watchdog(0, "kv: done");

  // ---- report ----
  std::vector<double> all, healthy, slow;
  uint64_t committed = 0, bytes_in_window = 0, miscommits = 0, expect_aborted = 0,
           expect_refused = 0, peak_receiver = 0;
  nlohmann::json workers = nlohmann::json::array();
  for (auto& d : s.decodes) {
    all.insert(all.end(), d->lat_us.begin(), d->lat_us.end());
    std::vector<double>& group = d->slow ? slow : healthy;
    group.insert(group.end(), d->lat_us.begin(), d->lat_us.end());
    committed += d->committed;
    bytes_in_window += d->committed_bytes_in_window;
    miscommits += d->miscommits.load();
    expect_aborted += d->expect_aborted;
    expect_refused += d->expect_refused;
    peak_receiver = std::max(peak_receiver, d->peak_bytes);
    std::vector<double> v = d->lat_us;
    const Percentiles p = percentiles(v);
    workers.push_back({{"decode", d->idx}, {"slow", d->slow}, {"committed", d->committed},
                       {"p50_commit_us", p.p50}, {"p99_commit_us", p.p99},
                       {"peak_receiver_bytes", d->peak_bytes},
                       {"expect_aborted", d->expect_aborted}, {"epoch_switches", d->epoch_switches},
                       {"credit_updates", d->credit_updates}});
  }
  uint64_t rerouted = 0, epoch_aborts = 0, dropped = 0, abandoned = 0, sent_ok = 0;
  double router_wait_us = 0;
  std::map<std::string, uint64_t> failures;
  std::string firstError;
  bool refused = false;
  for (auto& p : s.prefills) {
    rerouted += p->rerouted;
    epoch_aborts += p->epoch_aborts;
    dropped += p->dropped;
    abandoned += p->abandoned;
    sent_ok += p->sent_ok;
    router_wait_us += p->router_wait_us;
    for (auto& [k, v] : p->failures) failures[k] += v;
    if (firstError.empty()) firstError = p->firstError;
    refused = refused || p->refused;
  }
  std::vector<double> all_c = all, healthy_c = healthy, slow_c = slow;
  const Percentiles pa = percentiles(all_c), ph = percentiles(healthy_c), ps = percentiles(slow_c);
  const double goodput = static_cast<double>(bytes_in_window) / opt.seconds / 1e9;
  const uint64_t budget = static_cast<uint64_t>(opt.pages) * opt.block_bytes;

  std::printf("# pact-perf kv: %d prefill x %d decode, %d x %s blocks per request, %d pages per "
              "decode worker (%s budget), %s, slow decode %s, %.1f s, %d thread(s), %s\n",
              opt.prefill, opt.decode, opt.blocks, formatSize(opt.block_bytes).c_str(), opt.pages,
              formatSize(budget).c_str(), opt.no_credits ? "NO credits (round-robin)" : "credits",
              opt.slow_decode > 1 ? slowText(opt.slow_decode).c_str() : "none",
              opt.seconds, opt.threads, opt.progress_threads ? "engine progress threads" : "polling");
  std::printf("%-26s %12llu  (%.3f GB/s goodput in the timed window)\n", "committed requests",
              static_cast<unsigned long long>(committed), goodput);
  std::printf("%-26s %12s %10s %10s %10s\n", "commit latency (us)", "samples", "p50", "p95", "p99");
  auto row = [](const char* name, size_t n, const Percentiles& p) {
    std::printf("%-26s %12zu %10.0f %10.0f %10.0f\n", name, n, p.p50, p.p95, p.p99);
  };
  row("  all workers", all.size(), pa);
  row("  healthy workers", healthy.size(), ph);
  if (!slow.empty()) row("  slow worker (0)", slow.size(), ps);
  std::printf("%-26s %12llu / %llu  (budget %llu per decode worker)\n",
              "peak staged / receiver B", static_cast<unsigned long long>(peak_staged),
              static_cast<unsigned long long>(peak_receiver), static_cast<unsigned long long>(budget));
  std::printf("%-26s %12.1f / %.1f\n", "credit stall / router ms", rx.credit_stall_ns / 1e6,
              router_wait_us / 1e3);
  std::printf("%-26s %llu aborted (sender) %llu aborted (receiver), %llu epoch aborts, %llu "
              "re-targeted, %llu retried, %llu duplicates, %llu stale, %llu dropped\n", "transfers",
              static_cast<unsigned long long>(tx.aborted),
              static_cast<unsigned long long>(receiver_aborted),
              static_cast<unsigned long long>(epoch_aborts),
              static_cast<unsigned long long>(rerouted),
              static_cast<unsigned long long>(tx.retried + rx.retried),
              static_cast<unsigned long long>(tx.duplicates_dropped + rx.duplicates_dropped),
              static_cast<unsigned long long>(tx.stale_rejected + rx.stale_rejected),
              static_cast<unsigned long long>(dropped));
  std::printf("%-26s %12llu\n%-26s %12llu\n", "miscommits", static_cast<unsigned long long>(miscommits),
              "leaked registrations", static_cast<unsigned long long>(leaked));
  if (unfinished > 0)
    std::printf("# %d request(s) still in flight %.0f ms after the end (released)\n", unfinished,
                drain_ms);
  for (auto& [k, v] : failures)
    std::printf("# failures %s: %llu\n", k.c_str(), static_cast<unsigned long long>(v));
  if (!firstError.empty()) std::printf("# first error: %s\n", firstError.c_str());
  nlohmann::json phases = nullptr;
  if (opt.breakdown) phases = kv::breakdown(traced, stdout);
  std::fflush(stdout);

  // Failed: a miscommit or leak, a request the engine refused, or (unless the scenario injects
  // faults or switches epochs, whose point is failures) a transfer that failed or a request that
  // never committed.
  const bool expectsFailures = !opt.fault.empty() || opt.epoch_switch_after > 0;
  const bool failed = miscommits != 0 || leaked != 0 || refused ||
                      (!expectsFailures && (!failures.empty() || dropped != 0));
  if (failed && !firstError.empty()) std::fprintf(stderr, "pact-perf kv: %s\n", firstError.c_str());
  int rc = failed ? 1 : 0;
  if (!opt.json.empty() || !opt.plot.empty()) {
    nlohmann::json doc = {
        {"committed", committed},
        {"aborted", tx.aborted},
        {"retried", tx.retried + rx.retried},
        {"duplicates_dropped", tx.duplicates_dropped + rx.duplicates_dropped},
        {"stale_rejected", tx.stale_rejected + rx.stale_rejected},
        {"miscommits", miscommits},
        {"leaked_registrations", leaked},
        {"p50_commit_us", pa.p50},
        {"p95_commit_us", pa.p95},
        {"p99_commit_us", pa.p99},
        {"goodput_gbps", goodput},
        {"credit_stall_ms", rx.credit_stall_ns / 1e6},
        {"peak_staged_bytes", peak_staged},
        {"credit_budget_bytes", budget},
        {"healthy_p50_commit_us", ph.p50},
        {"healthy_p95_commit_us", ph.p95},
        {"healthy_p99_commit_us", ph.p99},
        {"slow_p50_commit_us", slow.empty() ? nlohmann::json(nullptr) : nlohmann::json(ps.p50)},
        {"slow_p99_commit_us", slow.empty() ? nlohmann::json(nullptr) : nlohmann::json(ps.p99)},
        {"peak_receiver_bytes", peak_receiver},
        {"receiver_aborted", receiver_aborted},
        {"epoch_aborts", epoch_aborts},
        {"rerouted", rerouted},
        {"expect_aborted", expect_aborted},
        {"expect_refused", expect_refused},
        {"dropped", dropped},
        {"unfinished_at_end", unfinished},
        {"router_wait_ms", router_wait_us / 1e3},
        {"engine_committed_receiver", rx.committed},
        {"engine_committed_sender", tx.committed},
        {"checksum_failures", rx.checksum_failures},
        {"bytes_received", rx.bytes_received},
        {"bytes_sent", tx.bytes_sent},
        {"failures", failures},
        {"first_error", firstError},
        {"breakdown", phases},
        {"latency", {{"all", latencyJson(all)}, {"healthy", latencyJson(healthy)},
                     {"slow", latencyJson(slow)}}},
        {"workers", workers},
        {"meta",
         {{"tool", "pact-perf kv"}, {"prefill", opt.prefill}, {"decode", opt.decode},
          {"seconds", opt.seconds}, {"block_bytes", opt.block_bytes},
          {"blocks_per_request", opt.blocks}, {"pages", opt.pages}, {"window", opt.window},
          {"decode_ms", opt.decode_ms}, {"slow_decode", opt.slow_decode},
          {"epoch_switch_after", opt.epoch_switch_after}, {"no_credits", opt.no_credits},
          {"spill", opt.spill}, {"fault", opt.fault}, {"seed", opt.seed}, {"threads", opt.threads},
          {"progress_threads", opt.progress_threads},
          {"credit_interval_us", opt.credit_interval_us}, {"deadline_ms", opt.deadline_ms},
          {"traffic_class", opt.tc}}}};
    std::string err;
    if (!writeOutputs(doc, opt.json, opt.plot, &err)) {
      std::fprintf(stderr, "pact-perf kv: %s\n", err.c_str());
      rc = 1;
    }
  }
  return rc;
}

}  // namespace

void addKvCommand(CLI::App& app, int* exit_code) {
  auto o = std::make_shared<Options>();
  CLI::App* c = app.add_subcommand(
      "kv", "KV-cache transfer from prefill to decode workers through the transfer engine");
  c->add_option("--prefill", o->prefill, "prefill workers (senders)")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  c->add_option("--decode", o->decode, "decode workers (receivers)")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  c->add_option("--seconds", o->seconds, "timed run")->check(CLI::Range(0.1, 3600.0))->capture_default_str();
  c->add_option("--block-size", o->block_size, "KV block (= page) size")->capture_default_str();
  c->add_option("--blocks-per-request", o->blocks, "KV blocks per request")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  c->add_option("--pages", o->pages, "KV pages per decode worker: its credit budget")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  c->add_option("--window", o->window, "requests a prefill worker holds at once (source slots)")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  c->add_option("--decode-ms", o->decode_ms,
                "mean time a committed request keeps its pages (uniform +-50%)")
      ->check(CLI::Range(0.0, 60000.0))
      ->capture_default_str();
  c->add_option("--slow-decode", o->slow_decode,
                "K: decode worker 0 keeps its pages K times longer (0 or 1 = no slow worker)")
      ->check(CLI::Range(0.0, 1e6))
      ->capture_default_str();
  c->add_option("--epoch-switch-after", o->epoch_switch_after,
                "after N commits the last decode worker moves to a new model epoch (0 = never)")
      ->check(CLI::Range(0L, 1L << 40))
      ->capture_default_str();
  c->add_flag("--no-credits", o->no_credits,
              "receivers grant unlimited credit and spill; the router is round-robin");
  c->add_option("--spill", o->spill, "--no-credits: spill area per decode worker, x --pages")
      ->check(CLI::Range(0, 1024))
      ->capture_default_str();
  c->add_option("--fault", o->fault, "PACT_FAULT for the engines (passed through)");
  c->add_option("--json", o->json, "also write the results to this JSON file");
  c->add_option("--plot", o->plot, "also draw the commit latency percentiles (all, healthy, slow requests) into this SVG file (pact-plot)");
  c->add_flag("--breakdown", o->breakdown,
              "per request, the time in each phase of its transfer (from the engines' trace rings: "
              "waiting for the receiver, for credit, on the wire, landed to verified, verified to committed) "
              "and the send-to-commit total, with percentiles, and the phase that dominates the slowest 1%");
  c->add_option("--trace", o->trace,
                "write every engine's transfer trace (pact_trace_read) here, a JSON object a line");
  c->add_option("--seed", o->seed, "data patterns and decode-time jitter")->capture_default_str();
  c->add_option("--threads", o->threads, "driver threads (each owns a share of the workers)")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  c->add_flag("--progress-threads,!--poll", o->progress_threads,
              "--progress-threads (default; faster on 2 cores): every engine has its own progress "
              "thread; --poll: the driver threads call pact_progress on their engines instead");
  c->add_option("--credit-interval-us", o->credit_interval_us,
                "a decode worker grants a growing budget at most this often (shrinking: at once)")
      ->check(CLI::Range(0, 10000000))
      ->capture_default_str();
  c->add_option("--deadline-ms", o->deadline_ms, "per-transfer deadline (0 = the class's)")
      ->check(CLI::Range(0.0, 3600e3))
      ->capture_default_str();
  c->add_option("--tc", o->tc, "traffic class of the transfers (its PACT_TC_<NAME> profile)")->capture_default_str();
  c->add_option("--drain", o->drain_s, "seconds to let in-flight requests finish after the run")
      ->check(CLI::Range(0.0, 600.0))
      ->capture_default_str();
  c->footer(
      "Commit latency: from the router's assignment (just before pact_send) to the receiver's\n"
      "commit hook, per transfer. goodput_gbps: bytes of requests committed during the timed\n"
      "window / --seconds (1e9 B/s). peak_staged_bytes: the largest pact_stats peak_staged_bytes\n"
      "of a decode engine; credit_budget_bytes: one decode worker's page pool (--pages x\n"
      "--block-size); peak_receiver_bytes: the most pool + spill memory a decode worker held.\n"
      "committed: requests committed (commit hooks that accepted); aborted: the prefill engines'\n"
      "aborted transfers (receiver_aborted: the decode engines'); retried, duplicates_dropped,\n"
      "stale_rejected: pact_stats summed over all engines; rerouted: new transfers the router\n"
      "made for aborted ones.\n"
      "Exit status 1 when miscommits or leaked registrations are not 0. Set UCX_NET_DEVICES=lo\n"
      "PACT_NET_DEVICES=lo for loopback.");
  c->callback([o, exit_code] { *exit_code = runKv(*o); });
}

}  // namespace pact::perf
