// Workers of `pact-perf kv` (kv.cpp runs them): each owns one transfer engine; step() does its
// application work and is called from one driver thread at a time (kv.cpp assigns each worker to
// one thread for the whole run). The router lives in the prefill workers; decode workers publish
// what it reads (epoch, outstanding bytes) through atomics, and take assignments through an inbox.
#pragma once

#include <pact/pact.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

namespace pact::perf::kv {

using namespace ::pact::xfer;  // the engine's public C++ API

using Clock = std::chrono::steady_clock;
using Tp = Clock::time_point;

struct Options {
  int prefill = 8;
  int decode = 16;
  double seconds = 10;
  std::string block_size = "64K";
  size_t block_bytes = 0;  // parsed block_size
  int blocks = 4;          // KV blocks per request
  int pages = 32;          // KV pages (of block_bytes) per decode worker: its credit budget
  int window = 4;          // requests a prefill worker holds at once (its source slots)
  double decode_ms = 1.0;  // mean time a committed request keeps its pages (uniform +-50%)
  double slow_decode = 0;  // K > 1: decode worker 0 keeps its pages K times longer
  long epoch_switch_after = 0;
  bool no_credits = false;
  int spill = 4;  // --no-credits: spill pages per decode worker, in multiples of --pages
  std::string fault;
  std::string json;
  std::string plot;  // --plot: an SVG of the run (pact-plot)
  std::string trace;
  bool breakdown = false;  // --breakdown (kv_breakdown.h)
  uint64_t seed = 1;
  int threads = 1;
  bool progress_threads = true;  // false: --poll
  int credit_interval_us = 200;
  double deadline_ms = 0;  // per transfer; 0 = the traffic class's
  std::string tc = "KV";
  double drain_s = 10;
  int max_attempts = 8;
};

struct Shared;

struct Assignment {
  pact_key_t key{};
  int prefill = 0;
  Tp assigned{};
};

struct CommitRecord {
  pact_xfer_t xfer = 0;
  pact_key_t key{};
  Tp when{};
};

// A decode worker: a page pool (its credit budget), the commit hook that verifies and commits,
// the "decode" that holds a request's pages for a while, and (--no-credits) a spill area for
// requests that arrive when no page is free.
class Decode {
 public:
  Decode(Shared& shared, int idx);
  Result<void> init();  // engine, memory, hook
  void step(Tp now);
  // End of run (driver threads stopped): releases every open expect.
  void releaseAll();

  // Router side, any thread.
  void assign(const Assignment& a);
  uint64_t epoch() const { return epoch_.load(std::memory_order_acquire); }
  std::atomic<int64_t> outstanding{0};  // bytes assigned and not yet final at the sender

  const int idx;
  const bool slow;
  Engine eng;
  std::string address;
  MemoryRegion pool_mr, spill_mr;

  // Results: written by the owning thread, read after the run.
  std::vector<double> lat_us;
  uint64_t committed = 0, committed_bytes_in_window = 0, expect_aborted = 0, expect_refused = 0;
  uint64_t epoch_switches = 0, peak_bytes = 0, credit_updates = 0;
  std::atomic<uint64_t> miscommits{0}, hook_calls{0};

 private:
  struct Open {
    pact_key_t key{};
    std::vector<int> pages;
    Tp assigned{};
  };
  struct Held {
    Tp until{};
    std::vector<int> pages;
  };

  static int hook(void* user, pact_xfer_t xfer, const pact_key_t* key, pact_peer_t from,
                  const pact_block_t* blocks, size_t count);
  bool takePages(std::vector<int>* out);  // from the pool, else (--no-credits) the spill
  void freePages(const std::vector<int>& pages);
  void drainCommits(Tp now);
  void pollOpen();
  void decodeAndPromote(Tp now);
  void expectWaiting();
  void updateCredit(Tp now);
  double holdUs();

  Shared& s_;
  std::atomic<uint64_t> epoch_{1};
  std::vector<uint8_t> pool_, spill_;
  std::vector<int> free_pool_, free_spill_;
  std::mutex inbox_mu_;
  std::vector<Assignment> inbox_;
  std::mutex commit_mu_;
  std::vector<CommitRecord> commits_;
  std::deque<Assignment> waiting_;
  std::unordered_map<pact_xfer_t, Open> open_;
  std::vector<Held> decoding_;
  std::deque<Held> spilled_;  // committed into spill pages, waiting for pool pages to decode
  int64_t last_credit_ = -1;
  Tp last_credit_at_{};
  Tp switch_due_{};  // when --epoch-switch-after came due
  std::mt19937_64 rng_;
};

// A prefill worker: `window` source slots, each holding one request's KV blocks from its
// creation until its transfer is final; the router picks a decode worker for it.
class Prefill {
 public:
  Prefill(Shared& shared, int idx);
  Result<void> init();
  void step(Tp now);
  void releaseAll();

  const int idx;
  Engine eng;
  MemoryRegion mr;
  std::vector<pact_peer_t> peers;  // by decode index
  std::atomic<int> active{0};      // slots holding a request (read by the main thread)

  uint64_t sent_ok = 0, rerouted = 0, epoch_aborts = 0, dropped = 0, abandoned = 0;
  double router_wait_us = 0;
  std::map<std::string, uint64_t> failures;  // by status name
  // The first failure, with the engine's message where it gave one ("send: PACT_ERR_...: ...").
  std::string firstError;
  // A refusal at submission ("send:" or "query:"): the run itself is wrong, whatever the scenario.
  bool refused = false;

 private:
  enum class SlotState { kIdle, kRouting, kSending };
  struct Slot {
    SlotState state = SlotState::kIdle;
    uint64_t request = 0;
    uint32_t attempt = 0;
    int target = -1, avoid = -1;
    pact_xfer_t xfer = 0;
    Tp routing_since{};
  };
  int route(int avoid);
  void startSend(Slot& slot, size_t index, int target, Tp now);
  void finishSend(Slot& slot, const pact_xfer_info_t& info, Tp now);

  Shared& s_;
  std::vector<uint8_t> mem_;
  std::vector<Slot> slots_;
  uint64_t next_request_ = 0;
};

// What every worker and driver thread shares.
struct Shared {
  Options opt;
  uint64_t request_bytes = 0;
  int epoch_worker = -1;  // the decode worker that switches epochs (--epoch-switch-after)
  std::atomic<bool> running{false};   // workers step (setup done)
  std::atomic<bool> stopping{false};  // no new requests
  std::atomic<uint64_t> commits{0};
  std::atomic<uint64_t> rr{0};
  Tp start{}, stop{};
  std::vector<std::unique_ptr<Decode>> decodes;
  std::vector<std::unique_ptr<Prefill>> prefills;
};

// The seed of block `block` of the transfer key (what the sender wrote there).
uint64_t blockSeed(uint64_t seed, const pact_key_t& key, size_t block);

}  // namespace pact::perf::kv
