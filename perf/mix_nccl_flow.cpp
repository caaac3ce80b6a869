// Data path of `mix --face nccl`; see mix_nccl_flow.h.
#include "mix_nccl_flow.h"

#include "pattern.h"
#include "peer.h"
#include "report.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <vector>

namespace pact::perf {
namespace {

constexpr int kTag = 0;                  // NCCL's tag: the sender's rank
constexpr size_t kSlice = 128u << 10;    // bytes of pattern written or checked per loop pass
constexpr uint64_t kBulkStream = 1, kLatencyStream = 2;
constexpr uint64_t kResultMagic = 0x70616374'6d697831ull;  // "pactmix1"

static_assert(std::chrono::steady_clock::is_steady);

// The latency stamp's clock: steady_clock is CLOCK_MONOTONIC, one clock for every process of the
// machine whatever network namespace it is in.
int64_t monoNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

uint64_t seedOf(uint64_t stream, uint64_t seq, size_t bytes) {
  return patternSeed(stream, seq, bytes, 0, 0);
}

// Control messages during a run (rank 1 -> 0: kAck, kPosted; rank 0 -> 1: kStart, kStop).
enum CtlType : uint32_t { kStart = 0x5354, kAck = 0x4143, kStop = 0x5350, kPosted = 0x504f };
struct Ctl {
  uint32_t type = 0;
  int64_t a = 0, b = 0;  // kAck: the latency message's index; kStop/kPosted: bulk, latency posted
  double t = 0;          // kStart: rank 0's start (peer.h now(), the same clock on both ranks)
};

void sendCtl(CtlType type, int64_t a = 0, int64_t b = 0, double t = 0) {
  Ctl m;
  m.type = type;
  m.a = a;
  m.b = b;
  m.t = t;
  ctlSend(&m, sizeof(m));
}

Ctl recvCtl() {
  Ctl m;
  ctlRecv(&m, sizeof(m));
  return m;
}

[[noreturn]] void outOfStep(const Ctl& m, const char* expected) {
  char buf[160];
  std::snprintf(buf, sizeof(buf), "control channel out of step: message 0x%x while %s", m.type,
                expected);
  die(buf);
}

std::string streamName(const ClassLink& l) {
  return std::string(l.name()) + " (class " + std::to_string(l.trafficClass()) + ")";
}

// The plugin calls of the streams; a failure dies naming the call and the stream (the name is
// only built then: these run in the hot loop).
void checkCall(int rc, const char* call, const ClassLink& l) {
  if (rc != 0) check(rc, (std::string(call) + " " + streamName(l)).c_str());
}

// Tests req once. For a receive (expect >= 0) dies when it completed with another size.
bool poll(ClassLink& l, void* req, long expect, const char* call) {
  int done = 0;
  int sizes[loader::kMaxRecvs] = {};
  checkCall(l.net().test(req, &done, sizes), call, l);
  if (done && expect >= 0 && expect <= INT_MAX && sizes[0] != expect) {
    die(std::string(call) + " " + streamName(l) + ": completed with " + std::to_string(sizes[0]) +
        " bytes, expected " + std::to_string(expect));
  }
  return done != 0;
}

void* postSend(ClassLink& l, char* p, size_t bytes) {
  void* req = nullptr;
  checkCall(l.net().isend(l.comm(), p, bytes, kTag, l.mhandle(), &req), "isend", l);
  return req;
}

void* postRecv(ClassLink& l, char* p, size_t bytes) {
  void* data[1] = {p};
  size_t sizes[1] = {bytes};
  int tags[1] = {kTag};
  void* mhs[1] = {l.mhandle()};
  void* req = nullptr;
  checkCall(l.net().irecv(l.comm(), 1, data, sizes, tags, mhs, &req), "irecv", l);
  return req;
}

// Checks bytes [off, off + len) of a message whose pattern starts at p (off a multiple of 8);
// dies naming the first wrong word.
void checkSlice(const ClassLink& l, const char* run, const char* p, size_t off, size_t len,
                uint64_t seed, long index, size_t bytes, size_t shown_off) {
  const auto* u = reinterpret_cast<const uint8_t*>(p);
  if (checkPattern(u + off, len, seed + off / 8)) return;
  for (size_t o = off; o < off + len; o += 8) {
    uint8_t want[8];
    const size_t n = std::min<size_t>(8, off + len - o);
    fillPattern(want, n, seed + o / 8);
    if (std::memcmp(u + o, want, n) != 0) {
      uint64_t got = 0, exp = 0;
      std::memcpy(&got, u + o, n);
      std::memcpy(&exp, want, n);
      char buf[200];
      std::snprintf(buf, sizeof(buf),
                    ", %s, message %ld of %s: wrong bytes at offset %zu (0x%016" PRIx64
                    ", expected 0x%016" PRIx64 ")",
                    run, index, formatSize(bytes).c_str(), o + shown_off, got, exp);
      die("verify: " + streamName(l) + buf);
    }
  }
  die("verify: " + streamName(l) + ", " + run + ", message " + std::to_string(index) + ": wrong bytes");
}

// --- bulk stream -------------------------------------------------------------------------------

// Message i (sequence seq0 + i) lives in slot i % window; a slot is filled (sender) or checked
// (receiver) a slice per pass while the other messages move.
class BulkStream {
 public:
  BulkStream(ClassLink& l, const HostBuffer& buf, const FlowPlan& p)
      : link_(l), buf_(buf), run_(p.run), bytes_(p.bulk_bytes), window_(p.bulk_window), seq0_(p.seq0),
        inject_(p.inject_bulk), ring_(static_cast<size_t>(p.bulk_window)) {}
  long posted() const { return posted_; }
  void setLimit(long n) { limit_ = n; }
  void setDeadline(double t) { deadline_ = t; }

  // Sender: a slice of the next message's pattern (or its isend once written), then one test
  // of the oldest send.
  void sendStep() {
    if (posted_ < limit_ && posted_ - done_ < window_) {
      char* p = slot(posted_);
      if (off_ < bytes_) {
        const size_t n = std::min(kSlice, bytes_ - off_);
        fillPattern(reinterpret_cast<uint8_t*>(p) + off_, n, seed(posted_) + off_ / 8);
        off_ += n;
        if (off_ == bytes_ && inject_ && posted_ == 0) p[bytes_ / 2] ^= 0x20;
      } else if (void* req = postSend(link_, p, bytes_)) {
        ring_[static_cast<size_t>(posted_ % window_)] = req;
        ++posted_;
        off_ = 0;
      }
    }
    if (done_ < posted_ && poll(link_, ring_[static_cast<size_t>(done_ % window_)], -1, "test(isend)"))
      ++done_;
  }
  bool sendsFinished() const { return posted_ == limit_ && done_ == limit_; }

  // Receiver: receives posted up to window ahead of the checked ones, one test of the oldest,
  // one slice of the oldest unchecked message.
  void post() {
    while (posted_ < limit_ && posted_ - checked_ < window_) {
      void* req = postRecv(link_, slot(posted_), bytes_);
      if (req == nullptr) return;  // back-pressure: try again next pass
      ring_[static_cast<size_t>(posted_ % window_)] = req;
      ++posted_;
    }
  }
  void recvStep() {
    post();
    if (done_ < posted_ &&
        poll(link_, ring_[static_cast<size_t>(done_ % window_)], static_cast<long>(bytes_), "test(irecv)")) {
      const double t = now();
      if (t <= deadline_) {
        if (counted_ == 0) first_ = t;
        last_ = t;
        ++counted_;
      }
      ++done_;
    }
    if (checked_ < done_) {
      const size_t n = std::min(kSlice, bytes_ - off_);
      checkSlice(link_, run_, slot(checked_), off_, n, seed(checked_), checked_, bytes_, 0);
      off_ += n;
      if (off_ == bytes_) {
        off_ = 0;
        ++checked_;
      }
    }
  }
  bool recvsFinished() const { return posted_ == limit_ && checked_ == limit_; }
  long checked() const { return checked_; }
  long counted() const { return counted_; }
  double goodput(double t0) const {
    if (counted_ >= 2 && last_ > first_)
      return static_cast<double>(bytes_) * static_cast<double>(counted_ - 1) / (last_ - first_);
    if (counted_ == 1 && first_ > t0) return static_cast<double>(bytes_) / (first_ - t0);
    return 0;
  }

 private:
  char* slot(long i) const { return buf_.data() + static_cast<size_t>(i % window_) * bytes_; }
  uint64_t seed(long i) const { return seedOf(kBulkStream, seq0_ + static_cast<uint64_t>(i), bytes_); }

  ClassLink& link_;
  const HostBuffer& buf_;
  const char* run_;
  size_t bytes_;
  long window_;
  uint64_t seq0_;
  bool inject_;
  std::vector<void*> ring_;
  long limit_ = std::numeric_limits<long>::max();
  long posted_ = 0, done_ = 0, checked_ = 0;
  size_t off_ = 0;  // pattern bytes written (sender) or checked (receiver) of the current message
  double deadline_ = std::numeric_limits<double>::infinity();
  long counted_ = 0;
  double first_ = 0, last_ = 0;
};

// --- latency stream ----------------------------------------------------------------------------

// Bytes 0..7: the sender's stamp; 8..: the pattern of the message's sequence number.
class LatencySender {
 public:
  LatencySender(ClassLink& l, const HostBuffer& buf, const FlowPlan& p)
      : link_(l), buf_(buf), bytes_(p.latency_bytes), seq0_(p.seq0), inject_(p.inject_latency) {}
  long posted() const { return posted_; }
  void setLimit(long n) { limit_ = n; }
  // After the receiver's kPosted no acknowledgements come: a send's completion is enough.
  void noMoreAcks() { need_ack_ = false; }
  void acked(int64_t index) {
    if (!busy_ || index != posted_ - 1)
      die("latency acknowledgement for message " + std::to_string(index) + " out of step (posted " +
          std::to_string(posted_) + ")");
    acked_ = true;
  }

  void step() {
    if (!busy_ && posted_ < limit_) {
      char* p = buf_.data();
      if (!ready_) {
        const uint64_t seq = seq0_ + static_cast<uint64_t>(posted_);
        fillPattern(reinterpret_cast<uint8_t*>(p) + 8, bytes_ - 8, seedOf(kLatencyStream, seq, bytes_));
        if (inject_ && posted_ == 0) p[bytes_ / 2] ^= 0x20;
        // Stamped at the first isend try: a NULL request (back-pressure) counts in the latency.
        const int64_t stamp = monoNs();
        std::memcpy(p, &stamp, 8);
        ready_ = true;
      }
      if (void* req = postSend(link_, p, bytes_)) {
        req_ = req;
        busy_ = true;
        ready_ = sent_ = acked_ = false;
        ++posted_;
      }
    }
    if (busy_ && !sent_) sent_ = poll(link_, req_, -1, "test(isend)");
    if (busy_ && sent_ && (acked_ || !need_ack_)) busy_ = false;
  }
  bool finished() const { return posted_ == limit_ && !busy_; }
  bool awaitingAck() const { return busy_ && need_ack_ && !acked_; }

 private:
  ClassLink& link_;
  const HostBuffer& buf_;
  size_t bytes_;
  uint64_t seq0_;
  bool inject_;
  long limit_ = std::numeric_limits<long>::max();
  long posted_ = 0;
  void* req_ = nullptr;
  bool busy_ = false, ready_ = false, sent_ = false, acked_ = false, need_ack_ = true;
};

class LatencyReceiver {
 public:
  LatencyReceiver(ClassLink& l, const HostBuffer& buf, const FlowPlan& p)
      : link_(l), buf_(buf), run_(p.run), bytes_(p.latency_bytes), seq0_(p.seq0) {}
  long posted() const { return posted_; }
  void setLimit(long n) { limit_ = n; }

  void post() {
    if (req_ == nullptr && posted_ < limit_) {
      req_ = postRecv(link_, buf_.data(), bytes_);
      if (req_ != nullptr) ++posted_;
    }
  }
  // acks: whether rank 0 still wants an acknowledgement per message (not after kStop).
  void step(bool acks) {
    post();
    if (req_ != nullptr && poll(link_, req_, static_cast<long>(bytes_), "test(irecv)")) {
      const int64_t t = monoNs();
      int64_t stamp = 0;
      std::memcpy(&stamp, buf_.data(), 8);
      const long index = posted_ - 1;
      const uint64_t seq = seq0_ + static_cast<uint64_t>(index);
      if (stamp <= 0 || stamp > t || t - stamp > int64_t{3600} * 1'000'000'000) {
        die("verify: " + streamName(link_) + ", " + run_ + ", message " + std::to_string(index) +
            ": its first 8 bytes are not a time of the sender's clock (" + std::to_string(stamp) +
            " ns, now " + std::to_string(t) + " ns)");
      }
      ms_.push_back(static_cast<double>(t - stamp) / 1e6);
      checkSlice(link_, run_, buf_.data() + 8, 0, bytes_ - 8, seedOf(kLatencyStream, seq, bytes_), index, bytes_, 8);
      req_ = nullptr;
      ++checked_;
      ack_ = index;
      post();  // before the acknowledgement: the next message always finds its receive posted
    }
    if (ack_ >= 0 && (req_ != nullptr || posted_ == limit_)) {
      if (acks) sendCtl(kAck, ack_);
      ack_ = -1;
    }
  }
  bool finished() const { return posted_ == limit_ && req_ == nullptr; }
  long checked() const { return checked_; }
  // Latencies (ms) of messages 0 .. n-1, in posting order.
  std::vector<double> samples(long n) const {
    return {ms_.begin(), ms_.begin() + std::min<long>(n, static_cast<long>(ms_.size()))};
  }

 private:
  ClassLink& link_;
  const HostBuffer& buf_;
  const char* run_;
  size_t bytes_;
  uint64_t seq0_;
  long limit_ = std::numeric_limits<long>::max();
  long posted_ = 0, checked_ = 0;
  long ack_ = -1;  // a completed message whose acknowledgement waits for the next receive
  void* req_ = nullptr;
  std::vector<double> ms_;
};

// The plan's streams on this rank (Lat: LatencySender on rank 0, LatencyReceiver on rank 1); in
// an untimed run each stops at its count.
template <class Lat>
void makeStreams(const FlowPlan& plan, const FlowLinks& links, std::optional<BulkStream>& bulk,
                 std::optional<Lat>& lat) {
  if (plan.bulk) bulk.emplace(*links.bulk, *links.bulk_buf, plan);
  if (plan.latency) lat.emplace(*links.latency, *links.latency_buf, plan);
  const bool timed = plan.seconds > 0;
  if (!timed) {
    if (bulk) bulk->setLimit(plan.bulk_count);
    if (lat) lat->setLimit(plan.latency_count);
  }
}

// At the stop: each stream goes on to the messages the peer has posted (nb bulk, nl latency), or
// to its own when it posted more.
template <class Lat>
void limitToPosted(std::optional<BulkStream>& bulk, std::optional<Lat>& lat, long nb, long nl) {
  if (bulk) bulk->setLimit(std::max<long>(bulk->posted(), nb));
  if (lat) lat->setLimit(std::max<long>(lat->posted(), nl));
}

FlowResult runSender(const FlowPlan& plan, const FlowLinks& links) {
  std::optional<BulkStream> bulk;
  std::optional<LatencySender> lat;
  makeStreams(plan, links, bulk, lat);
  const bool timed = plan.seconds > 0;
  barrier();  // rank 1's first receives are posted
  const double t0 = now();
  const double deadline = t0 + plan.seconds;
  if (timed) sendCtl(kStart, 0, 0, t0);
  enum { kRunning, kStopSent, kDraining } state = timed ? kRunning : kDraining;
  for (;;) {
    if (state == kRunning && now() >= deadline) {
      const long nb = bulk ? bulk->posted() : 0, nl = lat ? lat->posted() : 0;
      if (bulk) bulk->setLimit(nb);
      if (lat) lat->setLimit(nl);
      sendCtl(kStop, nb, nl);
      watchdog(plan.timeout, "drain");
      state = kStopSent;
    }
    if (bulk) bulk->sendStep();
    if (lat) lat->step();
    // Only what rank 1 still sends is read here: its result comes after the loop.
    while ((state != kDraining || (lat && lat->awaitingAck())) && ctlReadable(0)) {
      const Ctl m = recvCtl();
      if (m.type == kAck && lat) {
        lat->acked(m.a);
      } else if (m.type == kPosted && state == kStopSent) {
        limitToPosted(bulk, lat, m.a, m.b);
        if (lat) lat->noMoreAcks();
        state = kDraining;
      } else {
        outOfStep(m, "sending");
      }
    }
    if (state == kDraining && (!bulk || bulk->sendsFinished()) && (!lat || lat->finished())) break;
  }
  FlowResult r;
  ctlRecv(&r, sizeof(r));
  if (r.magic != kResultMagic) die("control channel out of step: no result from rank 1");
  return r;
}

FlowResult runReceiver(const FlowPlan& plan, const FlowLinks& links) {
  std::optional<BulkStream> bulk;
  std::optional<LatencyReceiver> lat;
  makeStreams(plan, links, bulk, lat);
  const bool timed = plan.seconds > 0;
  // Receives are posted before the sender starts, as NCCL's receiver posts its slots.
  if (bulk) bulk->post();
  if (lat) lat->post();
  barrier();
  double t0 = now();
  if (timed) {
    const Ctl m = recvCtl();
    if (m.type != kStart) outOfStep(m, "waiting for the start");
    t0 = m.t;
    if (bulk) bulk->setDeadline(t0 + plan.seconds);
  }
  long stop_latency = plan.latency_count;  // latency messages that count (posted by the deadline)
  bool acks = true;
  bool draining = !timed;
  for (;;) {
    if (bulk) bulk->recvStep();
    if (lat) lat->step(acks);
    if (!draining && ctlReadable(0)) {
      const Ctl m = recvCtl();
      if (m.type != kStop) outOfStep(m, "receiving");
      watchdog(plan.timeout, "drain");
      stop_latency = m.b;
      limitToPosted(bulk, lat, m.a, m.b);
      sendCtl(kPosted, bulk ? bulk->posted() : 0, lat ? lat->posted() : 0);
      acks = false;
      draining = true;
    }
    if (draining && (!bulk || bulk->recvsFinished()) && (!lat || lat->finished())) break;
  }
  FlowResult r;
  r.magic = kResultMagic;
  if (lat) {
    std::vector<double> ms = lat->samples(stop_latency);
    r.latency_count = static_cast<long>(ms.size());
    const Percentiles p = percentiles(ms);  // sorts
    r.latency_p50_ms = p.p50;
    r.latency_p95_ms = p.p95;
    r.latency_p99_ms = p.p99;
    r.latency_max_ms = ms.empty() ? 0 : ms.back();
    if (timed)
      r.latency_bytes_per_s = static_cast<double>(r.latency_count) * static_cast<double>(plan.latency_bytes) / plan.seconds;
    r.latency_checked = lat->checked();
  }
  if (bulk) {
    r.bulk_count = bulk->counted();
    r.bulk_bytes_per_s = bulk->goodput(t0);
    r.bulk_checked = bulk->checked();
  }
  ctlSend(&r, sizeof(r));
  return r;
}

}  // namespace

FlowResult runFlow(const FlowPlan& plan, const FlowLinks& links, int rank) {
  return rank == 0 ? runSender(plan, links) : runReceiver(plan, links);
}

}  // namespace pact::perf
