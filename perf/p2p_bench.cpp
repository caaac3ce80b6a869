// Data path of `pact-perf p2p`; see p2p_bench.h.
#include "p2p_bench.h"

#include "peer.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

namespace pact::perf {
namespace {

constexpr int kTagRank0 = 0, kTagRank1 = 1;  // NCCL's tag: the sender's rank

Buffer allocBuffer(size_t bytes) {
  void* p = nullptr;
  if (posix_memalign(&p, 4096, std::max<size_t>(bytes, 4096)) != 0) {
    die("cannot allocate " + formatSize(bytes) + " of buffer");
  }
  std::memset(p, 0, bytes);  // fault the pages in before anything is timed
  return Buffer(static_cast<char*>(p));
}

// Payload pattern: a function of (message sequence number, size), checked word by word.
uint64_t patternWord(uint64_t seq, size_t size, size_t j) {
  return (seq * 0xD1B54A32D192ED03ull + size) ^ (j * 0x9E3779B97F4A7C15ull);
}

void fillPattern(char* p, size_t n, uint64_t seq) {
  size_t words = n / 8;
  for (size_t j = 0; j < words; ++j) {
    uint64_t w = patternWord(seq, n, j);
    std::memcpy(p + j * 8, &w, 8);
  }
  uint64_t tail = patternWord(seq, n, words);
  std::memcpy(p + words * 8, &tail, n % 8);
}

void checkPattern(const char* p, size_t n, uint64_t seq, const char* what) {
  size_t words = n / 8;
  for (size_t j = 0; j <= words; ++j) {
    uint64_t w = patternWord(seq, n, j);
    size_t len = j < words ? 8 : n % 8;
    if (len != 0 && std::memcmp(p + j * 8, &w, len) != 0) {
      die(std::string("verify: ") + what + " message " + std::to_string(seq) + " of " +
          formatSize(n) + " differs near byte " + std::to_string(j * 8));
    }
  }
}

}  // namespace

size_t slotCount(const P2pOptions& opt, size_t max_bw) {
  return streamSlots(static_cast<size_t>(opt.buffers > 0 ? opt.buffers : opt.window), max_bw);
}

void connectPair(Session& s) {
  watchdog(s.opt.timeout, "listen/connect/accept");
  char mine[loader::kHandleSize] = {};
  char peer[loader::kHandleSize] = {};
  void* listen_comm = nullptr;
  check(s.net->listen(s.opt.dev, mine, &listen_comm), "listen");
  if (listen_comm == nullptr) die("listen returned a NULL listenComm");
  ctlSend(mine, sizeof(mine));
  ctlRecv(peer, sizeof(peer));
  // Poll both halves from this one thread, as NCCL's proxy does: neither may block.
  while (s.send_comm == nullptr || s.recv_comm == nullptr) {
    if (s.send_comm == nullptr) check(s.net->connect(s.opt.dev, peer, &s.send_comm), "connect");
    if (s.recv_comm == nullptr) {
      check(s.net->accept(listen_comm, &s.recv_comm), "accept");
      if (s.recv_comm != nullptr) check(s.net->closeListen(listen_comm), "closeListen");
    }
  }
  barrier();
}

void registerBuffers(Session& s, size_t max_bw, size_t max_lat) {
  watchdog(s.opt.timeout, "regMr");
  if (max_bw > 0) {
    s.slot_bytes = max_bw;
    s.slots = slotCount(s.opt, max_bw);
    s.bw_buf = allocBuffer(s.slots * s.slot_bytes);
    void* comm = s.rank == 0 ? s.send_comm : s.recv_comm;
    check(s.net->regMr(comm, s.bw_buf.get(), s.slots * s.slot_bytes, loader::kPtrHost, &s.bw_mh),
          "regMr(bandwidth buffer)");
  }
  if (max_lat > 0) {
    s.lat_send = allocBuffer(max_lat);
    s.lat_recv = allocBuffer(max_lat);
    check(s.net->regMr(s.send_comm, s.lat_send.get(), max_lat, loader::kPtrHost, &s.lat_send_mh),
          "regMr(latency send buffer)");
    check(s.net->regMr(s.recv_comm, s.lat_recv.get(), max_lat, loader::kPtrHost, &s.lat_recv_mh),
          "regMr(latency recv buffer)");
  }
}

void teardown(Session& s) {
  watchdog(s.opt.timeout, "teardown");
  barrier();  // nothing is in flight on either side past this point
  if (s.bw_mh) check(s.net->deregMr(s.rank == 0 ? s.send_comm : s.recv_comm, s.bw_mh), "deregMr");
  if (s.lat_send_mh) check(s.net->deregMr(s.send_comm, s.lat_send_mh), "deregMr");
  if (s.lat_recv_mh) check(s.net->deregMr(s.recv_comm, s.lat_recv_mh), "deregMr");
  check(s.net->closeSend(s.send_comm), "closeSend");
  check(s.net->closeRecv(s.recv_comm), "closeRecv");
  barrier();
  check(s.net->finalize(), "finalize");
}

namespace {

void* postSend(Session& s, void* comm, char* buf, size_t size, int tag, void* mh) {
  void* req = nullptr;
  check(s.net->isend(comm, buf, size, tag, mh, &req), "isend");
  return req;
}

void* postRecv(Session& s, void* comm, char* buf, size_t size, int tag, void* mh) {
  void* data[1] = {buf};
  size_t sizes[1] = {size};
  int tags[1] = {tag};
  void* mhs[1] = {mh};
  void* req = nullptr;
  check(s.net->irecv(comm, 1, data, sizes, tags, mhs, &req), "irecv");
  return req;
}

// Tests req once; true when complete. For a receive (expect >= 0) dies if the completed message
// has another length; test() reports sizes as int, so only sizes below 2 GiB are checked.
bool poll(Session& s, void* req, long expect, const char* what) {
  int done = 0;
  int sizes[loader::kMaxRecvs] = {};
  check(s.net->test(req, &done, sizes), what);
  if (done && expect >= 0 && expect <= 0x7fffffffL && sizes[0] != expect) {
    die(std::string(what) + ": completed with " + std::to_string(sizes[0]) + " bytes, expected " +
        std::to_string(expect));
  }
  return done != 0;
}

// One stream of `count` messages on the rank-0 -> rank-1 comm. Up to `window` in flight, oldest
// tested first. On rank 1, intervals (if non-null) receives the gap between completions in us and
// *elapsed the time from the start barrier to the last completion.
void stream(Session& s, size_t size, long seq0, long count, std::vector<double>* intervals,
            double* elapsed) {
  const bool sender = s.rank == 0;
  std::vector<void*> ring(static_cast<size_t>(s.opt.window));
  long posted = 0, done = 0, filled = -1;
  auto postMore = [&] {
    while (posted < count && posted - done < s.opt.window) {
      long seq = seq0 + posted;
      void* req = nullptr;
      if (sender) {
        if (s.opt.verify && filled != seq)
          fillPattern(s.slot(seq), size, static_cast<uint64_t>(seq));
        filled = seq;
        req = postSend(s, s.send_comm, s.slot(seq), size, kTagRank0, s.bw_mh);
      } else {
        req = postRecv(s, s.recv_comm, s.slot(seq), size, kTagRank0, s.bw_mh);
      }
      if (req == nullptr) return;  // back-pressure: progress the oldest, then retry
      ring[static_cast<size_t>(posted % s.opt.window)] = req;
      ++posted;
    }
  };
  if (!sender) postMore();  // receives are pre-posted before the sender starts
  barrier();
  double t0 = now(), last = t0;
  while (done < count) {
    postMore();
    if (done == posted) continue;
    if (!poll(s, ring[static_cast<size_t>(done % s.opt.window)],
              sender ? -1 : static_cast<long>(size), sender ? "test(isend)" : "test(irecv)")) {
      continue;
    }
    if (!sender) {
      double t = now();
      if (intervals) intervals->push_back((t - last) * 1e6);
      last = t;
      if (s.opt.verify)
        checkPattern(s.slot(seq0 + done), size, static_cast<uint64_t>(seq0 + done), "bandwidth");
    }
    ++done;
  }
  if (elapsed) *elapsed = last - t0;
}

struct BwWire {  // rank 1 -> rank 0, one per size
  double gbps, p50, p95, p99;
  long iters;
};

long bwIters(const P2pOptions& o, size_t size, size_t budget) {
  return o.iters > 0 ? o.iters : streamIters(budget, size, o.max_iters);
}

long latIters(const P2pOptions& o, size_t size) {
  if (o.lat_iters > 0) return o.lat_iters;
  if (size <= (64u << 10)) return 1000;
  return std::max<long>(50, static_cast<long>(1000 * (64u << 10) / size));
}

}  // namespace

void runBandwidth(Session& s, size_t size, size_t budget, SizeRow* row) {
  watchdog(s.opt.timeout, "bandwidth");
  long iters = bwIters(s.opt, size, budget);
  long warm = streamWarmup(iters);
  stream(s, size, 0, warm, nullptr, nullptr);
  watchdog(s.opt.timeout, "bandwidth");
  std::vector<double> gaps;
  double elapsed = 0;
  stream(s, size, warm, iters, s.rank == 1 ? &gaps : nullptr, &elapsed);
  BwWire w{};
  if (s.rank == 1) {
    Percentiles p = percentiles(gaps);
    w = {static_cast<double>(size) * static_cast<double>(iters) / elapsed / 1e9, p.p50, p.p95,
         p.p99, iters};
    ctlSend(&w, sizeof(w));
  } else {
    ctlRecv(&w, sizeof(w));
    row->has_bw = true;
    row->bw_gbps = w.gbps;
    row->bw_us = {w.p50, w.p95, w.p99};
    row->bw_iters = w.iters;
  }
}

namespace {

void wait(Session& s, void* req, long expect, const char* what) {
  while (!poll(s, req, expect, what)) {
  }
}

}  // namespace

void runLatency(Session& s, size_t size, SizeRow* row) {
  watchdog(s.opt.timeout, "latency");
  long iters = latIters(s.opt, size);
  long warm = std::max<long>(5, iters / 10);
  std::vector<double> samples;
  samples.reserve(static_cast<size_t>(iters));
  char* sbuf = s.lat_send.get();
  char* rbuf = s.lat_recv.get();
  const long len = static_cast<long>(size);
  const int my_tag = s.rank == 0 ? kTagRank0 : kTagRank1;
  const int peer_tag = s.rank == 0 ? kTagRank1 : kTagRank0;
  auto postR = [&] {
    void* r = nullptr;
    while (!(r = postRecv(s, s.recv_comm, rbuf, size, peer_tag, s.lat_recv_mh))) {
    }
    return r;
  };
  auto postS = [&] {
    void* r = nullptr;
    while (!(r = postSend(s, s.send_comm, sbuf, size, my_tag, s.lat_send_mh))) {
    }
    return r;
  };
  // The echo side always has a receive posted before the next message can arrive.
  void* rreq = s.rank == 1 ? postR() : nullptr;
  barrier();
  for (long i = 0; i < warm + iters; ++i) {
    uint64_t seq = static_cast<uint64_t>(i);
    if (s.opt.verify) fillPattern(sbuf, size, seq + static_cast<uint64_t>(s.rank) * (1ull << 40));
    if (s.rank == 0) {
      rreq = postR();
      double t0 = now();
      void* sreq = postS();
      bool sdone = false, rdone = false;
      while (!sdone || !rdone) {
        if (!sdone) sdone = poll(s, sreq, -1, "test(isend)");
        if (!rdone) rdone = poll(s, rreq, len, "test(irecv)");
      }
      if (i >= warm) samples.push_back((now() - t0) * 1e6 / 2);
      if (s.opt.verify) checkPattern(rbuf, size, seq + (1ull << 40), "latency");
    } else {
      wait(s, rreq, len, "test(irecv)");
      if (s.opt.verify) checkPattern(rbuf, size, seq, "latency");
      // Reply first, then post the next receive: the next message cannot leave rank 0 before
      // this reply arrives there, and ucx_perftest's tag_lat likewise posts its receive after
      // its send, so neither tool counts a receive post between a message and its reply.
      void* sreq = postS();
      if (i + 1 < warm + iters) rreq = postR();
      wait(s, sreq, -1, "test(isend)");
    }
  }
  barrier();
  if (s.rank == 0) {
    row->has_lat = true;
    row->lat_us = percentiles(samples);
    row->lat_iters = iters;
  }
}

}  // namespace pact::perf
