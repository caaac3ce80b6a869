// Epoch fencing and the commit hook of the NCCL face (include/pact/nccl_ext.h). Process-wide: the
// application sets its model epoch at run time (a weights update does not restart the process)
// and may install a hook that sees, and may veto, every received message before test() reports
// it done. Fencing starts with the first of either call; from then on every receive comm connected
// afterwards asks its senders for seals (transport/seal.h), which carry the sender's epoch, and a
// message of another epoch than the receiver's current one is never reported done.
// Thread-safe; the data path reads two relaxed atomics when fencing is off.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

namespace pact::net {

// What the hook is told of a message, after its checks passed and before it is reported done.
struct MessageFacts {
  const void* comm = nullptr;       // the receive comm, as the face handed it out
  const std::string* peer = nullptr;
  const std::string* className = nullptr;
  int buffer = 0;                   // which buffer of a multi-receive
  uint32_t tag = 0;                 // the NCCL tag
  uint64_t bytes = 0;
  uint64_t epoch = 0;               // the sender's model epoch
  int verify = 0;                   // Verify's value
  uint64_t checksum = 0;            // the message's check (Seal: the piece's, or over the pieces')
};
// 0 accepts; anything else vetoes (the comm fails naming the value).
using CommitHook = std::function<int(const MessageFacts&)>;

class Fence {
 public:
  static Fence& process();
  void setEpoch(uint64_t epoch);
  void setHook(CommitHook hook);  // an empty one removes it (fencing stays on)
  bool active() const { return active_.load(std::memory_order_acquire); }
  uint64_t epoch() const { return epoch_.load(std::memory_order_acquire); }
  bool hasHook() const;
  // The hook's answer (0 when there is none).
  int judge(const MessageFacts& m) const;

 private:
  std::atomic<bool> active_{false};
  std::atomic<uint64_t> epoch_{0};
  mutable std::mutex mu_;
  std::shared_ptr<const CommitHook> hook_;
};

}  // namespace pact::net
