// Receiver credit accounting: a total budget and optional per-sender shares of it. A transfer is
// advertised only when its bytes fit both, so the receiver's staged bytes (advertised, not yet
// final) never exceed the budget; lowering a budget never takes back what is advertised.
// kUnlimited (PACT_CREDIT_UNLIMITED) means no limit; 0 grants nothing. Not synchronized (the
// engine's lock).
#pragma once

#include <cstdint>
#include <map>

namespace pact::engine {

inline constexpr uint64_t kUnlimited = UINT64_MAX;

class CreditLedger {
 public:
  explicit CreditLedger(uint64_t total) : total_(total) {}

  void setTotal(uint64_t bytes) { total_ = bytes; }
  void setShare(uint64_t peer, uint64_t bytes) { peers_[peer].share = bytes; }
  uint64_t total() const { return total_; }
  // What a sender is told it may have in flight: its share, else the total.
  uint64_t grantFor(uint64_t peer) const;

  bool fits(uint64_t peer, uint64_t bytes) const;
  // take() after fits(); give() returns exactly what take() took.
  void take(uint64_t peer, uint64_t bytes);
  void give(uint64_t peer, uint64_t bytes);
  void forget(uint64_t peer) { peers_.erase(peer); }

  uint64_t staged() const { return staged_; }
  uint64_t staged(uint64_t peer) const;
  uint64_t peak() const { return peak_; }

 private:
  struct Share {
    uint64_t share = kUnlimited;
    uint64_t staged = 0;
  };
  uint64_t total_;
  uint64_t staged_ = 0;
  uint64_t peak_ = 0;
  std::map<uint64_t, Share> peers_;
};

}  // namespace pact::engine
