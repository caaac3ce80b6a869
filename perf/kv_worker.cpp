// Prefill and decode workers of `pact-perf kv`; the model is described at the top of kv.cpp.
#include "kv_worker.h"

#include "pattern.h"

#include <algorithm>
#include <limits>

namespace pact::perf::kv {

namespace {

double usBetween(Tp a, Tp b) { return std::chrono::duration<double, std::micro>(b - a).count(); }

uint64_t deadlineUs(const Options& o) { return static_cast<uint64_t>(o.deadline_ms * 1000.0); }

const char* trafficClass(const Options& o) { return o.tc.empty() ? nullptr : o.tc.c_str(); }

}  // namespace

uint64_t blockSeed(uint64_t seed, const pact_key_t& key, size_t block) {
  return patternSeed(seed, key.request_id, key.transfer_id,
                     key.model_epoch ^ (static_cast<uint64_t>(key.generation) << 48), block);
}

// ---- decode ------------------------------------------------------------------------------------

Decode::Decode(Shared& shared, int i)
    : idx(i),
      slow(i == 0 && shared.opt.slow_decode > 1),
      s_(shared),
      rng_(shared.opt.seed * 7919 + static_cast<uint64_t>(i)) {}

Result<void> Decode::init() {
  const Options& o = s_.opt;
  EngineConfig c;
  c.name = "decode-" + std::to_string(idx);
  c.listen_ip = "127.0.0.1";
  c.model_epoch = 1;
  c.credit_budget = o.no_credits ? 0 : static_cast<uint64_t>(o.pages) * o.block_bytes;
  c.progress_thread = o.progress_threads;
  auto e = Engine::create(c);
  if (!e) return e.error();
  eng = std::move(e).value();
  auto a = eng.address();
  if (!a) return a.error();
  address = *a;
  pool_.assign(static_cast<size_t>(o.pages) * o.block_bytes, 0);
  auto m = eng.registerMemory(pool_.data(), pool_.size());
  if (!m) return m.error();
  pool_mr = std::move(m).value();
  for (int p = 0; p < o.pages; ++p) free_pool_.push_back(p);
  if (o.no_credits && o.spill > 0) {
    const int n = o.spill * o.pages;
    spill_.assign(static_cast<size_t>(n) * o.block_bytes, 0);
    auto sm = eng.registerMemory(spill_.data(), spill_.size());
    if (!sm) return sm.error();
    spill_mr = std::move(sm).value();
    for (int p = 0; p < n; ++p) free_spill_.push_back(o.pages + p);
  }
  return eng.setCommitHook(&Decode::hook, this);
}

void Decode::assign(const Assignment& a) {
  std::lock_guard lock(inbox_mu_);
  inbox_.push_back(a);
}

// Runs on whichever thread progresses the engine, with the engine lock held: touches only
// immutable state, atomics and the commit queue.
int Decode::hook(void* user, pact_xfer_t xfer, const pact_key_t* key, pact_peer_t /*from*/,
                 const pact_block_t* blocks, size_t count) {
  auto* d = static_cast<Decode*>(user);
  const Options& o = d->s_.opt;
  d->hook_calls.fetch_add(1, std::memory_order_relaxed);
  bool ok = count == static_cast<size_t>(o.blocks) && key->model_epoch == d->epoch();
  for (size_t i = 0; ok && i < count; ++i) {
    const pact_block_t& b = blocks[i];
    const std::vector<uint8_t>* area = b.mr == d->pool_mr.get()    ? &d->pool_
                                       : b.mr == d->spill_mr.get() ? &d->spill_
                                                                   : nullptr;
    ok = area != nullptr && b.length == o.block_bytes && b.offset + b.length <= area->size() &&
         checkPattern(area->data() + b.offset, b.length, blockSeed(o.seed, *key, i));
  }
  if (!ok) {
    d->miscommits.fetch_add(1, std::memory_order_relaxed);
    return 1;  // reject: never visible to decode
  }
  std::lock_guard lock(d->commit_mu_);
  d->commits_.push_back({xfer, *key, Clock::now()});
  return 0;
}

bool Decode::takePages(std::vector<int>* out) {
  const size_t n = static_cast<size_t>(s_.opt.blocks);
  std::vector<int>* from = nullptr;
  if (spilled_.empty() && free_pool_.size() >= n) {
    from = &free_pool_;
  } else if (free_spill_.size() >= n) {
    from = &free_spill_;
  } else {
    return false;
  }
  out->assign(from->end() - static_cast<std::ptrdiff_t>(n), from->end());
  from->resize(from->size() - n);
  return true;
}

void Decode::freePages(const std::vector<int>& pages) {
  for (int p : pages) (p < s_.opt.pages ? free_pool_ : free_spill_).push_back(p);
}

void Decode::drainCommits(Tp now) {
  std::vector<CommitRecord> recs;
  {
    std::lock_guard lock(commit_mu_);
    recs.swap(commits_);
  }
  (void)now;
  for (const CommitRecord& r : recs) {
    auto it = open_.find(r.xfer);
    if (it == open_.end()) {
      miscommits.fetch_add(1, std::memory_order_relaxed);  // committed, but not expected here
      continue;
    }
    lat_us.push_back(usBetween(it->second.assigned, r.when));
    ++committed;
    const bool in_window = !s_.stopping.load(std::memory_order_acquire) || r.when <= s_.stop;
    if (in_window) committed_bytes_in_window += s_.request_bytes;
    s_.commits.fetch_add(1, std::memory_order_relaxed);
    Held h{r.when + std::chrono::microseconds(static_cast<int64_t>(holdUs())),
           std::move(it->second.pages)};
    if (h.pages.front() < s_.opt.pages) {
      decoding_.push_back(std::move(h));
    } else {
      spilled_.push_back(std::move(h));
    }
    eng.release(r.xfer).ignore();
    open_.erase(it);
  }
}

// Ends (frees the pages of) every expect the engine aborted: epoch change, deadline, peer lost.
void Decode::pollOpen() {
  for (auto it = open_.begin(); it != open_.end();) {
    auto info = eng.query(it->first);
    if (!info || !info->final || info->result == PACT_OK) {
      ++it;  // open, or committed with its record on the way
      continue;
    }
    ++expect_aborted;
    freePages(it->second.pages);
    eng.release(it->first).ignore();
    it = open_.erase(it);
  }
}

void Decode::decodeAndPromote(Tp now) {
  for (size_t i = 0; i < decoding_.size();) {
    if (decoding_[i].until <= now) {
      freePages(decoding_[i].pages);
      decoding_[i] = std::move(decoding_.back());
      decoding_.pop_back();
    } else {
      ++i;
    }
  }
  // A spilled request decodes once pool pages are free (its KV moves in).
  const size_t n = static_cast<size_t>(s_.opt.blocks);
  while (!spilled_.empty() && free_pool_.size() >= n) {
    Held h = std::move(spilled_.front());
    spilled_.pop_front();
    freePages(h.pages);
    h.pages.assign(free_pool_.end() - static_cast<std::ptrdiff_t>(n), free_pool_.end());
    free_pool_.resize(free_pool_.size() - n);
    h.until = now + std::chrono::microseconds(static_cast<int64_t>(holdUs()));
    decoding_.push_back(std::move(h));
  }
}

void Decode::expectWaiting() {
  const Options& o = s_.opt;
  while (!waiting_.empty()) {
    std::vector<int> pages;
    if (!takePages(&pages)) return;
    const Assignment a = waiting_.front();
    waiting_.pop_front();
    std::vector<pact_block_t> blocks;
    for (int p : pages) {
      blocks.push_back(p < o.pages ? pool_mr.block(static_cast<uint64_t>(p) * o.block_bytes,
                                                   o.block_bytes)
                                   : spill_mr.block(static_cast<uint64_t>(p - o.pages) *
                                                        o.block_bytes,
                                                    o.block_bytes));
    }
    auto x = eng.expect(a.key, blocks, deadlineUs(o), trafficClass(o));
    if (!x) {
      freePages(pages);
      ++expect_refused;  // the key's epoch is not ours any more; the sender hears it too
      continue;
    }
    open_[*x] = Open{a.key, std::move(pages), a.assigned};
  }
}

// Credit = pages not held by committed requests (the engine's staged bytes live in the rest).
// A shrinking budget is granted at once; a growing one at most every --credit-interval-us
// (each update is a message to every sender), unless the last one left less than a request.
void Decode::updateCredit(Tp now) {
  if (s_.opt.no_credits) return;
  size_t held = 0;
  for (const Held& h : decoding_) held += h.pages.size();
  const int64_t bytes =
      (static_cast<int64_t>(s_.opt.pages) - static_cast<int64_t>(held)) *
      static_cast<int64_t>(s_.opt.block_bytes);
  if (bytes == last_credit_) return;
  const bool grow = bytes > last_credit_;
  if (grow && last_credit_ >= static_cast<int64_t>(s_.request_bytes) &&
      now - last_credit_at_ < std::chrono::microseconds(s_.opt.credit_interval_us))
    return;
  if (eng.setCredit(0, static_cast<uint64_t>(std::max<int64_t>(bytes, 0))).ok()) {
    last_credit_ = bytes;
    last_credit_at_ = now;
    ++credit_updates;
  }
}

double Decode::holdUs() {
  std::uniform_real_distribution<double> jitter(0.5, 1.5);
  return s_.opt.decode_ms * 1000.0 * (slow ? s_.opt.slow_decode : 1.0) * jitter(rng_);
}

void Decode::step(Tp now) {
  {
    std::lock_guard lock(inbox_mu_);
    for (const Assignment& a : inbox_) waiting_.push_back(a);
    inbox_.clear();
  }
  drainCommits(now);
  pollOpen();
  decodeAndPromote(now);
  const Options& o = s_.opt;
  if (idx == s_.epoch_worker && epoch_switches == 0 &&
      s_.commits.load(std::memory_order_relaxed) >= static_cast<uint64_t>(o.epoch_switch_after)) {
    // Hot update: a new model epoch. It waits (up to 1 s, expecting nothing meanwhile) until an
    // assignment of the old epoch is here, so that at least one transfer is caught mid-way.
    // Our atomic moves after the engine's, so the hook never sees an old-epoch commit as current.
    if (switch_due_ == Tp{}) switch_due_ = now;
    if (!waiting_.empty() || now - switch_due_ > std::chrono::seconds(1)) {
      if (eng.setEpoch(epoch() + 1).ok()) {
        epoch_.fetch_add(1, std::memory_order_acq_rel);
        ++epoch_switches;
      }
    } else {
      updateCredit(now);
      return;
    }
  }
  expectWaiting();
  updateCredit(now);
  const uint64_t in_use =
      (static_cast<uint64_t>(o.pages) - free_pool_.size() +
       (spill_.size() / o.block_bytes - free_spill_.size())) * o.block_bytes;
  peak_bytes = std::max(peak_bytes, in_use);
}

void Decode::releaseAll() {
  for (auto& [x, open] : open_) eng.release(x).ignore();
  open_.clear();
}

// ---- prefill -----------------------------------------------------------------------------------

Prefill::Prefill(Shared& shared, int i) : idx(i), s_(shared) {}

Result<void> Prefill::init() {
  const Options& o = s_.opt;
  EngineConfig c;
  c.name = "prefill-" + std::to_string(idx);
  c.model_epoch = 1;
  c.progress_thread = o.progress_threads;
  auto e = Engine::create(c);
  if (!e) return e.error();
  eng = std::move(e).value();
  mem_.assign(static_cast<size_t>(o.window) * s_.request_bytes, 0);
  auto m = eng.registerMemory(mem_.data(), mem_.size());
  if (!m) return m.error();
  mr = std::move(m).value();
  slots_.resize(static_cast<size_t>(o.window));
  return {};
}

// The router: round-robin under --no-credits; otherwise the decode worker with the most spare
// credit (the budget it granted, pact_peer_credit, less the bytes already assigned to it and not
// final), if any has room for the request. `avoid` (the worker whose epoch aborted the last try)
// is skipped when another exists.
int Prefill::route(int avoid) {
  const int n = static_cast<int>(s_.decodes.size());
  const int start = static_cast<int>(s_.rr.fetch_add(1, std::memory_order_relaxed) %
                                     static_cast<uint64_t>(n));
  if (n == 1) avoid = -1;
  if (s_.opt.no_credits) return (start == avoid) ? (start + 1) % n : start;
  int best = -1;
  int64_t best_spare = static_cast<int64_t>(s_.request_bytes) - 1;
  for (int k = 0; k < n; ++k) {
    const int d = (start + k) % n;
    if (d == avoid) continue;
    auto c = eng.peerCredit(peers[static_cast<size_t>(d)]);
    if (!c) continue;
    const int64_t budget = c->budget == PACT_CREDIT_UNLIMITED
                               ? std::numeric_limits<int64_t>::max() / 2
                               : static_cast<int64_t>(c->budget);
    const int64_t used = std::max<int64_t>(s_.decodes[static_cast<size_t>(d)]->outstanding.load(
                                               std::memory_order_relaxed),
                                           static_cast<int64_t>(c->in_use));
    if (budget - used > best_spare) {
      best = d;
      best_spare = budget - used;
    }
  }
  return best;
}

void Prefill::startSend(Slot& slot, size_t index, int target, Tp now) {
  const Options& o = s_.opt;
  Decode& dec = *s_.decodes[static_cast<size_t>(target)];
  const pact_key_t key{slot.request, slot.attempt, dec.epoch(), 1};
  const uint64_t base = index * s_.request_bytes;
  std::vector<pact_block_t> blocks;
  for (int b = 0; b < o.blocks; ++b) {
    const uint64_t off = base + static_cast<uint64_t>(b) * o.block_bytes;
    fillPattern(mem_.data() + off, o.block_bytes, blockSeed(o.seed, key, static_cast<size_t>(b)));
    blocks.push_back(mr.block(off, o.block_bytes));
  }
  router_wait_us += usBetween(slot.routing_since, now);
  dec.outstanding.fetch_add(static_cast<int64_t>(s_.request_bytes), std::memory_order_relaxed);
  const Tp assigned = Clock::now();  // commit latency starts here: assignment and pact_send
  auto x = eng.send(peers[static_cast<size_t>(target)], key, blocks, deadlineUs(o),
                    trafficClass(o));
  if (!x) {
    dec.outstanding.fetch_sub(static_cast<int64_t>(s_.request_bytes), std::memory_order_relaxed);
    ++failures[std::string("send:") + pact_status_string(x.status())];
    refused = true;
    if (firstError.empty()) firstError = "send to decode worker " + std::to_string(target) + ": " + x.error().str();
    slot.avoid = target;
    slot.routing_since = Clock::now();
    if (++slot.attempt > static_cast<uint32_t>(o.max_attempts)) {
      ++dropped;
      slot.state = SlotState::kIdle;
      active.fetch_sub(1, std::memory_order_relaxed);
    }
    return;
  }
  dec.assign({key, idx, assigned});
  slot.state = SlotState::kSending;
  slot.xfer = *x;
  slot.target = target;
}

void Prefill::finishSend(Slot& slot, const pact_xfer_info_t& info, Tp now) {
  eng.release(slot.xfer).ignore();
  s_.decodes[static_cast<size_t>(slot.target)]->outstanding.fetch_sub(
      static_cast<int64_t>(s_.request_bytes), std::memory_order_relaxed);
  if (info.result == PACT_OK) {
    ++sent_ok;
    slot.state = SlotState::kIdle;
    active.fetch_sub(1, std::memory_order_relaxed);
    return;
  }
  if (info.result == PACT_ERR_EPOCH_MISMATCH) {
    ++epoch_aborts;
  } else {
    ++failures[pact_status_string(info.result)];
    if (firstError.empty())
      firstError = "transfer to decode worker " + std::to_string(slot.target) + ": " + pact_status_string(info.result);
  }
  if (++slot.attempt > static_cast<uint32_t>(s_.opt.max_attempts)) {
    ++dropped;
    slot.state = SlotState::kIdle;
    active.fetch_sub(1, std::memory_order_relaxed);
    return;
  }
  ++rerouted;  // a new transfer (transfer_id = attempt) to another worker
  slot.avoid = slot.target;
  slot.state = SlotState::kRouting;
  slot.routing_since = now;
}

void Prefill::step(Tp now) {
  const bool stopping = s_.stopping.load(std::memory_order_acquire);
  for (size_t i = 0; i < slots_.size(); ++i) {
    Slot& slot = slots_[i];
    switch (slot.state) {
      case SlotState::kIdle:
        if (stopping) break;
        slot = Slot{};
        slot.state = SlotState::kRouting;
        slot.request = (static_cast<uint64_t>(idx) + 1) << 40 | ++next_request_;
        slot.attempt = 1;
        slot.routing_since = now;
        active.fetch_add(1, std::memory_order_relaxed);
        [[fallthrough]];
      case SlotState::kRouting: {
        if (stopping) {
          ++abandoned;
          slot.state = SlotState::kIdle;
          active.fetch_sub(1, std::memory_order_relaxed);
          break;
        }
        const int d = route(slot.avoid);
        if (d >= 0) startSend(slot, i, d, now);
        break;
      }
      case SlotState::kSending: {
        auto info = eng.query(slot.xfer);
        if (!info) {
          ++failures[std::string("query:") + pact_status_string(info.status())];
          refused = true;
          if (firstError.empty()) firstError = "query: " + info.error().str();
          break;
        }
        if (info->final) finishSend(slot, *info, now);
        break;
      }
    }
  }
}

void Prefill::releaseAll() {
  for (Slot& slot : slots_) {
    if (slot.state == SlotState::kSending) eng.release(slot.xfer).ignore();
    slot.state = SlotState::kIdle;
  }
}

}  // namespace pact::perf::kv
