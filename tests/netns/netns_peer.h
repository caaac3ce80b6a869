// What the test files of the netns suite share: the fixture that builds the namespaces (under the
// suite's lock), a peer's entry into its namespace with its environment and plugin, and the
// NCCL-like message stream (kWindow sends in flight, each in its own slot buffer, the receiver
// checking every message byte-exact in its own receive).
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "pact/pact.h"
#include "tests/abi/harness.h"
#include "tests/common/scoped_env.h"
#include "tests/netns/netns_util.h"

namespace pact::netns_test {

inline constexpr int kVersion = loader::kNewestVersion;
inline constexpr auto kStreamBudget = std::chrono::milliseconds(40000);  // one stream
inline constexpr auto kStreamWatchdog = std::chrono::milliseconds(60000);
inline constexpr auto kStreamPairTimeout = std::chrono::milliseconds(75000);

// ---- the suite's lock and fixture -----------------------------------------------------------

// Skips (namespaces unavailable) or fails (the check itself broke) in SetUp; up() builds the
// namespaces under the suite's lock, TearDown removes them.
class Netns : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;
  // ci/netns.sh up OPTIONS... (after taking the suite's lock).
  void up(const std::vector<std::string>& options);

 private:
  void lock();

  bool built_ = false;
  int lockFd_ = -1;
};

// ci/netns.sh ARGS... from the gtest process, as one fault step of a test: EXPECTs exit 0 and
// returns false (with the output in the failure) otherwise.
bool script(const std::vector<std::string>& args);

// ---- peers ----------------------------------------------------------------------------------

struct Side {
  std::string ns;          // pactA / pactB
  std::string link;        // a link that must be visible after entering (pa0 / pb0)
  std::string devices;     // PACT_NET_DEVICES
  bool pinUcx = true;      // also set UCX_NET_DEVICES = devices
  std::string peerTimeout; // PACT_PEER_TIMEOUT, empty = the plugin's default
  std::string tc;          // PACT_TC_DEFAULT, empty = unset
  std::string userUcx = {};  // when set: UCX_NET_DEVICES as a user's launch script set it (pinUcx ignored)
};

inline Side sideA(const std::string& devices = "pa0") {
  return {"pactA", "pa0", devices, true, "", ""};
}
inline Side sideB(const std::string& devices = "pb0") {
  return {"pactB", "pb0", devices, true, "", ""};
}

// PACT_PLUGIN_PATH as the harness will read it (it removes the variable on its first use).
const std::string& pluginPath();

// Enters the side's namespace, sets its environment (kept in *env, which may already hold the
// caller's own variables) and opens the plugin.
std::unique_ptr<loader::NetPlugin> openIn(const Side& side, test::ScopedEnv* env);

// Index of the device named `name`; ADD_FAILURE (listing the names seen) and -1 when absent.
int findDevice(loader::NetPlugin& plugin, const std::string& name);

// An engine named `name` listening on listenIp (nullptr: no listener) with a progress thread, in
// the namespace entered; nullptr (with a failure) when it cannot be made.
pact_engine_t makeEngine(const char* name, const char* listenIp);
// Expects n KV transfers, keys 1..n, transfer i into [i * size, (i + 1) * size) of mr; fails the
// test (and returns fewer) when one is refused.
std::vector<pact_xfer_t> expectKv(pact_engine_t e, pact_mr_t mr, int n, uint64_t size);

// ---- the message stream ---------------------------------------------------------------------

inline constexpr int kMessages = 64;  // the default stream
inline constexpr int kWindow = 8;     // messages in flight per side
inline constexpr size_t kMaxMessage = 4 << 20;
inline constexpr size_t kGuard = 4096;

// The default stream's sizes: 1 B .. 4 MiB, mixed.
size_t messageSize(int i);
uint64_t messageSeed(int i);

struct StreamSpec {
  int messages = kMessages;
  size_t (*size)(int) = messageSize;  // at most kMaxMessage
  std::chrono::milliseconds budget = kStreamBudget;
  int window = kWindow;  // messages in flight per side, 1 .. kWindow
};
uint64_t streamBytes(const StreamSpec& spec = {});

// kWindow slot buffers of `size` bytes, each registered on `comm` (deregistered on destruction).
struct Slots {
  std::vector<std::unique_ptr<abi_test::HostBuffer>> bufs;
  std::vector<std::unique_ptr<abi_test::MemReg>> regs;
  Slots(loader::NetPlugin& plugin, void* comm, size_t size);
  bool ok() const;
};

struct StreamReport {
  uint64_t bytes = 0;       // payload received
  double seconds = 0;       // from the start barrier to the last completion
  uint64_t linkRxBytes = 0; // growth of the receiving link's rx_bytes over the stream
  long long maxGapMs = 0;   // longest wait for one message (a stall shows here)
};

// Receives the stream, spec.window receives in flight, each checked for size, contents (per-message
// pattern: message i must land in receive i) and an untouched guard after it. `link` (optional):
// the link whose rx_bytes growth is reported. `received` (optional) is called with the count of
// messages checked so far after each one: where a test tells the parent how far the stream got.
void receiveStream(loader::NetPlugin& plugin, void* comm, test::Channel& peer,
                   const std::string& link, StreamReport* report, const StreamSpec& spec = {},
                   const std::function<void(int)>& received = {});

// Sends the stream, spec.window sends in flight. `poll` (optional) is called between test() calls
// while a send is pending: where a test watches the comm (or its parent) during the stream.
void sendStream(loader::NetPlugin& plugin, void* comm, test::Channel& peer,
                const StreamSpec& spec = {}, const std::function<void()>& poll = {});

// ---- faults struck by the parent (the failover tests of both faces) ---------------------------

// Fault notes from the parent to the peers (sent just before the fault).
inline constexpr char kNoteDown = 'D';
inline constexpr char kNoteUp = 'U';
// The receiver's notes to the parent are ints: a count of messages (or transfers) checked, or
// kEnd right before its final report (so that a stream that ends early is never mistaken for a count).
inline constexpr int kEnd = -1;

inline long long msSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t).count();
}

// Parent side: the receiver's notes (counts, then kEnd and its report), read in order.
class ReceiverNotes {
 public:
  explicit ReceiverNotes(test::Channel& ch) : ch_(ch) {}

  // The next note must say that `n` messages arrived (bounded wait).
  bool await(int n);

  // Skips the counts the parent did not wait for, up to kEnd, then reads the report.
  template <class T>
  bool report(T* out) {
    abi_test::Deadline deadline(kStreamPairTimeout);
    while (!ended_) {
      int note = 0;
      if (!ch_.recvValue(&note, deadline.remaining())) return false;
      ended_ = note == kEnd;
    }
    return ch_.recvValue(out, deadline.remaining());
  }

 private:
  test::Channel& ch_;
  bool ended_ = false;
};

// Parent side: one fault (`ci/netns.sh ARGS...`). The note goes to the sender (B) first, so that
// it times its reaction from just before the fault (a note to a sender already done is lost,
// which is fine).
bool fault(abi_test::PeerPair& pair, const std::vector<std::string>& args);

// Parent side: the duration of a fault (not a synchronisation): waits `d`, or less when the
// receiver ends its stream first (its end note becomes readable). True when the stream outlasted.
inline bool holdFault(abi_test::PeerPair& pair, std::chrono::milliseconds d) { return !pair.controlA().readable(d); }

// Parent side, a fault plan: rail `rail`'s link cut once the receiver reported message `at`, for
// `down`, then set up again. *outlasted: the stream was still running when the cut ended.
std::function<void(abi_test::PeerPair&, ReceiverNotes&)> linkOutage(int at, const char* rail,
                                                                    std::chrono::milliseconds down, bool* outlasted);

// Rail failover on NCCL comms: runs with every UCX pact builds with (1.13 and 1.22 in CI).
using NetnsFailover = Netns;

}  // namespace pact::netns_test
