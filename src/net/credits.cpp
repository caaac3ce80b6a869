#include "net/credits.h"

#include <algorithm>

namespace pact::net {

bool SendCredits::tryTake(const void* who, uint64_t bytes, TimePoint t) {
  std::lock_guard lock(mu_);
  if (waiter_ != nullptr && waiter_ != who && t - waiterAsked_ > kWaiterPatience) waiter_ = nullptr;
  const bool turn = waiter_ == nullptr || waiter_ == who;
  const bool fits = inFlight_ == 0 || inFlight_ + bytes <= budget_;
  const bool stuck = inFlight_ != 0 && t - lastMoved_ > kStuck;
  if (turn && (fits || stuck)) {
    if (waiter_ == who) waiter_ = nullptr;
    overdrafts_ += fits ? 0 : 1;
    if (inFlight_ == 0 || !fits) lastMoved_ = t;
    inFlight_ += bytes;
    peak_ = std::max(peak_, inFlight_);
    return true;
  }
  if (waiter_ == nullptr) waiter_ = who;
  if (waiter_ == who) waiterAsked_ = t;
  ++refusals_;
  return false;
}

void SendCredits::takeAnyway(uint64_t bytes) {
  std::lock_guard lock(mu_);
  inFlight_ += bytes;
  peak_ = std::max(peak_, inFlight_);
}

void SendCredits::give(uint64_t bytes) {
  std::lock_guard lock(mu_);
  inFlight_ -= std::min(inFlight_, bytes);
  lastMoved_ = now();
}

uint64_t SendCredits::overdrafts() const {
  std::lock_guard lock(mu_);
  return overdrafts_;
}

void SendCredits::forget(const void* who) {
  std::lock_guard lock(mu_);
  if (waiter_ == who) waiter_ = nullptr;
}

uint64_t SendCredits::inFlight() const {
  std::lock_guard lock(mu_);
  return inFlight_;
}

uint64_t SendCredits::peak() const {
  std::lock_guard lock(mu_);
  return peak_;
}

uint64_t SendCredits::refusals() const {
  std::lock_guard lock(mu_);
  return refusals_;
}

std::shared_ptr<SendCredits> CreditBook::budgetFor(const std::string& className, uint64_t peerProcess,
                                                   uint64_t budget) {
  std::lock_guard lock(mu_);
  auto& w = budgets_[{className, peerProcess}];
  if (auto b = w.lock()) return b;
  auto b = std::make_shared<SendCredits>(budget);
  w = b;
  std::erase_if(budgets_, [](const auto& e) { return e.second.expired(); });
  return b;
}

}  // namespace pact::net
