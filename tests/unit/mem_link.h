// MemLink: two commit protocols (engine/protocol.h) wired to each other in memory, for the
// protocol's exhaustive unit tests. A test double of the engine's Link (the UCX one cannot run
// without UCX), behind the same seam: every control frame and piece goes into one queue in the
// order it was sent, and the test decides, message by message, whether it arrives, arrives twice,
// arrives after the next one or arrives late. Time is the test's own (a virtual clock that jumps
// to the next timer when nothing is in flight), so every run is deterministic.
#pragma once

#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "engine/protocol.h"

namespace pact::engine::test {

// The virtual clock (ProtocolConfig::clock).
inline TimePoint& virtualTime() {
  static TimePoint t = TimePoint{} + std::chrono::hours(1);
  return t;
}
inline TimePoint virtualNow() { return virtualTime(); }

// kDuplicate: a copy arrives just before the message; kDuplicateLate: the message arrives, and a
// copy 50 ms later (after what it caused, the verdict included). kOutOfRange: a piece arrives
// with its offset moved past its block's end (a sender that lies, or corrupt wire bytes the
// transport did not catch).
enum class Fault : uint8_t { kNone, kDrop, kDuplicate, kDuplicateLate, kReorder, kDelay, kOutOfRange };
inline const char* faultName(Fault f) {
  switch (f) {
    case Fault::kNone: return "none";
    case Fault::kDrop: return "drop";
    case Fault::kDuplicate: return "duplicate";
    case Fault::kDuplicateLate: return "late duplicate";
    case Fault::kReorder: return "reorder";
    case Fault::kDelay: return "delay";
    case Fault::kOutOfRange: return "out of range";
  }
  return "?";
}

class MemNet {
 public:
  static constexpr uint64_t kPeerOfA = 11;  // how side 0 (A) knows side 1 (B), and back
  static constexpr uint64_t kPeerOfB = 22;

  struct Message {
    int to = 0;  // side
    bool piece = false;
    bool eager = false;  // an eager offer (control) with the transfer's bytes
    Control control;
    int route = -1;
    PieceHeader header;
    std::vector<uint8_t> bytes;
    uint64_t senderXfer = 0;   // piece or eager offer: the sender's transfer, told when done
    std::string what;          // "B->A offer", "B->A piece 2", ...
  };

  // side: 0 or 1; the link the protocol of that side talks through.
  class SideLink final : public Link {
   public:
    SideLink(MemNet& net, int side) : net_(net), side_(side) {}
    std::string reach(uint64_t, size_t) override { return {}; }
    void sendControl(uint64_t, const Control& m, int route) override {
      Message msg;
      msg.to = 1 - side_;
      msg.control = m;
      msg.route = route;
      msg.what = net_.label(side_, controlName(m));
      net_.enqueue(std::move(msg));
    }
    void sendPiece(uint64_t, size_t, const PieceHeader& h, const uint8_t* src, uint64_t n,
                   uint64_t xfer, MemoryType) override {
      Message msg;
      msg.to = 1 - side_;
      msg.piece = true;
      msg.header = h;
      msg.bytes.assign(src, src + n);
      msg.senderXfer = xfer;
      msg.what = net_.label(side_, "piece@" + std::to_string(h.offset));
      net_.sentPieces_.push_back(msg);  // what a failed-over link sends again (setRailOut)
      net_.enqueue(std::move(msg));
    }
    void sendEager(uint64_t, size_t, const Offer& m, std::span<const Extent> src,
                   uint64_t xfer) override {
      Message msg;
      msg.to = 1 - side_;
      msg.eager = true;
      msg.control = m;
      for (const Extent& b : src) msg.bytes.insert(msg.bytes.end(), b.addr, b.addr + b.length);
      msg.senderXfer = xfer;
      msg.what = net_.label(side_, "eager offer");
      net_.enqueue(std::move(msg));
    }
    void fetch(void* descriptor, uint8_t* dst, uint64_t n, uint64_t xfer, uint32_t attempt,
               MemoryType) override {
      std::memcpy(dst, descriptor, n);  // the bytes move now; the completion comes later
      net_.fetches_.push_back({side_, xfer, attempt, dst, n});
    }

   private:
    MemNet& net_;
    int side_;
  };

  MemNet() : links_{SideLink(*this, 0), SideLink(*this, 1)} {}
  Link& link(int side) { return links_[static_cast<size_t>(side)]; }
  void attach(Protocol* a, Protocol* b) { protocols_[0] = a, protocols_[1] = b; }
  // Pieces arrive as rendezvous (fetched through the link) instead of eager copies.
  void setRendezvous(bool on) { rendezvous_ = on; }
  // Virtual time each delivered message takes (0: none).
  void setLatency(std::chrono::microseconds l) { latency_ = l; }
  // The fault to apply to the message with this sequence number (0 = the first one sent).
  void setFault(size_t seq, Fault f) { faults_[seq] = f; }
  // Verdicts lost on the wire: bit i drops the i-th verdict handled (0 = the first).
  void loseVerdicts(uint32_t mask) { verdictLoss_ = mask; }
  // Rail failover as the engine's link does it (engine/failover.cpp): when the message with this
  // sequence number is due, its rail dies with it and everything still in flight (pieces and
  // eager offers as sends UCX had completed: their senders are told they went; fetches under way
  // fail), then the link fails over: every piece of a live attempt it sent goes again
  // (Protocol::pieceResent) and both sides repeat what the rail may have swallowed (railOut).
  void setRailOut(size_t seq) { railOutSeq_ = seq; }
  // Called after each message has been handled (or dropped): its sequence number.
  std::function<void(size_t)> afterEach;

  // Delivers until nothing is in flight and no timer is due within `horizon` of virtual time;
  // returns the messages handled. A bound on steps catches a protocol that talks forever.
  size_t run(std::chrono::milliseconds horizon = std::chrono::seconds(10), size_t maxSteps = 10000) {
    const TimePoint end = virtualTime() + horizon;
    size_t handled = 0;
    for (size_t step = 0; step < maxSteps; ++step) {
      if (!fetches_.empty()) {
        const Fetch f = fetches_.front();
        fetches_.pop_front();
        protocols_[f.side]->pieceFetched(f.xfer, f.attempt, f.dst, f.n, true);
        continue;
      }
      if (!queue_.empty()) {
        Queued q = std::move(queue_.front());
        queue_.pop_front();
        virtualTime() += latency_;
        handle(std::move(q));
        ++handled;
        continue;
      }
      TimePoint next = std::min(protocols_[0]->nextTimer(), protocols_[1]->nextTimer());
      for (const auto& d : delayed_) next = std::min(next, d.first);
      if (next == TimePoint::max() || next > end) return handled;
      virtualTime() = std::max(virtualTime(), next);
      release();
      protocols_[0]->fireTimers();
      protocols_[1]->fireTimers();
    }
    ADD_FAILURE() << "the protocols were still talking after " << maxSteps << " steps";
    return handled;
  }
  size_t sent() const { return sent_; }
  const std::vector<std::string>& log() const { return log_; }

 private:
  struct Queued {
    size_t seq;
    Message msg;
    bool faultApplied = false;
  };
  struct Fetch {
    int side;
    uint64_t xfer;
    uint32_t attempt;
    uint8_t* dst;
    uint64_t n;
  };

  static std::string controlName(const Control& m) {
    static const char* names[] = {"advertise", "done", "verdict", "epoch", "credit", "offer",
                                  "hello", "cancel"};
    return names[m.index()];
  }
  std::string label(int from, const std::string& what) const {
    return std::string(from == 0 ? "A->B " : "B->A ") + what;
  }
  void enqueue(Message m) {
    log_.push_back("#" + std::to_string(sent_) + " " + m.what);
    queue_.push_back({sent_++, std::move(m)});
  }
  void failOver(Queued due) {
    std::deque<Queued> lost = std::move(queue_);
    queue_.clear();
    lost.push_front(std::move(due));
    for (const Queued& l : lost) {
      log_.push_back("   lost with the rail: " + l.msg.what);
      finishPiece(l.msg);
    }
    for (const Fetch& f : std::exchange(fetches_, {})) protocols_[f.side]->pieceLost(f.xfer, f.attempt, f.dst);
    for (const Message& m : sentPieces_) {
      Protocol& from = *protocols_[1 - m.to];
      const Transfer* x = from.find(m.senderXfer);
      if (x == nullptr || !x->live() || x->attempt != m.header.attempt) continue;
      from.pieceResent(m.senderXfer, m.bytes.size());
      Message again = m;
      again.what += " again";
      enqueue(std::move(again));
    }
    protocols_[0]->railOut(kPeerOfA);
    protocols_[1]->railOut(kPeerOfB);
  }
  void handle(Queued q) {
    if (q.seq == railOutSeq_) {
      railOutSeq_ = SIZE_MAX;
      failOver(std::move(q));
      return;
    }
    if (!q.msg.piece && !q.msg.eager && std::holds_alternative<Verdict>(q.msg.control)) {
      const size_t i = verdicts_++;
      if (i < 32 && (verdictLoss_ >> i & 1) != 0) {
        log_.push_back("   lost: " + q.msg.what);
        notify(q.seq);
        return;
      }
    }
    auto fault = faults_.find(q.seq);
    if (fault != faults_.end() && !q.faultApplied) {
      q.faultApplied = true;
      switch (fault->second) {
        case Fault::kNone: break;
        case Fault::kDrop:
          finishPiece(q.msg);
          notify(q.seq);
          return;
        case Fault::kDuplicate: {
          Queued copy = q;
          copy.msg.senderXfer = 0;  // the sender's operation completes once
          deliver(copy.msg);
          break;
        }
        case Fault::kDuplicateLate: {
          Queued copy = q;
          copy.msg.senderXfer = 0;
          copy.msg.what += " (late copy)";
          delayed_.emplace_back(virtualTime() + std::chrono::milliseconds(50), std::move(copy));
          break;
        }
        case Fault::kReorder:
          if (!queue_.empty()) {
            Queued next = std::move(queue_.front());
            queue_.pop_front();
            queue_.push_front(std::move(q));
            handle(std::move(next));
            return;
          }
          break;
        case Fault::kDelay:
          delayed_.emplace_back(virtualTime() + std::chrono::milliseconds(50), std::move(q));
          return;
        case Fault::kOutOfRange:
          q.msg.header.offset += 1 << 30;
          break;
      }
    }
    deliver(q.msg);
    finishPiece(q.msg);
    notify(q.seq);
  }
  void release() {
    for (auto it = delayed_.begin(); it != delayed_.end();) {
      if (it->first <= virtualTime()) {
        queue_.push_back(std::move(it->second));
        it = delayed_.erase(it);
      } else {
        ++it;
      }
    }
  }
  void deliver(const Message& m) {
    Protocol& to = *protocols_[m.to];
    const uint64_t from = m.to == 0 ? kPeerOfA : kPeerOfB;
    if (m.eager) {
      to.onEager(from, std::get<Offer>(m.control), m.bytes.data(), m.bytes.size());
      return;
    }
    if (!m.piece) {
      to.onControl(from, m.control);
      return;
    }
    std::vector<uint8_t> bytes = m.bytes;  // a rendezvous descriptor lives until fetched
    if (rendezvous_) {
      descriptors_.push_back(std::move(bytes));
      to.onPiece(from, m.header, nullptr, m.bytes.size(), true, descriptors_.back().data());
    } else {
      to.onPiece(from, m.header, bytes.data(), bytes.size(), false, nullptr);
    }
  }
  void finishPiece(const Message& m) {
    if ((m.piece || m.eager) && m.senderXfer != 0) protocols_[1 - m.to]->pieceSent(m.senderXfer, true);
  }
  void notify(size_t seq) {
    if (afterEach) afterEach(seq);
  }

  SideLink links_[2];
  Protocol* protocols_[2] = {nullptr, nullptr};
  std::deque<Queued> queue_;
  std::vector<std::pair<TimePoint, Queued>> delayed_;
  std::deque<Fetch> fetches_;
  std::deque<std::vector<uint8_t>> descriptors_;
  std::vector<std::string> log_;
  size_t sent_ = 0;
  std::map<size_t, Fault> faults_;  // by sequence number
  uint32_t verdictLoss_ = 0;
  size_t verdicts_ = 0;             // verdicts handled so far
  size_t railOutSeq_ = SIZE_MAX;
  std::vector<Message> sentPieces_;
  bool rendezvous_ = false;
  std::chrono::microseconds latency_{0};
};

}  // namespace pact::engine::test
