// The class key `credits` on the NCCL face: a budget of bytes a traffic class may have in flight
// to one peer process from this process (handed to UCX and not yet completed), over every send
// comm of that class to that peer. isend takes a message's bytes before any piece goes out; each
// piece's completion gives its bytes back. Beyond the budget isend returns a NULL request,
// NCCL's "try again later", never an error.
//
// A message larger than the whole budget goes when nothing else of its class is in flight to the
// peer. So that it is not starved by smaller ones, the first comm refused becomes the waiter:
// until it gets in (or closes), no other comm is admitted, so what is in flight drains and the
// waiter goes next. Shared by comms on different device contexts: its own mutex.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

namespace pact::net {

class SendCredits {
 public:
  explicit SendCredits(uint64_t budget) : budget_(budget) {}
  // Admits `bytes` for `who` (a comm) or makes it the waiter: whether it may send now.
  bool tryTake(const void* who, uint64_t bytes);
  // A re-send of pieces admitted before (verify): taken whatever the budget.
  void takeAnyway(uint64_t bytes);
  void give(uint64_t bytes);
  // who closed: it waits no more.
  void forget(const void* who);
  uint64_t budget() const { return budget_; }
  uint64_t inFlight() const;
  uint64_t peak() const;  // the most ever in flight at once
  uint64_t refusals() const;

 private:
  mutable std::mutex mu_;
  const uint64_t budget_;
  uint64_t inFlight_ = 0, peak_ = 0, refusals_ = 0;
  const void* waiter_ = nullptr;
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
