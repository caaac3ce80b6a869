#include "coll_sched.h"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "coll_boot.h"
#include "peer.h"  // resultName

namespace pact::perf::coll {
namespace {

// [lo, hi) of part `i` of `parts` equal parts of [0, n) (the first ones one shorter at most).
std::pair<size_t, size_t> part(size_t lo, size_t hi, size_t parts, size_t i) {
  const size_t n = hi - lo;
  return {lo + n * i / parts, lo + n * (i + 1) / parts};
}

// Adds one ring step's slices of elements [lo, hi) of a channel to its two streams.
struct RingBuilder {
  const Plan& p;
  Comms& c;
  size_t ts;
  Stream* send;
  Stream* recv;
  int recvIndex;           // the receive stream's index in the schedule
  int lastRecvStart = -1;  // where the previous step's receive slices began

  size_t sliceElems() const { return std::max<size_t>(1, p.chunk / ts); }

  // A step: send elements [slo, shi) from base `sendBase` (buffer id sendWhich) — forwarding the
  // previous step's receive when `dep` — and receive [rlo, rhi): straight into `directBase`
  // (buffer directWhich), or reduced: out[e - outShift] = a[e] (op) landed.
  void step(size_t slo, size_t shi, char* sendBase, int sendWhich, bool dep, size_t rlo, size_t rhi,
            char* directBase, int directWhich, char* outBase, size_t outShift, const char* aBase) {
    const size_t se = sliceElems();
    int k = 0;
    if (send != nullptr) {
      for (size_t e = slo; e < shi; e += se, ++k) {
        Slice s;
        s.ptr = sendBase + e * ts;
        s.len = std::min(se, shi - e) * ts;
        s.mh = c.mh(send->comm, sendWhich);
        if (dep) {
          s.depStream = recvIndex;
          s.depSlice = lastRecvStart + k;
        }
        send->slices.push_back(s);
      }
    }
    if (recv != nullptr) {
      const int start = static_cast<int>(recv->slices.size());
      for (size_t e = rlo; e < rhi; e += se) {
        Slice s;
        s.len = std::min(se, rhi - e) * ts;
        if (directBase != nullptr) {
          s.ptr = directBase + e * ts;
          s.mh = c.mh(recv->comm, directWhich);
        } else {
          s.out = outBase + (e - outShift) * ts;
          s.a = aBase + e * ts;
        }
        recv->slices.push_back(s);
      }
      lastRecvStart = start;
    }
  }
};

// Appends a stream of elements [lo, hi) of `base` in slices of `se` elements: sent or received
// straight (buffer `which`), or received into staging slots and reduced into base (= a op slot);
// slice k waits for slice k of stream `dep` (or -1). Returns the stream's index.
int appendStream(Schedule& s, Comms& c, void* comm, bool send, size_t lo, size_t hi, size_t se,
                 size_t ts, char* base, int which, bool reduced, const char* a, int dep) {
  Stream st;
  st.comm = comm;
  st.send = send;
  if (reduced) c.slots(comm, &st.slots, &st.slotMh);
  int k = 0;
  for (size_t e = lo; e < hi; e += se, ++k) {
    Slice sl;
    sl.len = std::min(se, hi - e) * ts;
    if (reduced) {
      sl.out = base + e * ts;
      sl.a = a + e * ts;
    } else {
      sl.ptr = base + e * ts;
      sl.mh = c.mh(comm, which);
    }
    if (dep >= 0) sl.depStream = dep, sl.depSlice = k;
    st.slices.push_back(sl);
  }
  s.streams.push_back(std::move(st));
  return static_cast<int>(s.streams.size()) - 1;
}

}  // namespace

TreeLinks treeLinks(int q, int ranks, int tree) {
  // Tree 0 is the heap order (parent (q - 1) / 2, children 2q + 1, 2q + 2); tree 1 the same on
  // the mirrored ranks n - 1 - q, so tree 0's inner nodes (the lower half of the ranks) are tree
  // 1's leaves and the other way round, as in NCCL's double binary tree.
  const auto rank = [&](int x) { return tree == 0 ? x : ranks - 1 - x; };  // its own inverse
  const int m = rank(q);
  TreeLinks l;
  if (m > 0) l.parent = rank((m - 1) / 2);
  for (int k : {2 * m + 1, 2 * m + 2})
    if (k < ranks) l.kids.push_back(rank(k));
  return l;
}

std::vector<int> treeNeighbours(int q, int ranks) {
  std::vector<int> v;
  for (int t : {0, 1}) {
    const TreeLinks l = treeLinks(q, ranks, t);
    if (l.parent >= 0) v.push_back(l.parent);
    v.insert(v.end(), l.kids.begin(), l.kids.end());
  }
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  return v;
}

Schedule build(const Plan& p, const Buffers& b, Comms& c) {
  Schedule s;
  s.type = p.type;
  s.red = p.red;
  const size_t ts = sizeOf(p.type);
  const int n = p.ranks, r = p.rank;
  const size_t full = p.count * ts;
  char* in = p.inPlace ? b.recv : b.send;
  const int inWhich = p.inPlace ? 1 : 0;
  const size_t blk = (p.op == Op::kAllGather || p.op == Op::kReduceScatter || p.op == Op::kAllToAll)
                         ? p.count / static_cast<size_t>(n)
                         : 0;
  if (n == 1) {  // no peer: the collective is a local copy (or nothing, in place)
    if (!p.inPlace && full > 0) s.before.push_back({b.recv, b.send, p.op == Op::kAllGather || p.op == Op::kReduceScatter ? blk * ts : full});
    return s;
  }
  if (p.op == Op::kAllToAll) {
    if (p.inPlace) s.before.push_back({b.tmp, b.recv, full});
    char* src = p.inPlace ? b.tmp : b.send;
    const int srcWhich = p.inPlace ? 2 : 0;
    if (!p.inPlace) s.before.push_back({b.recv + r * blk * ts, src + r * blk * ts, blk * ts});
    const size_t se = std::max<size_t>(1, p.chunk / ts);
    for (int i = 1; i < n; ++i) {
      const int q = (r + i) % n;  // staggered, as NCCL orders its peers
      for (int ch = 0; ch < p.channels; ++ch) {
        auto [lo, hi] = part(q * blk, (q + 1) * blk, p.channels, ch);
        appendStream(s, c, c.to[q][ch], true, lo, hi, se, ts, src, srcWhich, false, nullptr, -1);
        appendStream(s, c, c.from[q][ch], false, lo, hi, se, ts, b.recv, 1, false, nullptr, -1);
      }
    }
    return s;
  }
  if (p.op == Op::kAllReduce && p.tree) {
    // Each channel's part of the buffer in two halves, one per tree, each on its own comms (comm
    // t * channels + ch to a neighbour): reduced up its tree into recv (the tree's root ends with
    // the result), then broadcast down; each slice moves on as soon as its part of the previous
    // hop is there.
    const size_t se = std::max<size_t>(1, p.chunk / ts);
    for (int t = 0; t < 2; ++t) {
      const TreeLinks l = treeLinks(r, n, t);
      for (int ch = 0; ch < p.channels; ++ch) {
        auto [clo, chi] = part(0, p.count, static_cast<size_t>(p.channels), static_cast<size_t>(ch));
        auto [lo, hi] = part(clo, chi, 2, static_cast<size_t>(t));
        const size_t k = static_cast<size_t>(t * p.channels + ch);
        auto add = [&](void* comm, bool send, char* base, int which, bool reduced, const char* a, int dep) {
          return appendStream(s, c, comm, send, lo, hi, se, ts, base, which, reduced, a, dep);
        };
        int reducedBy = -1;  // the stream whose slice k completes the reduction of slice k here
        for (size_t j = 0; j < l.kids.size(); ++j)  // the second child's data folds into the first's
          reducedBy = add(c.from[l.kids[j]][k], false, b.recv, 1, true, j == 0 ? in : b.recv, reducedBy);
        int down = reducedBy;  // what the children's broadcast waits for: the result, here
        if (l.parent >= 0) {
          add(c.to[l.parent][k], true, l.kids.empty() ? in : b.recv, l.kids.empty() ? inWhich : 1, false, nullptr, reducedBy);
          down = add(c.from[l.parent][k], false, b.recv, 1, false, nullptr, -1);
        }
        for (int kid : l.kids) add(c.to[kid][k], true, b.recv, 1, false, nullptr, down);
      }
    }
    return s;
  }
  // Ring ops: per channel, streams [2ch] = send to next, [2ch + 1] = receive from prev.
  for (int ch = 0; ch < p.channels; ++ch) {
    Stream tx, rx;
    tx.comm = c.next[ch];
    tx.send = true;
    rx.comm = c.prev[ch];
    s.streams.push_back(std::move(tx));
    s.streams.push_back(std::move(rx));
  }
  for (int ch = 0; ch < p.channels; ++ch) {
    Stream* tx = &s.streams[2 * ch];
    Stream* rx = &s.streams[2 * ch + 1];
    if (isReduction(p.op)) c.slots(rx->comm, &rx->slots, &rx->slotMh);
    RingBuilder rb{p, c, ts, tx, rx, 2 * ch + 1};
    // The element range of block `blockIdx` of `blocks`, this channel's part of it.
    auto range = [&](size_t total, int blocks, int blockIdx) {
      auto [lo, hi] = part(0, total, static_cast<size_t>(blocks), static_cast<size_t>(blockIdx));
      return part(lo, hi, static_cast<size_t>(p.channels), static_cast<size_t>(ch));
    };
    switch (p.op) {
      case Op::kAllReduce: {
        // Reduce-scatter then all-gather, 2(n-1) steps; recv accumulates.
        for (int st = 0; st < n - 1; ++st) {
          auto [slo, shi] = range(p.count, n, wrap(r - st - 1, n));
          auto [rlo, rhi] = range(p.count, n, wrap(r - st - 2, n));
          rb.step(slo, shi, st == 0 ? in : b.recv, st == 0 ? inWhich : 1, st > 0, rlo, rhi, nullptr,
                  0, b.recv, 0, in);
        }
        for (int st = 0; st < n - 1; ++st) {
          auto [slo, shi] = range(p.count, n, wrap(r - st, n));
          auto [rlo, rhi] = range(p.count, n, wrap(r - st - 1, n));
          rb.step(slo, shi, b.recv, 1, true, rlo, rhi, b.recv, 1, nullptr, 0, nullptr);
        }
        break;
      }
      case Op::kAllGather: {
        if (ch == 0 && !p.inPlace) s.before.push_back({b.recv + r * blk * ts, b.send, blk * ts});
        for (int st = 0; st < n - 1; ++st) {
          auto [slo, shi] = range(p.count, n, wrap(r - st, n));
          auto [rlo, rhi] = range(p.count, n, wrap(r - st - 1, n));
          rb.step(slo, shi, b.recv, 1, st > 0, rlo, rhi, b.recv, 1, nullptr, 0, nullptr);
        }
        break;
      }
      case Op::kReduceScatter: {
        char* acc = p.inPlace ? b.recv : b.tmp;
        const int accWhich = p.inPlace ? 1 : 2;
        for (int st = 0; st < n - 1; ++st) {
          auto [slo, shi] = range(p.count, n, wrap(r - st - 1, n));
          auto [rlo, rhi] = range(p.count, n, wrap(r - st - 2, n));
          const bool last = st == n - 2;  // block r, fully reduced: the result
          char* out = last && !p.inPlace ? b.recv : acc;
          rb.step(slo, shi, st == 0 ? in : acc, st == 0 ? inWhich : accWhich, st > 0, rlo, rhi,
                  nullptr, 0, out, last && !p.inPlace ? r * blk : 0, in);
        }
        break;
      }
      case Op::kBroadcast: {
        const int pos = wrap(r - p.root, n);
        if (ch == 0 && pos == 0 && !p.inPlace) s.before.push_back({b.recv, b.send, full});
        auto [lo, hi] = part(0, p.count, static_cast<size_t>(p.channels), static_cast<size_t>(ch));
        RingBuilder one{p, c, ts, pos < n - 1 ? tx : nullptr, pos > 0 ? rx : nullptr, 2 * ch + 1};
        if (pos > 0) one.step(0, 0, nullptr, 0, false, lo, hi, b.recv, 1, nullptr, 0, nullptr);
        if (pos < n - 1) {
          // Forward each slice once it landed (the root has it all from the start).
          one.recv = nullptr;
          one.lastRecvStart = 0;
          one.step(lo, hi, b.recv, 1, pos > 0, 0, 0, nullptr, 0, nullptr, 0, nullptr);
        }
        break;
      }
      case Op::kSendRecv: {
        if (ch == 0 && p.inPlace) s.before.push_back({b.tmp, b.recv, full});
        auto [lo, hi] = part(0, p.count, static_cast<size_t>(p.channels), static_cast<size_t>(ch));
        rb.step(lo, hi, p.inPlace ? b.tmp : b.send, p.inPlace ? 2 : 0, false, lo, hi, b.recv, 1,
                nullptr, 0, nullptr);
        break;
      }
      case Op::kAllToAll: break;
    }
  }
  return s;
}

Schedule settle(const std::vector<void*>& sends, const std::vector<void*>& recvs, char* tokens,
                const std::function<void*(void* comm)>& mh) {
  Schedule s;
  s.type = DType::kUint8;
  for (const auto* list : {&recvs, &sends})
    for (void* comm : *list) {
      Stream st;
      st.comm = comm;
      st.send = list == &sends;
      Slice sl;
      sl.ptr = tokens + (st.send ? 0 : 1);
      sl.len = 1;
      sl.mh = mh(comm);
      st.slices.push_back(sl);
      s.streams.push_back(std::move(st));
    }
  return s;
}

void run(loader::NetPlugin& net, Schedule& s, int window, double timeout_s,
         const std::function<bool()>& alive) {
  for (const auto& cp : s.before)
    if (cp.len > 0) std::memmove(cp.dst, cp.src, cp.len);
  struct InFlight {
    size_t slice;
    void* req;
    int slot;
    bool landed = false;  // the plugin said done; a reduction may still wait for its turn
  };
  struct Live {
    size_t posted = 0, completed = 0;
    std::vector<char> done;
    std::vector<InFlight> inflight;
    std::vector<int> freeSlots;
  };
  std::vector<Live> live(s.streams.size());
  size_t remaining = 0;
  for (size_t i = 0; i < s.streams.size(); ++i) {
    live[i].done.assign(s.streams[i].slices.size(), 0);
    for (int k = static_cast<int>(s.streams[i].slots.size()) - 1; k >= 0; --k) live[i].freeSlots.push_back(k);
    remaining += s.streams[i].slices.size();
  }
  const size_t ts = sizeOf(s.type);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  for (unsigned spins = 0; remaining > 0; ++spins) {
    bool moved = false;
    for (size_t i = 0; i < s.streams.size(); ++i) {
      Stream& st = s.streams[i];
      Live& L = live[i];
      while (L.inflight.size() < static_cast<size_t>(window) && L.posted < st.slices.size()) {
        Slice& sl = st.slices[L.posted];
        void* req = nullptr;
        int slot = -1;
        if (st.send) {
          if (sl.depStream >= 0 && !live[static_cast<size_t>(sl.depStream)].done[static_cast<size_t>(sl.depSlice)]) break;
          const int rc = net.isend(st.comm, sl.ptr, sl.len, 0, sl.mh, &req);
          if (rc != 0) fatal(std::string("isend failed: ") + resultName(rc) + " " + loader::NetPlugin::takeLastWarning());
        } else {
          void* ptr = sl.ptr;
          void* mh = sl.mh;
          if (ptr == nullptr) {
            if (L.freeSlots.empty()) break;
            slot = L.freeSlots.back();
            ptr = st.slots[static_cast<size_t>(slot)];
            mh = st.slotMh[static_cast<size_t>(slot)];
          }
          size_t size = sl.len;
          int tag = 0;
          const int rc = net.irecv(st.comm, 1, &ptr, &size, &tag, &mh, &req);
          if (rc != 0) fatal(std::string("irecv failed: ") + resultName(rc) + " " + loader::NetPlugin::takeLastWarning());
          if (req != nullptr && slot >= 0) L.freeSlots.pop_back();
        }
        if (req == nullptr) break;  // the plugin's back-pressure: again on the next spin
        L.inflight.push_back({L.posted++, req, slot, false});
        moved = true;
      }
      for (size_t k = 0; k < L.inflight.size();) {
        InFlight& f = L.inflight[k];
        const Slice& sl = st.slices[f.slice];
        if (!f.landed) {
          int done = 0, size = 0;
          const int rc = net.test(f.req, &done, &size);
          if (rc != 0) fatal(std::string("test failed: ") + resultName(rc) + " " + loader::NetPlugin::takeLastWarning());
          if (!done) {
            ++k;
            continue;
          }
          if (!st.send && static_cast<size_t>(size) != sl.len)
            fatal("a slice of " + std::to_string(sl.len) + " bytes arrived with " + std::to_string(size));
          f.landed = true;
        }
        // A reduction whose output another one writes first waits for it (in its slot).
        if (f.slot >= 0 && sl.depStream >= 0 && !live[static_cast<size_t>(sl.depStream)].done[static_cast<size_t>(sl.depSlice)]) {
          ++k;
          continue;
        }
        if (f.slot >= 0) {
          reduce(s.type, s.red, sl.out, sl.a, st.slots[static_cast<size_t>(f.slot)], sl.len / ts);
          L.freeSlots.push_back(f.slot);
        }
        L.done[f.slice] = 1;
        moved = true;
        ++L.completed;
        --remaining;
        f = L.inflight.back();
        L.inflight.pop_back();
      }
    }
    // More ranks than cores (8 ranks on a 2-core machine): a rank with nothing to do lets the
    // others run, or each ring step waits for the scheduler's time slice.
    if (!moved) sched_yield();
    if ((spins & 255) == 255) {
      if (!alive()) fatal("a rank left the job (its store connection closed)");
      if (std::chrono::steady_clock::now() > deadline) {
        std::string stuck;
        for (size_t i = 0; i < s.streams.size(); ++i)
          if (live[i].completed < s.streams[i].slices.size())
            stuck += " stream " + std::to_string(i) + (s.streams[i].send ? " (send)" : " (receive)") +
                     ": " + std::to_string(live[i].completed) + " done, " +
                     std::to_string(live[i].posted) + " posted of " +
                     std::to_string(s.streams[i].slices.size()) + ";";
        fatal("a collective did not finish within " + std::to_string(timeout_s) + " s (--timeout):" + stuck);
      }
    }
  }
}

}  // namespace pact::perf::coll
