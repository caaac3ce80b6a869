#include "coll.h"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>

#include "coll_boot.h"
#include "coll_sched.h"
#include "net_plugin.h"
#include "peer.h"  // resultName, now
#include "report.h"

namespace pact::perf {
namespace {

using loader::NetPlugin;
using namespace coll;

struct CollOptions {
  std::string op = "allreduce";
  int np = 0;
  std::string minBytes = "8", maxBytes = "32M";
  size_t minB = 0, maxB = 0;
  int factor = 2;
  int iters = 20, warmup = 5, check = 1;
  std::string dtype = "float", redop = "sum";
  int root = 0;
  int channels = 1;
  std::string algo = "ring";
  std::string chunk = "512K";
  size_t chunkB = 0;
  int window = 8;
  std::string plugin;
  int version = 0;
  int dev = 0;
  double timeout_s = 120;
  std::string json;
  std::string plot;  // --plot: an SVG of the run (pact-plot)
  bool verbose = false;
};

struct Mem {
  struct Free {
    void operator()(char* p) const { std::free(p); }
  };
  std::unique_ptr<char, Free> p;
  size_t size = 0;
};

Mem alloc(size_t size) {
  Mem m;
  m.size = std::max<size_t>(size, 64);
  m.p.reset(static_cast<char*>(std::aligned_alloc(4096, (m.size + 4095) / 4096 * 4096)));
  if (!m.p) fatal("cannot allocate " + std::to_string(m.size) + " bytes");
  std::memset(m.p.get(), 0, m.size);
  return m;
}

void ok(int rc, const std::string& what) {
  if (rc != 0) fatal(what + " failed: " + resultName(rc) + " " + NetPlugin::takeLastWarning());
}

// The rank's comms: listens for every comm that comes in, the handles swapped through the store,
// then connect and accept polled until every one exists (NCCL's non-blocking setup).
class Wiring {
 public:
  Wiring(NetPlugin& net, Job& job, int dev) : net_(net), job_(job), dev_(dev) {}

  // incoming[i]: listens to create; outgoing: (rank, index into that rank's incoming list).
  void wire(int incoming, const std::vector<std::pair<int, int>>& outgoing, std::vector<void*>* recvs,
            std::vector<void*>* sends, double timeout_s) {
    std::vector<void*> listens(static_cast<size_t>(incoming));
    std::string mine(static_cast<size_t>(incoming) * loader::kHandleSize, '\0');
    for (int i = 0; i < incoming; ++i)
      ok(net_.listen(dev_, mine.data() + i * loader::kHandleSize, &listens[static_cast<size_t>(i)]), "listen");
    const auto all = job_.allgather(mine);
    recvs->assign(static_cast<size_t>(incoming), nullptr);
    sends->assign(outgoing.size(), nullptr);
    // A plugin may keep its connect state in the handle between calls (NCCL passes the same one).
    std::vector<std::string> handles;
    for (auto [q, k] : outgoing)
      handles.push_back(all[static_cast<size_t>(q)].substr(static_cast<size_t>(k) * loader::kHandleSize, loader::kHandleSize));
    const double until = now() + timeout_s;
    for (size_t left = incoming + outgoing.size(); left > 0;) {
      left = 0;
      for (size_t i = 0; i < outgoing.size(); ++i) {
        if ((*sends)[i] != nullptr) continue;
        ok(net_.connect(dev_, handles[i].data(), &(*sends)[i]), "connect to rank " + std::to_string(outgoing[i].first));
        left += (*sends)[i] == nullptr;
      }
      for (int i = 0; i < incoming; ++i) {
        if ((*recvs)[static_cast<size_t>(i)] != nullptr) continue;
        ok(net_.accept(listens[static_cast<size_t>(i)], &(*recvs)[static_cast<size_t>(i)]), "accept");
        left += (*recvs)[static_cast<size_t>(i)] == nullptr;
      }
      if (left > 0 && now() > until) fatal("comms not connected within " + std::to_string(timeout_s) + " s");
      if (left > 0 && !job_.alive()) fatal("a rank left the job while the comms were being set up");
    }
    for (void* l : listens) ok(net_.closeListen(l), "closeListen");
  }

 private:
  NetPlugin& net_;
  Job& job_;
  int dev_;
};

std::string fmtRow(size_t size, size_t count, const CollOptions& o, Op op, const double t[2],
                   const double algbw[2], const double busbw[2], const long wrong[2]) {
  char buf[256];
  int n = std::snprintf(buf, sizeof buf, "%12zu  %12zu  %8s  %6s  %6d", size, count, o.dtype.c_str(),
                        isReduction(op) ? o.redop.c_str() : "none", op == Op::kBroadcast ? o.root : -1);
  for (int i = 0; i < 2; ++i) {
    char w[24];
    if (wrong[i] < 0) std::snprintf(w, sizeof w, "N/A");
    else std::snprintf(w, sizeof w, "%ld", wrong[i]);
    n += std::snprintf(buf + n, sizeof buf - static_cast<size_t>(n), "  %7.2f  %6.2f  %6.2f  %5s", t[i],
                       algbw[i], busbw[i], w);
  }
  return buf;
}

int runColl(CollOptions& o) {
  std::vector<Op> ops;
  if (o.op == "all") {
    ops = allOps();
  } else {
    Op op;
    if (!parseOp(o.op, &op)) fatal("--op " + o.op + ": not allreduce|allgather|reducescatter|alltoall|broadcast|sendrecv|all");
    ops.push_back(op);
  }
  DType dt;
  RedOp red;
  if (!parseDType(o.dtype, &dt)) fatal("-d " + o.dtype + ": not int8|uint8|int32|uint32|int64|uint64|float|double");
  if (!parseRedOp(o.redop, &red)) fatal("-o " + o.redop + ": not sum|prod|max|min");
  if (!parseSize(o.minBytes, &o.minB) || !parseSize(o.maxBytes, &o.maxB) || o.maxB < o.minB)
    fatal("-b/-e: sizes with -b <= -e (e.g. -b 8 -e 128M)");
  if (!parseSize(o.chunk, &o.chunkB) || o.chunkB == 0) fatal("--chunk " + o.chunk + ": not a size");
  if (o.plugin.empty()) o.plugin = defaultPluginPath();
  if (o.plugin.find('/') != std::string::npos && access(o.plugin.c_str(), R_OK) != 0)
    fatal("cannot read plugin " + o.plugin + " (build it, or pass --plugin)");

  Job job = Job::start(detectLaunch(o.np), o.timeout_s);
  const int n = job.size(), r = job.rank();
  if (o.root < 0 || o.root >= n) fatal("-r " + std::to_string(o.root) + ": not a rank of " + std::to_string(n));
  std::string err;
  auto net = NetPlugin::open(o.plugin, o.version, &err);
  if (!net) fatal(err);
  ok(net->init(-1, !o.verbose), "init");
  int ndev = 0;
  ok(net->devices(&ndev), "devices");
  if (o.dev < 0 || o.dev >= ndev) fatal("--dev " + std::to_string(o.dev) + " out of range (" + std::to_string(ndev) + " devices)");
  loader::Properties props;
  ok(net->getProperties(o.dev, &props), "getProperties");

  // Comms: the ring (a send comm to rank + 1 and a receive comm from rank - 1 per channel) and,
  // for alltoall, one each way per peer and channel.
  Comms c;
  const auto needs = [&](Op x) { return std::find(ops.begin(), ops.end(), x) != ops.end(); };
  const bool tree = o.algo == "tree";
  const bool ring = n > 1 && std::any_of(ops.begin(), ops.end(), [&](Op x) {
                      return x != Op::kAllToAll && !(x == Op::kAllReduce && tree);
                    });
  const bool a2a = n > 1 && needs(Op::kAllToAll);
  const bool treeComms = n > 1 && tree && needs(Op::kAllReduce) && !a2a;  // a2a's comms cover the tree
  Wiring w(*net, job, o.dev);
  std::vector<void*> allSends, allRecvs;
  if (ring) {
    std::vector<std::pair<int, int>> out;
    for (int ch = 0; ch < o.channels; ++ch) out.emplace_back((r + 1) % n, ch);
    w.wire(o.channels, out, &c.prev, &c.next, o.timeout_s);
  }
  if (a2a || treeComms) {
    // A comm each way per peer and channel: every peer (alltoall), or the tree neighbours. Rank
    // q listens C times for each of its peers, in ascending order; p connects to its own.
    auto peersOf = [&](int q) {
      if (treeComms) return treeNeighbours(q, n);
      std::vector<int> v;
      for (int x = 0; x < n; ++x)
        if (x != q) v.push_back(x);
      return v;
    };
    // The double binary tree uses a set of comms per tree (coll_sched.h).
    const int perPeer = tree && needs(Op::kAllReduce) ? 2 * o.channels : o.channels;
    auto slot = [&](int q, int p, int ch) {
      const auto v = peersOf(q);
      return static_cast<int>(std::find(v.begin(), v.end(), p) - v.begin()) * perPeer + ch;
    };
    const auto mine = peersOf(r);
    std::vector<std::pair<int, int>> out;
    for (int q : mine)
      for (int ch = 0; ch < perPeer; ++ch) out.emplace_back(q, slot(q, r, ch));
    std::vector<void*> recvs, sends;
    w.wire(static_cast<int>(mine.size()) * perPeer, out, &recvs, &sends, o.timeout_s);
    c.to.assign(static_cast<size_t>(n), {});
    c.from.assign(static_cast<size_t>(n), {});
    size_t k = 0;
    for (int q : mine)
      for (int ch = 0; ch < perPeer; ++ch) {
        c.to[static_cast<size_t>(q)].push_back(sends[k++]);
        c.from[static_cast<size_t>(q)].push_back(recvs[static_cast<size_t>(slot(r, q, ch))]);
      }
    allSends = sends;
    allRecvs = recvs;
  }
  for (void* x : c.next) allSends.push_back(x);
  for (void* x : c.prev) allRecvs.push_back(x);

  // Buffers, registered on every comm once (NCCL registers its buffers at setup, too).
  // bufs[3]: the settle step's two bytes.
  Mem bufs[4] = {alloc(o.maxB), alloc(o.maxB), alloc(o.maxB), alloc(2)};
  std::map<std::pair<void*, int>, void*> mhs;
  std::map<void*, std::pair<std::vector<Mem>, std::vector<void*>>> slots;
  for (const auto* list : {&allSends, &allRecvs})
    for (void* comm : *list)
      for (int i = 0; i < 4; ++i)
        ok(net->regMr(comm, bufs[i].p.get(), bufs[i].size, loader::kPtrHost, &mhs[{comm, i}]), "regMr");
  c.mh = [&](void* comm, int which) { return mhs.at({comm, which}); };
  c.slots = [&](void* comm, std::vector<char*>* out, std::vector<void*>* outMh) {
    auto& [mem, mh] = slots[comm];
    if (mem.empty())
      for (int i = 0; i < o.window; ++i) {
        mem.push_back(alloc(o.chunkB));
        mh.push_back(nullptr);
        ok(net->regMr(comm, mem.back().p.get(), mem.back().size, loader::kPtrHost, &mh.back()), "regMr (slot)");
      }
    out->clear();
    for (auto& m : mem) out->push_back(m.p.get());
    *outMh = mh;
  };
  Buffers b{bufs[0].p.get(), bufs[1].p.get(), bufs[2].p.get()};
  auto alive = [&] { return job.alive(); };
  // Before every wait in the store: a byte over every comm, so no rank leaves its peers' sends
  // unacknowledged while it waits (coll_sched.h).
  Schedule quiet = settle(allSends, allRecvs, bufs[3].p.get(), [&](void* comm) { return mhs.at({comm, 3}); });
  auto settled = [&] { run(*net, quiet, 1, o.timeout_s, alive); };

  const size_t commsHere = allSends.size() + allRecvs.size();
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  const auto who = job.allgather(std::to_string(getpid()) + " " + host);
  nlohmann::json results = nlohmann::json::array();
  if (r == 0) {
    std::printf("# nThread 1 nGpus 1 minBytes %zu maxBytes %zu step: %d(factor) warmup iters: %d iters: %d agg iters: 1 validation: %d graph: 0\n",
                o.minB, o.maxB, o.factor, o.warmup, o.iters, o.check);
    std::printf("#\n# pact-perf coll: %d ranks (%s), plugin %s (%s, v%d) dev %d %s, %d channel(s), chunk %zu, window %d, allreduce %s, UCX_TLS=%s\n",
                n, job.launch().how.c_str(), net->name() ? net->name() : "?", o.plugin.c_str(),
                net->version(), o.dev, props.name.c_str(), o.channels, o.chunkB, o.window, o.algo.c_str(),
                std::getenv("UCX_TLS") ? std::getenv("UCX_TLS") : "(unset)");
    std::printf("# comms per rank: %zu (%zu send, %zu receive)\n", commsHere, allSends.size(), allRecvs.size());
    std::printf("#\n# Using devices\n");
    for (int q = 0; q < n; ++q) {
      const auto& s = who[static_cast<size_t>(q)];
      const auto sp = s.find(' ');
      std::printf("#  Rank %2d Group  0 Pid %6s on %10s device %2d [%s] %s (host memory)\n", q,
                  s.substr(0, sp).c_str(), s.substr(sp + 1).c_str(), o.dev, props.name.c_str(),
                  net->name() ? net->name() : "?");
    }
  }
  double busSum = 0;
  long busRows = 0, wrongTotal = 0;
  const size_t ts = sizeOf(dt);
  for (Op op : ops) {
    if (r == 0) {
      std::printf("#\n# %s\n#%61s%35s\n", name(op), "out-of-place", "in-place");
      std::printf("#%11s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s\n", "size", "count",
                  "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong");
      std::printf("#%11s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s\n", "(B)", "(elements)",
                  "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
      std::fflush(stdout);
    }
    const bool blocks = op == Op::kAllGather || op == Op::kReduceScatter || op == Op::kAllToAll;
    for (size_t size = o.minB; size <= o.maxB;) {
      size_t count = size / ts;
      if (blocks) count -= count % static_cast<size_t>(n);
      const size_t bytes = count * ts;
      double t[2], algbw[2], busbw[2];
      long wrong[2];
      for (int ip = 0; ip < 2; ++ip) {
        Plan p{op, dt, red, o.root, count, ip == 1, r, n, o.channels, o.chunkB, tree};
        Schedule s = build(p, b, c);
        for (int i = 0; i < o.warmup; ++i) run(*net, s, o.window, o.timeout_s, alive);
        settled();
        job.barrier();
        const double t0 = now();
        for (int i = 0; i < o.iters; ++i) run(*net, s, o.window, o.timeout_s, alive);
        const double mine = (now() - t0) / std::max(1, o.iters) * 1e6;
        settled();
        double sum = 0;
        for (const auto& x : job.allgather(std::to_string(mine))) sum += std::strtod(x.c_str(), nullptr);
        t[ip] = sum / n;  // the ranks' average, as nccl-tests reports it
        algbw[ip] = t[ip] > 0 ? static_cast<double>(bytes) / t[ip] / 1e3 : 0;
        busbw[ip] = algbw[ip] * busFactor(op, n);
        wrong[ip] = -1;
        if (o.check) {
          fillInput(p, b);
          job.barrier();
          run(*net, s, o.window, o.timeout_s, alive);
          settled();
          long total = 0;
          for (const auto& x : job.allgather(std::to_string(countWrong(p, b)))) total += std::strtol(x.c_str(), nullptr, 10);
          wrong[ip] = total;
          wrongTotal += total;
        }
        busSum += busbw[ip];
        ++busRows;
      }
      if (r == 0) {
        std::printf("%s\n", fmtRow(bytes, count, o, op, t, algbw, busbw, wrong).c_str());
        std::fflush(stdout);
        nlohmann::json row = {{"op", name(op)}, {"size", bytes}, {"count", count}, {"type", o.dtype},
                              {"redop", isReduction(op) ? o.redop : "none"}, {"root", op == Op::kBroadcast ? o.root : -1}};
        for (int ip = 0; ip < 2; ++ip)
          row[ip ? "in_place" : "out_of_place"] = {{"time_us", t[ip]}, {"algbw_gbps", algbw[ip]}, {"busbw_gbps", busbw[ip]},
                                                    {"wrong", wrong[ip] < 0 ? nlohmann::json() : nlohmann::json(wrong[ip])}};
        results.push_back(row);
      }
      if (size == o.maxB || o.factor <= 1) break;
      size = size == 0 ? std::min(o.maxB, ts) : std::min(o.maxB, size * static_cast<size_t>(o.factor));
    }
  }
  if (r == 0) {
    std::printf("# Out of bounds values : %ld %s\n", wrongTotal, wrongTotal == 0 ? "OK" : "FAILED");
    std::printf("# Avg bus bandwidth    : %g \n#\n", busRows > 0 ? busSum / busRows : 0.0);
    std::fflush(stdout);
  }
  for (auto& [key, mh] : mhs) ok(net->deregMr(key.first, mh), "deregMr");
  for (auto& [comm, s] : slots)
    for (void* mh : s.second) ok(net->deregMr(comm, mh), "deregMr (slot)");
  for (void* x : allSends) ok(net->closeSend(x), "closeSend");
  for (void* x : allRecvs) ok(net->closeRecv(x), "closeRecv");
  job.barrier();
  (void)net->finalize();
  int rc = wrongTotal == 0 ? 0 : 1;
  if (r == 0) {
    if (!o.json.empty() || !o.plot.empty()) {
      nlohmann::json doc = {{"meta", {{"tool", "pact-perf coll"}, {"ranks", n}, {"launch", job.launch().how},
                                      {"plugin_path", o.plugin}, {"plugin_name", net->name() ? net->name() : ""},
                                      {"dev_name", props.name}, {"channels", o.channels}, {"chunk", o.chunkB},
                                      {"window", o.window}, {"algo", o.algo}, {"iters", o.iters}, {"warmup", o.warmup},
                                      {"UCX_TLS", std::getenv("UCX_TLS") ? std::getenv("UCX_TLS") : ""},
                                      {"avg_busbw_gbps", busRows > 0 ? busSum / busRows : 0.0}, {"wrong", wrongTotal}}},
                            {"results", results}};
      std::string e;
      if (!writeOutputs(doc, o.json, o.plot, &e)) fatal(e);
    }
    if (!job.reap()) rc = 1;
  }
  return rc;
}

}  // namespace

void addCollCommand(CLI::App& app, int* exit_code) {
  auto o = std::make_shared<CollOptions>();
  CLI::App* c = app.add_subcommand("coll", "NCCL collectives on N ranks through a net plugin, nccl-tests output");
  c->add_option("--op", o->op, "allreduce|allgather|reducescatter|alltoall|broadcast|sendrecv|all")->capture_default_str();
  c->add_option("--np", o->np, "fork this many ranks here (-np works too); 0 = from the launcher (mpirun, Slurm, torchrun) or 1");
  c->add_option("-b,--minbytes", o->minBytes, "smallest size")->capture_default_str();
  c->add_option("-e,--maxbytes", o->maxBytes, "largest size")->capture_default_str();
  c->add_option("-f,--stepfactor", o->factor, "size multiplier")->capture_default_str();
  c->add_option("-n,--iters", o->iters, "timed iterations per size")->capture_default_str();
  c->add_option("-w,--warmup_iters", o->warmup, "warm-up iterations per size")->capture_default_str();
  c->add_option("-c,--check", o->check, "check every element of the result (0/1)")->capture_default_str();
  c->add_option("-d,--datatype", o->dtype, "int8|uint8|int32|uint32|int64|uint64|float|double")->capture_default_str();
  c->add_option("-o,--redop", o->redop, "sum|prod|max|min")->capture_default_str();
  c->add_option("-r,--root", o->root, "broadcast root")->capture_default_str();
  c->add_option("--channels", o->channels, "comms per neighbour and direction (NCCL's channels)")->check(CLI::Range(1, 32))->capture_default_str();
  c->add_option("--algo", o->algo, "allreduce's algorithm: ring, or tree (NCCL's double binary tree: two trees, each half the data)")
      ->check(CLI::IsMember({"ring", "tree"}))->capture_default_str();
  c->add_option("--chunk", o->chunk, "slice size (NCCL: buffer / steps)")->capture_default_str();
  c->add_option("--window", o->window, "slices in flight per comm (NCCL's steps)")->check(CLI::Range(1, 8))->capture_default_str();
  c->add_option("--plugin", o->plugin, "NCCL net plugin .so (default: <exe dir>/../plugin/libnccl-net-pact.so)");
  c->add_option("--abi", o->version, "ncclNetPlugin_vN to use; 0 = newest exported")->check(CLI::Range(0, 12));
  c->add_option("--dev", o->dev, "plugin device index")->capture_default_str();
  c->add_option("--timeout", o->timeout_s, "seconds any one step may take (setup, a collective)")->capture_default_str();
  c->add_option("--json", o->json, "also write the results to this JSON file");
  c->add_option("--plot", o->plot, "also draw the out-of-place busbw against the size into this SVG file (pact-plot)");
  c->add_flag("-v,--verbose", o->verbose, "print the plugin's INFO/TRACE log lines");
  c->callback([o, exit_code] { *exit_code = runColl(*o); });
}

}  // namespace pact::perf
