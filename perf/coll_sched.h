// How a collective moves through a net plugin, as NCCL moves it: per connection an ordered stream
// of slices (at most `chunk` bytes each, up to `window` in flight, NCCL's steps), sends and
// receives matched in posting order, a send that forwards a received slice waiting for it, and a
// slice to be reduced landing in one of the connection's staging slots first. Builders turn one
// collective on one rank into such streams (ring algorithms, the double binary tree; all-to-all a
// connection per peer);
// run() drives them with the plugin's isend/irecv/test until every slice is done.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "coll_ops.h"
#include "net_plugin.h"

namespace pact::perf::coll {

struct Slice {
  char* ptr = nullptr;   // send: the bytes; receive: where they go (nullptr: a staging slot)
  size_t len = 0;
  void* mh = nullptr;    // the plugin's registration of ptr on this stream's comm
  // The slice that must be done first (stream index in the schedule, slice), or -1: a send
  // forwarding what it received waits to be posted; a reduced receive waits to be applied (its
  // output is also the other's).
  int depStream = -1;
  int depSlice = -1;
  // receive into a staging slot: then out = a (op) slot
  char* out = nullptr;
  const char* a = nullptr;
};

struct Stream {
  void* comm = nullptr;
  bool send = false;
  std::vector<Slice> slices;
  // receive streams that reduce: the comm's staging slots (window of chunk bytes each)
  std::vector<char*> slots;
  std::vector<void*> slotMh;
};


// The comms and registrations a rank holds, per channel: ring neighbours (send to rank + 1,
// receive from rank - 1) and comms each way per peer (every peer for all-to-all, the tree
// neighbours for a tree allreduce: 2 x channels of them, see treeNeighbours).
struct Comms {
  std::vector<void*> next, prev;                 // [channel]
  std::vector<std::vector<void*>> to, from;      // [peer][channel, or tree * channels + channel]
  // The plugin's registration of buffer `which` (0 send, 1 recv, 2 tmp) on a comm.
  std::function<void*(void* comm, int which)> mh;
  // A receive comm's staging slots for slices to be reduced, and their registrations.
  std::function<void(void* comm, std::vector<char*>* slots, std::vector<void*>* mhs)> slots;
};


// NCCL's double binary tree: rank q's parent (-1 at the root) and children in tree 0 (the heap
// order, root 0) or tree 1 (the heap order on the mirrored ranks n - 1 - q, root n - 1), so a
// rank is an inner node in at most one of them. Each tree carries half of every channel's part.
struct TreeLinks {
  int parent = -1;
  std::vector<int> kids;
};
TreeLinks treeLinks(int q, int ranks, int tree);
// Every rank q is linked to in either tree, ascending: a tree allreduce opens 2 x channels comms
// each way to each of them (tree t, channel ch: comm t * channels + ch).
std::vector<int> treeNeighbours(int q, int ranks);

// The streams of one collective, plus the local copies that come first (out-of-place root data,
// in-place inputs saved to tmp).
struct Schedule {
  DType type = DType::kFloat;
  RedOp red = RedOp::kSum;
  std::vector<Stream> streams;
  struct Copy {
    char* dst;
    const char* src;
    size_t len;
  };
  std::vector<Copy> before;
};

// Builds the schedule; in-place buffers are b.recv (the send pointer is not used then).
Schedule build(const Plan& p, const Buffers& b, Comms& c);

// Runs the schedule to completion: at most `window` slices in flight per stream (and no more than
// a receive stream's slots to reduce). alive() is asked every 256 spins (a dead rank ends the
// job), and so is the clock (timeout_s). A plugin error is fatal, naming the call.
void run(loader::NetPlugin& net, Schedule& s, int window, double timeout_s,
         const std::function<bool()>& alive);

// One byte over every comm (a send on each of `sends` from tokens[0], a receive on each of
// `recvs` into tokens[1]; mh(comm) registers the pair), run before a rank waits for the others
// outside the plugin: the rendezvous sends of the collective before it complete only while their
// receivers' workers progress (UCX 1.13 over shared memory acknowledges them then), and a rank
// that had all it wanted would otherwise stop calling the plugin and hold its peers' sends open.
// NCCL's next collective does the same for it.
Schedule settle(const std::vector<void*>& sends, const std::vector<void*>& recvs, char* tokens,
                const std::function<void*(void* comm)>& mh);


}  // namespace pact::perf::coll
