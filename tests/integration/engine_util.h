// Scaffolding of the engine integration tests: engines in forked processes (real UCX over
// loopback, real sockets), connected receiver <-> sender, with a test channel between them for
// "ready" notes, and the data pattern every test verifies byte for byte.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "pact/pact.h"
#include "tests/common/channel.h"
#include "tests/common/fork_peer.h"

namespace pact::test {

using Env = std::map<std::string, std::string>;

// Byte i of the payload of seed: differs per transfer and per position.
inline uint8_t patternByte(uint64_t seed, uint64_t i) {
  uint64_t z = seed * 0x9e3779b97f4a7c15ull + i;
  z ^= z >> 29;
  return static_cast<uint8_t>(z * 0xbf58476d1ce4e5b9ull >> 56);
}
inline void fillPattern(void* p, size_t n, uint64_t seed, uint64_t start = 0) {
  auto* b = static_cast<uint8_t*>(p);
  for (size_t i = 0; i < n; ++i) b[i] = patternByte(seed, start + i);
}
// Index of the first wrong byte, or -1.
inline int64_t firstMismatch(const void* p, size_t n, uint64_t seed, uint64_t start = 0) {
  const auto* b = static_cast<const uint8_t*>(p);
  for (size_t i = 0; i < n; ++i) {
    if (b[i] != patternByte(seed, start + i)) return static_cast<int64_t>(i);
  }
  return -1;
}

#define PACT_OK_OR_FAIL(call)                                                             \
  do {                                                                                    \
    pact_status_t st_ = (call);                                                           \
    ASSERT_EQ(st_, PACT_OK) << #call << ": " << pact_status_string(st_) << ": "           \
                            << pact_last_error();                                         \
  } while (0)

// An engine named name (listening on listenIp unless null), with a progress thread unless told
// otherwise; ADD_FAILURE and nullptr when creation fails.
pact_engine_t makeEngine(const char* name, const char* listenIp, bool progressThread = true,
                         uint64_t creditBudget = 0);

// "ip:port" of an engine, as the test processes pass it around.
struct Address {
  char text[128];
};

// An all-to-all rank in a forked process: engine `name` listening on loopback, its address sent
// to the test process, then connected to each of the `ranks` addresses the test process relays
// back (its own included). The peer ids in rank order; empty (and a failure) when any step fails.
struct Rank {
  pact_engine_t engine = nullptr;
  std::vector<pact_peer_t> peers;
};
Rank connectRank(const std::string& name, Channel& parent, size_t ranks);

// A commit hook that checks every committed byte: the sender writes the pattern of the key's
// request_id over the whole transfer (fillPattern with start = position in the transfer).
struct CheckingHook {
  std::vector<uint8_t>* memory;  // the registration the blocks point into
  int calls = 0;
  int bad = 0;  // committed block tables with a wrong byte: miscommits
  static int call(void* user, pact_xfer_t, const pact_key_t* key, pact_peer_t,
                  const pact_block_t* blocks, size_t count) {
    auto* self = static_cast<CheckingHook*>(user);
    ++self->calls;
    uint64_t pos = 0;
    for (size_t i = 0; i < count; ++i) {
      if (firstMismatch(self->memory->data() + blocks[i].offset, blocks[i].length,
                        key->request_id, pos) >= 0)
        ++self->bad;
      pos += blocks[i].length;
    }
    return 0;
  }
};

// The stress tests' number of rounds: the positive integer in environment variable name, else
// fallback.
int roundsFromEnv(const char* name, int fallback);

// SIGKILLs `victim` once `from` sends a note, then waits for both (bounded).
void killOnNote(Channel& from, ForkPeer& victim, ForkPeer& survivor);
// Waits (progressing e, at most 10 s) until the peer's credit grant arrived over UCX (it goes
// once the peer is ready). False when none came.
bool awaitGrant(pact_engine_t e, pact_peer_t peer);

// An engine with a registered buffer, owned by one test process.
struct Side {
  pact_engine_t engine = nullptr;
  pact_peer_t peer = 0;  // the other side
  Channel* channel = nullptr;  // to the other side
  Channel* parent = nullptr;   // to the test process
  std::vector<uint8_t> memory;
  pact_mr_t mr = nullptr;
  std::vector<pact_xfer_t> xfers;  // released (if not yet) before the registration goes
  CheckingHook hook{&memory};      // installed by checkCommits()
  ~Side();
  // Installs `hook` as the engine's commit hook and returns it (calls, miscommits).
  CheckingHook& checkCommits();
  // Blocks of the registered memory: consecutive, of these lengths, starting at offset.
  std::vector<pact_block_t> blocks(const std::vector<uint64_t>& lengths, uint64_t offset = 0) const;
  pact_stats_t stats() const;
  // Waits until xfer is final (bounded) and returns its info.
  pact_xfer_info_t waitFinal(pact_xfer_t xfer, int timeoutMs = 20000) const;
  // Test-channel notes between the two processes.
  void note(uint32_t what) const;
  bool await(uint32_t what, int timeoutMs = 20000) const;
  // await() for an engine without a progress thread: progresses it while waiting.
  bool awaitProgressing(uint32_t what, int timeoutMs = 20000) const;
};

struct PairOptions {
  Env receiverEnv, senderEnv;
  uint64_t creditBudget = 0;
  size_t memory = 32u << 20;
  bool progressThread = true;
  // The handshake must fail: the sender's connect returns PACT_ERR_REFUSED promptly naming
  // `refusal`, the receiver never sees the peer; the bodies do not run.
  bool expectRefused = false;
  std::string refusal;
  std::chrono::milliseconds timeout{60000};
};

using SideBody = std::function<void(Side&)>;
// What the test process does while the two run (e.g. SIGKILL one of them when it says so).
// Returns the children that are expected to die (not checked for success).
struct Children {
  ForkPeer& receiver;
  ForkPeer& sender;
  Channel& toReceiver;
  Channel& toSender;
};
using ParentBody = std::function<void(Children&)>;

// Forks a receiver (listening engine named "receiver") and a sender ("sender") that connects to
// it; each sets its environment first, registers `memory` bytes, then runs its body. The test
// fails when a child fails, crashes or outlives the timeout, unless the parent body killed it.
void runPair(const PairOptions& options, const SideBody& receiver, const SideBody& sender,
             const ParentBody& parent = nullptr);

}  // namespace pact::test
