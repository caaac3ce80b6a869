// What a collective is, apart from how it moves: the ops, element types and reductions with
// their names and nccl-tests' bus-bandwidth factors, the CPU reduction, a rank's plan and
// buffers, and the check of every output element against what the collective must produce.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

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

// a mod n in [0, n), for ring positions.
inline int wrap(int a, int n) { return ((a % n) + n) % n; }

// The buffers of one collective on one rank. count: elements of the op as nccl-tests counts them
// (allreduce/broadcast/sendrecv: of each buffer; allgather, reducescatter, alltoall: of the full
// buffer, n blocks of count / n).
struct Buffers {
  char* send = nullptr;
  char* recv = nullptr;
  char* tmp = nullptr;   // scratch of the full buffer's size (reducescatter, in-place alltoall)
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
  bool tree = false;  // allreduce: NCCL's double binary tree instead of the ring (coll_sched.h)
};

// Fills rank r's input for the check and returns how many elements of its output differ from
// what the collective must produce (every element is checked).
void fillInput(const Plan& p, const Buffers& b);
size_t countWrong(const Plan& p, const Buffers& b);

}  // namespace pact::perf::coll
