// The class key `credits` on the NCCL face: a budget of bytes a traffic class may have in flight
// to one peer process from this process (handed to UCX and not yet completed), over every send
// comm of that class to that peer. isend takes a message's bytes before any piece goes out; each
// piece's completion gives its bytes back. Beyond the budget isend returns a NULL request,
// NCCL's "try again later", never an error.
//
// A message larger than the whole budget goes when nothing else of its class is in flight to the
// peer. So that it is not starved by smaller ones, the first comm refused becomes the waiter:
// while it keeps asking (at least every kWaiterPatience), no other comm is admitted, so what is
// in flight drains and the waiter goes next.
//
// A budget must never deadlock a job: bytes in flight complete only when the peer posts their
// receives, and a peer may wait for another of this class's messages first (a collective's order).
// So a comm that stops asking stops being the waiter, and when nothing of the class to the peer
// has completed for kStuck the refused message goes over the budget (an overdraft, counted).
// Shared by comms on different device contexts: its own mutex.
#pragma once

#include <cstdint>
#include <map>

#include "common/clock.h"
#include <memory>
#include <mutex>
#include <string>
#include <utility>

namespace pact::net {

class SendCredits {
 public:
  static constexpr auto kWaiterPatience = std::chrono::milliseconds(1);
  static constexpr auto kStuck = std::chrono::milliseconds(50);
  explicit SendCredits(uint64_t budget) : budget_(budget) {}
  // Admits `bytes` for `who` (a comm) or makes it the waiter: whether it may send now.
  bool tryTake(const void* who, uint64_t bytes, TimePoint t = now());
  // A re-send of pieces admitted before (verify): taken whatever the budget.
  void takeAnyway(uint64_t bytes);
  void give(uint64_t bytes);
  // who closed: it waits no more.
  void forget(const void* who);
  uint64_t budget() const { return budget_; }
  uint64_t inFlight() const;
  uint64_t peak() const;  // the most ever in flight at once
  uint64_t refusals() const;
  uint64_t overdrafts() const;  // messages admitted over the budget because nothing completed

 private:
  mutable std::mutex mu_;
  const uint64_t budget_;
  uint64_t inFlight_ = 0, peak_ = 0, refusals_ = 0, overdrafts_ = 0;
  const void* waiter_ = nullptr;
  TimePoint waiterAsked_{};  // the waiter's last refused call
  TimePoint lastMoved_{};    // the last completion, or when bytes went in flight from none
};

// Every budget of the process's plugin, by class and peer process; budgets live while a comm
// holds them.
class CreditBook {
 public:
  std::shared_ptr<SendCredits> budgetFor(const std::string& className, uint64_t peerProcess, uint64_t budget);

 private:
  std::mutex mu_;
  std::map<std::pair<std::string, uint64_t>, std::weak_ptr<SendCredits>> budgets_;
};

}  // namespace pact::net
