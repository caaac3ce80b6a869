// The data path of `pact-perf p2p`: one Session per process (plugin, a comm in each direction,
// registered buffers) and the bandwidth stream / ping-pong loops over it. Both ranks run the same
// calls in the same order; the control channel (peer.h) keeps them in step.
#pragma once

#include "net_plugin.h"
#include "report.h"

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

namespace pact::perf {

struct P2pOptions {
  std::string plugin;
  int version = 0, dev = 0, window = 16, tc = -1;
  int buffers = 0;  // bandwidth buffers per side; 0 = one per outstanding message (up to 512 MiB)
  // One sweep (nccl-tests' -b/-e/-f) for both measurements; latency stops at lat_max unless a
  // latency sweep of its own is asked for (lat_min or lat_factor set).
  std::string min_size = "8", max_size = "1G", budget = "256M";
  std::string lat_min, lat_max = "1M";
  size_t factor = 2, lat_factor = 0;
  long iters = 0, max_iters = 20000, lat_iters = 0;
  unsigned timeout = 60;
  std::string json;
  std::string plot;  // --plot: an SVG of the run (pact-plot)
  bool no_bw = false, no_lat = false, verify = false, verbose = false;
  std::vector<std::string> netns;         // {rank 0's, rank 1's} network namespace, or empty
  std::vector<std::string> env_a, env_b;  // K=V set in rank 0 / rank 1 before the plugin opens
  std::vector<int> vdevice;               // members of a virtual device to run on, or empty
  bool lane_stats = false;                // print the send comm's per-lane bytes
};

struct FreeDeleter {
  void operator()(char* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<char, FreeDeleter>;

// Per-process state. Rank 0 sends the bandwidth stream, rank 1 receives it; both directions are
// used by the latency ping-pong.
struct Session {
  Session(const P2pOptions& o, int r) : opt(o), rank(r) {}
  const P2pOptions& opt;
  int rank;
  std::unique_ptr<loader::NetPlugin> net;
  void* send_comm = nullptr;  // to the peer
  void* recv_comm = nullptr;  // from the peer
  size_t slots = 1, slot_bytes = 0;
  Buffer bw_buf, lat_send, lat_recv;
  void* bw_mh = nullptr;
  void* lat_send_mh = nullptr;
  void* lat_recv_mh = nullptr;

  char* slot(long seq) const {
    return bw_buf.get() + (static_cast<size_t>(seq) % slots) * slot_bytes;
  }
};

// Bandwidth buffer slots used for a largest message of max_bw bytes (at most opt.window).
size_t slotCount(const P2pOptions& opt, size_t max_bw);

// Each rank listens, swaps handles with the peer, then polls connect and accept from its one
// thread until both comms exist. Dies on any plugin error or after opt.timeout seconds.
void connectPair(Session& s);
// Allocates and registers (HOST) the bandwidth slots and the latency buffers.
void registerBuffers(Session& s, size_t max_bw, size_t max_lat);
// Barrier, deregMr, close both comms, barrier, finalize.
void teardown(Session& s);

// One message size. Fills row on rank 0 only (rank 1 sends its measurements over).
void runBandwidth(Session& s, size_t size, size_t budget, SizeRow* row);
void runLatency(Session& s, size_t size, SizeRow* row);

}  // namespace pact::perf
