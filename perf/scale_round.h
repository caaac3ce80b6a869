// One round of `pact-perf scale` (scale.h) on one side: N comm pairs set up as NCCL sets them
// up, one message over each, all closed in one order; what the process held before, after setup
// and after close, and the first failure. Both sides run it; the control channel (peer.h)
// carries each phase's status.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "net_plugin.h"

namespace pact::perf::scale {

using nlohmann::json;

constexpr int kTag = 1;                   // NCCL's tag: the sender's rank (B is rank 1)
constexpr size_t kMaxMessage = 1u << 20;  // one shared buffer per side, registered per comm
constexpr int kRecv = 0, kSend = 1;       // ranks: A receives, B sends

struct ScaleOptions {
  std::vector<long> comms{64, 1000, 10000, 100000};
  std::string order = "all";
  std::string plugin;
  std::string size = "8";
  std::string json;
  long batch = 1000;
  int dev = 0;
  int version = 0;
  double timeout_s = 120;
  long nofile = -1;  // soft RLIMIT_NOFILE: -1 = raise to the hard limit, 0 = leave as it is
  bool verbose = false;
};

enum class Order { kBoth, kRecvFirst, kSendFirst };

const char* orderName(Order o);

// ---- what the process holds ---------------------------------------------------------------------

struct Snapshot {
  long fds = 0, threads = 0, maps = 0;
  uint64_t rss = 0;
};
Snapshot snapshot();
json snapJson(const Snapshot& s);

// ---- one status per phase and side --------------------------------------------------------------

enum Phase : int32_t { kSetup = 0, kMessage = 1, kClose = 2 };

// Plain bytes, so that it crosses the control channel as is (both sides are this binary).
struct Status {
  int32_t ok = 1;
  int32_t phase = -1;
  int32_t rc = 0;
  int32_t pad = 0;
  int64_t index = -1;  // the connection, or -1
  char step[32] = {};
  char error[480] = {};
};

// What one side of a round measured.
struct SideResult {
  Snapshot before, after_setup, after_close;
  bool setup_done = false;
  long opened = 0;  // comms that existed on this side after setup
  long closed = 0;
  long closed_in_order = 0;  // of those, closed by the timed close (before its deadline)
  double setup_s = 0, reg_s = 0, msg_first = 0, msg_last = 0, dereg_s = 0, close_s = 0;
  double leftover_close_s = 0;
  bool close_timed = false;  // every phase before the close succeeded, so it ran in its order
  Status status;             // this side's first failure
  json resources = nullptr;  // pact_plugin_resources after close, if the plugin exports it

  json toJson(long n) const;
};

// Runs the round on this side (rank kRecv or kSend); buf is the side's message buffer.
SideResult runRound(loader::NetPlugin& net, const ScaleOptions& o, size_t size, char* buf,
                    size_t buf_bytes, int rank, long n, Order order);

// A string over the control channel (B's results to A).
void sendString(const std::string& s);
std::string recvString();

}  // namespace pact::perf::scale
