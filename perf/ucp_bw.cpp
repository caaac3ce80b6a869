// pact-ucp-bw: raw UCP tag bandwidth in NCCL's slot pattern, the baseline pact-perf p2p is held
// to. ucx_perftest's tag_bw sends every message from one buffer into one buffer; NCCL's proxy
// keeps up to 8 steps of a channel in flight, each in its own slot. This program does what
// pact-perf p2p does, with nothing between it and UCP: two processes (fork), one UCP context and
// worker each, a window of tagged sends into distinct slot buffers (--buffers 0) or one buffer
// (--buffers 1), receives pre-posted, completions tested oldest first, bandwidth counted at the
// receiver from the start barrier to the last completion. The output table is pact-perf's.
//
// usage: pact-ucp-bw [-b 64K] [-e 64M] [--window 8] [--buffers 0] [--json F]
// UCX reads its own UCX_* variables (UCX_TLS, UCX_NET_DEVICES) as in any UCP program.
#include "peer.h"
#include "report.h"

#include <CLI/CLI.hpp>
#include <sched.h>
#include <ucp/api/ucp.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

namespace pact::perf {
namespace {

constexpr ucp_tag_t kTag = 0x5eed;

struct Options {
  std::string min_size = "64K", max_size = "64M", budget = "256M";
  size_t factor = 2;
  int window = 8, buffers = 0;
  long max_iters = 20000;
  unsigned timeout = 120;
  std::string json;
  bool peer_errors = false;  // UCP_ERR_HANDLING_MODE_PEER on the endpoint, as pact's endpoints
  bool yield = false;        // sched_yield when a progress call found nothing (more processes than cores)
};

void ucsCheck(ucs_status_t st, const char* what) {
  if (st != UCS_OK) die(std::string(what) + " failed: " + ucs_status_string(st));
}

struct Ucp {
  ucp_context_h ctx = nullptr;
  ucp_worker_h worker = nullptr;
  ucp_ep_h ep = nullptr;
  ucp_mem_h memh = nullptr;
  ~Ucp() {
    if (ep) {
      ucp_request_param_t p{};
      p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      p.flags = UCP_EP_CLOSE_FLAG_FORCE;
      void* r = ucp_ep_close_nbx(ep, &p);
      if (UCS_PTR_IS_PTR(r)) {
        while (ucp_request_check_status(r) == UCS_INPROGRESS) ucp_worker_progress(worker);
        ucp_request_free(r);
      }
    }
    if (memh) ucp_mem_unmap(ctx, memh);
    if (worker) ucp_worker_destroy(worker);
    if (ctx) ucp_cleanup(ctx);
  }
};

void setup(Ucp& u, const Options& o) {
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_TAG;
  ucsCheck(ucp_init(&params, nullptr, &u.ctx), "ucp_init");
  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SINGLE;
  ucsCheck(ucp_worker_create(u.ctx, &wp, &u.worker), "ucp_worker_create");
  ucp_address_t* addr = nullptr;
  size_t len = 0;
  ucsCheck(ucp_worker_get_address(u.worker, &addr, &len), "ucp_worker_get_address");
  std::vector<char> peer;
  ctlSend(&len, sizeof(len));
  ctlSend(addr, len);
  size_t plen = 0;
  ctlRecv(&plen, sizeof(plen));
  peer.resize(plen);
  ctlRecv(peer.data(), plen);
  ucp_worker_release_address(u.worker, addr);
  ucp_ep_params_t ep{};
  ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
  ep.address = reinterpret_cast<const ucp_address_t*>(peer.data());
  ep.err_mode = o.peer_errors ? UCP_ERR_HANDLING_MODE_PEER : UCP_ERR_HANDLING_MODE_NONE;
  ucsCheck(ucp_ep_create(u.worker, &ep, &u.ep), "ucp_ep_create");
}

void onDone(void*, ucs_status_t st, void* user) {
  if (st != UCS_OK) die(std::string("send failed: ") + ucs_status_string(st));
  *static_cast<bool*>(user) = true;
}

void onRecv(void*, ucs_status_t st, const ucp_tag_recv_info_t*, void* user) {
  if (st != UCS_OK) die(std::string("receive failed: ") + ucs_status_string(st));
  *static_cast<bool*>(user) = true;
}

struct Slot {
  void* req = nullptr;
  bool done = false;
};

// count messages of size bytes, up to window in flight, rank 0 -> rank 1. Returns the receiver's
// elapsed seconds (0 on the sender); gaps gets the receiver's completion intervals in us.
double stream(Ucp& u, int rank, const Options& o, char* base, size_t slots, size_t size,
              long count, std::vector<double>* gaps) {
  std::vector<Slot> ring(static_cast<size_t>(o.window));
  long posted = 0, done = 0;
  auto post = [&](long seq) {
    Slot& s = ring[static_cast<size_t>(seq % o.window)];
    s.done = false;
    char* buf = base + static_cast<size_t>(seq) % slots * size;
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                     UCP_OP_ATTR_FIELD_MEMH | UCP_OP_ATTR_FIELD_MEMORY_TYPE;
    p.user_data = &s.done;
    p.memh = u.memh;  // registered, host memory: what pact passes for an NCCL buffer
    p.memory_type = UCS_MEMORY_TYPE_HOST;
    void* r;
    if (rank == 0) {
      p.cb.send = onDone;
      r = ucp_tag_send_nbx(u.ep, buf, size, kTag, &p);
    } else {
      p.cb.recv = onRecv;
      r = ucp_tag_recv_nbx(u.worker, buf, size, kTag, ~ucp_tag_t{0}, &p);
    }
    if (UCS_PTR_IS_ERR(r)) die(std::string("post failed: ") + ucs_status_string(UCS_PTR_STATUS(r)));
    s.req = r;
    if (r == nullptr) s.done = true;
  };
  auto fill = [&] {
    while (posted < count && posted - done < o.window) post(posted++);
  };
  if (rank == 1) fill();  // receives pre-posted before the sender starts
  barrier();
  const double t0 = now();
  double last = t0;
  while (done < count) {
    fill();
    Slot& s = ring[static_cast<size_t>(done % o.window)];
    if (!s.done) {
      if (ucp_worker_progress(u.worker) == 0 && o.yield) sched_yield();
      continue;
    }
    if (s.req) ucp_request_free(s.req);
    s.req = nullptr;
    if (rank == 1) {
      const double t = now();
      if (gaps) gaps->push_back((t - last) * 1e6);
      last = t;
    }
    ++done;
  }
  return rank == 1 ? last - t0 : 0;
}

int run(const Options& o) {
  size_t lo = 0, hi = 0, budget = 0;
  if (!parseSize(o.min_size, &lo) || !parseSize(o.max_size, &hi)) die("bad size");
  if (!parseSize(o.budget, &budget) || budget == 0) die("bad --budget");
  const std::vector<size_t> sizes = sweep(lo, hi, o.factor);
  if (sizes.empty()) die("empty sweep (need 0 < min <= max, factor >= 2)");
  if (o.window < 1 || o.buffers < 0) die("--window must be >= 1, --buffers >= 0");
  const int rank = forkPeer();
  watchdog(o.timeout, "ucp setup");
  Ucp u;
  setup(u, o);
  const size_t slots = streamSlots(static_cast<size_t>(o.buffers > 0 ? o.buffers : o.window), hi);
  void* mem = nullptr;
  if (posix_memalign(&mem, 4096, slots * hi) != 0) die("cannot allocate the slots");
  std::unique_ptr<char, decltype(&std::free)> base(static_cast<char*>(mem), &std::free);
  std::memset(base.get(), 0, slots * hi);  // pages faulted in before anything is timed
  ucp_mem_map_params_t mp{};
  mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
  mp.address = base.get();
  mp.length = slots * hi;
  ucsCheck(ucp_mem_map(u.ctx, &mp, &u.memh), "ucp_mem_map");
  if (rank == 0) {
    std::printf("# raw UCP tag (UCX %s), window %d, %zu slot buffer(s) per side, UCX_TLS=%s\n",
                ucp_get_version_string(), o.window, slots,
                std::getenv("UCX_TLS") ? std::getenv("UCX_TLS") : "(unset)");
    std::fflush(stdout);
  }
  std::vector<SizeRow> rows;
  for (size_t z : sizes) {
    watchdog(o.timeout, "bandwidth");
    const long iters = streamIters(budget, z, o.max_iters);
    stream(u, rank, o, base.get(), slots, z, streamWarmup(iters), nullptr);
    std::vector<double> gaps;
    const double elapsed = stream(u, rank, o, base.get(), slots, z, iters, &gaps);
    double wire[4] = {};
    if (rank == 1) {
      Percentiles p = percentiles(gaps);
      wire[0] = static_cast<double>(z) * static_cast<double>(iters) / elapsed / 1e9;
      wire[1] = p.p50, wire[2] = p.p95, wire[3] = p.p99;
      ctlSend(wire, sizeof(wire));
    } else {
      ctlRecv(wire, sizeof(wire));
      SizeRow r;
      r.size = z;
      r.has_bw = true;
      r.bw_gbps = wire[0];
      r.bw_us = {wire[1], wire[2], wire[3]};
      r.bw_iters = iters;
      rows.push_back(r);
    }
  }
  watchdog(o.timeout, "teardown");
  barrier();
  if (rank == 1) _exit(0);
  printTable(stdout, rows);
  std::fflush(stdout);
  int rc = 0;
  std::string err;
  nlohmann::json meta = {{"tool", "pact-ucp-bw"}, {"ucx", ucp_get_version_string()},
                         {"window", o.window}, {"slots", slots}};
  if (!o.json.empty() && !writeJson(o.json, toJson(meta, rows), &err)) {
    std::fprintf(stderr, "pact-ucp-bw: %s\n", err.c_str());
    rc = 1;
  }
  if (!reapPeer()) rc = 1;
  return rc;
}

}  // namespace
}  // namespace pact::perf

int main(int argc, char** argv) {
  pact::perf::Options o;
  CLI::App app{"pact-ucp-bw: raw UCP tag bandwidth in NCCL's slot pattern (pact-perf p2p's baseline)"};
  app.add_option("-b,--minbytes,--min-size", o.min_size, "smallest message")->capture_default_str();
  app.add_option("-e,--maxbytes,--max-size", o.max_size, "largest message")->capture_default_str();
  app.add_option("-f,--stepfactor,--factor", o.factor, "size multiplier")->capture_default_str();
  app.add_option("--window", o.window, "messages in flight")->capture_default_str();
  app.add_option("--buffers", o.buffers,
                 "slot buffers per side, reused in turn (0 = one per message in flight, NCCL's "
                 "pattern; 1 = one buffer, ucx_perftest's)")->capture_default_str();
  app.add_option("--budget", o.budget, "bytes per size")->capture_default_str();
  app.add_option("--max-iters", o.max_iters, "cap on messages per size")->capture_default_str();
  app.add_option("--timeout", o.timeout, "watchdog seconds per step")->capture_default_str();
  app.add_option("--json", o.json, "also write the results to this JSON file");
  app.add_flag("--yield", o.yield,
               "sched_yield when progress found nothing, as pact-perf coll's ranks do (several pairs at once on "
               "fewer cores: perf/coll-baseline.sh)");
  app.add_flag("--peer-errors", o.peer_errors,
               "endpoints in UCP_ERR_HANDLING_MODE_PEER (pact's mode: it detects dead peers)");
  CLI11_PARSE(app, argc, argv);
  return pact::perf::run(o);
}
