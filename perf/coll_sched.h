// How a collective moves through a net plugin, as NCCL moves it: per connection an ordered stream
// of slices (at most `chunk` bytes each, up to `window` in flight, NCCL's steps), sends and
// receives matched in posting order, a send that forwards a received slice waiting for it, and a
// slice to be reduced landing in one of the connection's staging slots first. Builders turn one
// collective on one rank into such streams (ring algorithms; all-to-all a connection per peer);
// run() drives them with the plugin's isend/irecv/test until every slice is done.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "net_plugin.h"

namespace pact::perf::coll {

enum class Op { kAllReduce, kAllGather, kReduceScatter, kAllToAll, kBroadcast, kSendRecv };
enum class DType { kInt8, kUint8, kInt32, kUint32, kInt64, kUint64, kFloat, kDouble };
enum class RedOp { kSum, kProd, kMax, kMin };

const char* name(Op op);
const char* name(DType t);
const char* name(RedOp r);
size_t sizeOf(DType t);
bool isReduction(Op op);
// nccl-tests' bus bandwidth factor for n ranks.
double busFactor(Op op, int n);
// Every op, in nccl-tests' order, for --op all.
const std::vector<Op>& allOps();
bool parseOp(const std::string& s, Op* op);
bool parseDType(const std::string& s, DType* t);
bool parseRedOp(const std::string& s, RedOp* r);

// out[i] = a[i] (op) b[i] for count elements of type t (out may be a or b).
void reduce(DType t, RedOp r, void* out, const void* a, const void* b, size_t count);

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

// The buffers of one collective on one rank. count: elements of the op as nccl-tests counts them
// (allreduce/broadcast/sendrecv: of each buffer; allgather, reducescatter, alltoall: of the full
// buffer, n blocks of count / n).
struct Buffers {
  char* send = nullptr;
  char* recv = nullptr;
  char* tmp = nullptr;   // scratch of the full buffer's size (reducescatter, in-place alltoall)
};

// The comms and registrations a rank holds, per channel: ring neighbours (send to rank + 1,
// receive from rank - 1) and a comm each way per peer (every peer for all-to-all, the tree
// neighbours for a tree allreduce).
struct Comms {
  std::vector<void*> next, prev;                 // [channel]
  std::vector<std::vector<void*>> to, from;      // [peer][channel]
  // The plugin's registration of buffer `which` (0 send, 1 recv, 2 tmp) on a comm.
  std::function<void*(void* comm, int which)> mh;
  // A receive comm's staging slots for slices to be reduced, and their registrations.
  std::function<void(void* comm, std::vector<char*>* slots, std::vector<void*>* mhs)> slots;
};

struct Plan {
  Op op = Op::kAllReduce;
  DType type = DType::kFloat;
  RedOp red = RedOp::kSum;
  int root = 0;
  size_t count = 0;
  bool inPlace = false;
  int rank = 0, ranks = 1;
  int channels = 1;
  size_t chunk = 512 << 10;
  bool tree = false;  // allreduce: a binary tree (reduce to rank 0, broadcast back) instead of the ring
};

// Rank q's tree neighbours (parent (q - 1) / 2, children 2q + 1 and 2q + 2 that exist), ascending.
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

// Fills rank r's input for the check and returns how many elements of its output differ from
// what the collective must produce (every element is checked).
void fillInput(const Plan& p, const Buffers& b);
size_t countWrong(const Plan& p, const Buffers& b);

}  // namespace pact::perf::coll
