#include "coll_ops.h"

#include <algorithm>
#include <cstring>

namespace pact::perf::coll {
namespace {

struct OpInfo {
  Op op;
  const char* name;
};
constexpr OpInfo kOps[] = {{Op::kAllReduce, "allreduce"},         {Op::kAllGather, "allgather"},
                           {Op::kReduceScatter, "reducescatter"}, {Op::kAllToAll, "alltoall"},
                           {Op::kBroadcast, "broadcast"},         {Op::kSendRecv, "sendrecv"}};
struct TypeInfo {
  DType t;
  const char* name;
  size_t size;
};
constexpr TypeInfo kTypes[] = {{DType::kInt8, "int8", 1},   {DType::kUint8, "uint8", 1},
                               {DType::kInt32, "int32", 4}, {DType::kUint32, "uint32", 4},
                               {DType::kInt64, "int64", 8}, {DType::kUint64, "uint64", 8},
                               {DType::kFloat, "float", 4}, {DType::kDouble, "double", 8}};
struct RedInfo {
  RedOp r;
  const char* name;
};
constexpr RedInfo kReds[] = {{RedOp::kSum, "sum"}, {RedOp::kProd, "prod"}, {RedOp::kMax, "max"},
                             {RedOp::kMin, "min"}};

template <typename F>
auto withType(DType t, F&& f) {
  switch (t) {
    case DType::kInt8: return f(int8_t{});
    case DType::kUint8: return f(uint8_t{});
    case DType::kInt32: return f(int32_t{});
    case DType::kUint32: return f(uint32_t{});
    case DType::kInt64: return f(int64_t{});
    case DType::kUint64: return f(uint64_t{});
    case DType::kFloat: return f(float{});
    case DType::kDouble: return f(double{});
  }
  return f(float{});
}

template <typename T>
T apply(RedOp r, T a, T b) {
  switch (r) {
    case RedOp::kSum: return static_cast<T>(a + b);
    case RedOp::kProd: return static_cast<T>(a * b);
    case RedOp::kMax: return std::max(a, b);
    case RedOp::kMin: return std::min(a, b);
  }
  return a;
}

}  // namespace

const char* name(Op op) {
  for (const auto& o : kOps)
    if (o.op == op) return o.name;
  return "?";
}
const char* name(DType t) {
  for (const auto& x : kTypes)
    if (x.t == t) return x.name;
  return "?";
}
const char* name(RedOp r) {
  for (const auto& x : kReds)
    if (x.r == r) return x.name;
  return "?";
}
size_t sizeOf(DType t) {
  for (const auto& x : kTypes)
    if (x.t == t) return x.size;
  return 1;
}
bool isReduction(Op op) { return op == Op::kAllReduce || op == Op::kReduceScatter; }
double busFactor(Op op, int n) {
  switch (op) {
    case Op::kAllReduce: return 2.0 * (n - 1) / n;
    case Op::kAllGather:
    case Op::kReduceScatter:
    case Op::kAllToAll: return static_cast<double>(n - 1) / n;
    case Op::kBroadcast:
    case Op::kSendRecv: return 1;
  }
  return 1;
}
const std::vector<Op>& allOps() {
  static const std::vector<Op> ops = [] {
    std::vector<Op> v;
    for (const auto& o : kOps) v.push_back(o.op);
    return v;
  }();
  return ops;
}
bool parseOp(const std::string& s, Op* op) {
  for (const auto& o : kOps)
    if (s == o.name) return *op = o.op, true;
  return false;
}
bool parseDType(const std::string& s, DType* t) {
  for (const auto& x : kTypes)
    if (s == x.name) return *t = x.t, true;
  return false;
}
bool parseRedOp(const std::string& s, RedOp* r) {
  for (const auto& x : kReds)
    if (s == x.name) return *r = x.r, true;
  return false;
}

void reduce(DType t, RedOp r, void* out, const void* a, const void* b, size_t count) {
  withType(t, [&](auto zero) {
    using T = decltype(zero);
    auto* o = static_cast<T*>(out);
    const auto* x = static_cast<const T*>(a);
    const auto* y = static_cast<const T*>(b);
    switch (r) {  // one loop per op, so the compiler vectorises each
      case RedOp::kSum: for (size_t i = 0; i < count; ++i) o[i] = static_cast<T>(x[i] + y[i]); break;
      case RedOp::kProd: for (size_t i = 0; i < count; ++i) o[i] = static_cast<T>(x[i] * y[i]); break;
      case RedOp::kMax: for (size_t i = 0; i < count; ++i) o[i] = std::max(x[i], y[i]); break;
      case RedOp::kMin: for (size_t i = 0; i < count; ++i) o[i] = std::min(x[i], y[i]); break;
    }
    return 0;
  });
}

namespace {

template <typename T>
T valueOf(RedOp red, int rank, size_t i) {
  if (red == RedOp::kProd) return static_cast<T>((rank + i) % 3 == 0 ? 2 : 1);  // products stay exact
  return static_cast<T>((static_cast<size_t>(rank) * 13 + i * 7) % 11 + 1);
}

template <typename T>
T folded(RedOp red, int ranks, size_t i) {
  T v = valueOf<T>(red, 0, i);
  for (int q = 1; q < ranks; ++q) v = apply(red, v, valueOf<T>(red, q, i));
  return v;
}

}  // namespace

void fillInput(const Plan& p, const Buffers& b) {
  withType(p.type, [&](auto zero) {
    using T = decltype(zero);
    const size_t ts = sizeof(T), n = static_cast<size_t>(p.ranks);
    const size_t blk = p.count / n;
    std::memset(b.recv, 0xa5, p.count * ts);  // what a collective that moved nothing leaves
    const bool gather = p.op == Op::kAllGather;
    T* in = reinterpret_cast<T*>(p.inPlace ? b.recv + (gather ? p.rank * blk * ts : 0) : b.send);
    const size_t elems = gather ? blk : p.count;
    if (p.op == Op::kBroadcast && p.rank != p.root) return 0;
    for (size_t i = 0; i < elems; ++i) in[i] = valueOf<T>(p.red, p.rank, i);
    return 0;
  });
}

size_t countWrong(const Plan& p, const Buffers& b) {
  return withType(p.type, [&](auto zero) {
    using T = decltype(zero);
    const int n = p.ranks, r = p.rank;
    const size_t blk = p.count / static_cast<size_t>(n);
    const T* out = reinterpret_cast<const T*>(b.recv);
    size_t wrong = 0, elems = p.count;
    auto expect = [&](size_t j) -> T {
      switch (p.op) {
        case Op::kAllReduce: return folded<T>(p.red, n, j);
        case Op::kAllGather: return valueOf<T>(p.red, static_cast<int>(j / blk), j % blk);
        case Op::kReduceScatter: return folded<T>(p.red, n, r * blk + j);
        case Op::kAllToAll: return valueOf<T>(p.red, static_cast<int>(j / blk), r * blk + j % blk);
        case Op::kBroadcast: return valueOf<T>(p.red, p.root, j);
        case Op::kSendRecv: return valueOf<T>(p.red, wrap(r - 1, n), j);
      }
      return T{};
    };
    if (p.op == Op::kReduceScatter) {
      elems = blk;
      if (p.inPlace) out += r * blk;
    }
    for (size_t j = 0; j < elems; ++j) wrong += out[j] == expect(j) ? 0 : 1;
    return wrong;
  });
}

}  // namespace pact::perf::coll
