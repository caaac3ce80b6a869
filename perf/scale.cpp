// `pact-perf scale`: see scale.h. Both processes run the same rounds (one per N and close order)
// in the same order, computed from the options before the fork; the control channel (peer.h)
// carries the handles, one status per phase from each side, and B's results.
//
// A round that fails (a plugin call's error, or a deadline) is reported with its step, comm and
// the plugin's last WARN line; both sides then close what they have and go on with the next round.
// Every wait has a deadline (--timeout-s); the watchdog (peer.h) ends the run only if a single
// plugin call blocks past twice that.
#include "scale.h"

#include "net_plugin.h"
#include "peer.h"
#include "report.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "pact/nccl_ext.h"

#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

namespace pact::perf {
namespace {

using loader::NetPlugin;
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

const char* orderName(Order o) {
  switch (o) {
    case Order::kBoth:
      return "both";
    case Order::kRecvFirst:
      return "recv-first";
    case Order::kSendFirst:
      return "send-first";
  }
  return "?";
}

std::string defaultPluginPath() {
  std::error_code ec;
  auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return "libnccl-net-pact.so";
  return (exe.parent_path() / ".." / "plugin" / "libnccl-net-pact.so").lexically_normal().string();
}

// ---- what the process holds ---------------------------------------------------------------------

struct Snapshot {
  long fds = 0, threads = 0, maps = 0;
  uint64_t rss = 0;
};

long countEntries(const char* dir) {
  DIR* d = opendir(dir);
  if (d == nullptr) return -1;
  long n = 0;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] != '.') ++n;
  }
  closedir(d);
  return n;
}

Snapshot snapshot() {
  Snapshot s;
  s.fds = countEntries("/proc/self/fd");
  if (s.fds > 0) --s.fds;  // opendir's own descriptor
  s.threads = countEntries("/proc/self/task");
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) ++s.maps;
  std::ifstream statm("/proc/self/statm");
  uint64_t size = 0, resident = 0;
  statm >> size >> resident;
  s.rss = resident * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  return s;
}

json snapJson(const Snapshot& s) {
  return {{"fds", s.fds}, {"threads", s.threads}, {"rss_bytes", s.rss}, {"maps", s.maps}};
}

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

void fail(Status* st, Phase phase, const char* step, int64_t index, int rc,
          const std::string& why) {
  if (!st->ok) return;  // the first failure is the one reported
  st->ok = 0;
  st->phase = phase;
  st->rc = rc;
  st->index = index;
  std::snprintf(st->step, sizeof st->step, "%s", step);
  std::snprintf(st->error, sizeof st->error, "%s", why.c_str());
}

// A plugin call returned rc != 0: the result's name and the plugin's last WARN line.
void failCall(Status* st, Phase phase, const char* step, int64_t index, int rc) {
  std::string why = std::string(resultName(rc)) + " (" + std::to_string(rc) + ")";
  const std::string warning = NetPlugin::takeLastWarning();
  if (!warning.empty()) why += ": " + warning;
  fail(st, phase, step, index, rc, why);
}

json statusJson(const Status& s) {
  if (s.ok) return nullptr;
  return {{"step", s.step},
          {"index", s.index},
          {"rc", s.rc},
          {"result", s.rc ? resultName(s.rc) : ""},
          {"error", s.error}};
}

// Each side sends the other one Status per phase, when it is done with the phase; the other reads
// it while it polls (look) or at its own end (finish). Nothing else crosses the channel during a
// phase, so the next message is always this phase's status.
class PhaseSync {
 public:
  explicit PhaseSync(double limit_s) : limit_ms_(static_cast<int>(std::ceil(limit_s * 1000))) {}
  bool peerFailed() {
    look();
    return have_ && !peer_.ok;
  }
  // Blocks (bounded) until the peer's status is in, without sending ours.
  const Status& await(const char* phase) {
    if (!have_) {
      if (!ctlReadable(limit_ms_)) {
        die(std::string("the peer sent nothing for ") + phase + " within " +
            std::to_string(limit_ms_ / 1000) + " s");
      }
      ctlRecv(&peer_, sizeof peer_);
      have_ = true;
    }
    return peer_;
  }
  // Sends ours, then waits (bounded) for the peer's; returns it.
  const Status& finish(const Status& mine, const char* phase) {
    ctlSend(&mine, sizeof mine);
    return await(phase);
  }

 private:
  void look() {
    if (!have_ && ctlReadable(0)) {
      ctlRecv(&peer_, sizeof peer_);
      have_ = true;
    }
  }
  int limit_ms_;
  bool have_ = false;
  Status peer_{};
};

void sendString(const std::string& s) {
  const uint64_t n = s.size();
  ctlSend(&n, sizeof n);
  ctlSend(s.data(), s.size());
}

std::string recvString() {
  uint64_t n = 0;
  ctlRecv(&n, sizeof n);
  std::string s(n, '\0');
  ctlRecv(s.data(), n);
  return s;
}

// ---- one round ----------------------------------------------------------------------------------

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

  json toJson(long n) const {
    const bool msg = msg_last > 0;
    json j = {{"ok", status.ok != 0},
              {"failure", statusJson(status)},
              {"comms_opened", opened},
              {"comms_closed", closed},
              {"comms_closed_in_order", closed_in_order},
              {"setup_s", setup_s},
              {"comms_per_s",
               setup_done && setup_s > 0 ? json(static_cast<double>(n) / setup_s) : json(nullptr)},
              {"reg_s", reg_s},
              {"message_s", msg ? json(msg_last - msg_first) : json(nullptr)},
              {"message_t0", msg_first},
              {"message_t1", msg_last},
              {"dereg_s", dereg_s},
              {"close_s", close_timed ? json(close_s) : json(nullptr)},
              {"close_per_comm_s", close_timed && closed_in_order > 0
                                       ? json(close_s / static_cast<double>(closed_in_order))
                                       : json(nullptr)},
              {"leftover_close_s", leftover_close_s},
              {"before", snapJson(before)},
              {"after_setup", setup_done ? snapJson(after_setup) : json(nullptr)},
              {"after_close", snapJson(after_close)},
              {"plugin_resources_after_close", resources}};
    if (setup_done && n > 0) {
      j["rss_per_comm_bytes"] =
          (static_cast<double>(after_setup.rss) - static_cast<double>(before.rss)) /
          static_cast<double>(n);
      j["fds_per_comm"] =
          static_cast<double>(after_setup.fds - before.fds) / static_cast<double>(n);
      j["maps_per_comm"] =
          static_cast<double>(after_setup.maps - before.maps) / static_cast<double>(n);
    } else {
      j["rss_per_comm_bytes"] = nullptr;
      j["fds_per_comm"] = nullptr;
      j["maps_per_comm"] = nullptr;
    }
    return j;
  }
};

struct FreeDeleter {
  void operator()(char* p) const { std::free(p); }
};

class Round {
 public:
  Round(NetPlugin& net, const ScaleOptions& o, size_t size, char* buf, size_t buf_bytes, int rank,
        long n, Order order)
      : net_(net),
        o_(o),
        size_(size),
        buf_(buf),
        buf_bytes_(buf_bytes),
        rank_(rank),
        n_(n),
        order_(order) {}

  SideResult run() {
    (void)NetPlugin::takeLastWarning();  // a WARN from an earlier round is not this round's cause
    me_.before = snapshot();
    comms_.assign(static_cast<size_t>(n_), nullptr);
    mhs_.assign(static_cast<size_t>(n_), nullptr);
    if (rank_ == kRecv) listens_.assign(static_cast<size_t>(n_), nullptr);
    bool ok = setup();
    if (ok) {
      me_.setup_done = true;
      me_.after_setup = snapshot();
      ok = message();
    }
    closeRound(ok);
    // pact finishes closes in the background; its resource count first lets that work end
    // (bounded), so the snapshot after it sees what the process keeps, not what is on its way out.
    auto held = reinterpret_cast<pact_plugin_resources_fn>(net_.symbol("pact_plugin_resources"));
    pact_plugin_resources_t r{};
    if (held != nullptr && held(&r) == 0) {
      me_.resources = {{"comms", r.comms},
                       {"registrations", r.registrations},
                       {"orphaned_requests", r.orphaned_requests}};
    }
    me_.after_close = snapshot();
    return me_;
  }

 private:
  unsigned backstop() const { return static_cast<unsigned>(2 * o_.timeout_s + 60); }
  double peerLimit() const { return o_.timeout_s + 30; }
  void noteFailure(const Status& st) {
    if (me_.status.ok && !st.ok) me_.status = st;
  }

  // Batches of --batch connections: A listens and sends the handles; both poll (A accept, B
  // connect) until every comm of the batch exists; one status each ends the batch.
  bool setup() {
    const double t0 = now();
    const long batch = std::max<long>(1, o_.batch);
    bool ok = true;
    std::vector<std::array<char, loader::kHandleSize>> handles;
    for (long first = 0; first < n_ && ok; first += batch) {
      watchdog(backstop(), "scale: setup");
      const long count = std::min(batch, n_ - first);
      handles.assign(static_cast<size_t>(count), {});
      Status st;
      int64_t made = 0, listen_ok = 1;
      if (rank_ == kRecv) {
        for (; made < count; ++made) {
          void*& lc = listens_[static_cast<size_t>(first + made)];
          const int rc = net_.listen(o_.dev, handles[static_cast<size_t>(made)].data(), &lc);
          if (rc != 0) {
            failCall(&st, kSetup, "listen", first + made, rc);
            break;
          }
          if (lc == nullptr) {
            fail(&st, kSetup, "listen", first + made, 0, "listen returned a NULL listenComm");
            break;
          }
        }
        listen_ok = st.ok;
        const int64_t header[2] = {made, listen_ok};
        ctlSend(header, sizeof header);
        ctlSend(handles.data(), static_cast<size_t>(made) * loader::kHandleSize);
      } else {
        int64_t header[2] = {};
        ctlRecv(header, sizeof header);
        made = header[0];
        listen_ok = header[1];
        if (made < 0 || made > count) die("control channel out of step (handle count)");
        ctlRecv(handles.data(), static_cast<size_t>(made) * loader::kHandleSize);
      }
      PhaseSync sync(peerLimit());
      if (listen_ok) pollConnections(first, made, handles, sync, &st);
      const Status& peer = sync.finish(st, "setup");
      noteFailure(st);
      ok = st.ok && peer.ok;
    }
    for (void* c : comms_) me_.opened += c != nullptr;
    me_.setup_s = now() - t0;
    return ok;
  }

  void pollConnections(long first, long count,
                       std::vector<std::array<char, loader::kHandleSize>>& handles, PhaseSync& sync,
                       Status* st) {
    std::vector<long> pending;
    for (long i = first; i < first + count; ++i) pending.push_back(i);
    const double deadline = now() + o_.timeout_s;
    while (!pending.empty()) {
      size_t keep = 0;
      for (size_t k = 0; k < pending.size() && st->ok; ++k) {
        const long i = pending[k];
        void*& c = comms_[static_cast<size_t>(i)];
        if (rank_ == kRecv) {
          void*& lc = listens_[static_cast<size_t>(i)];
          const int rc = net_.accept(lc, &c);
          if (rc != 0) {
            failCall(st, kSetup, "accept", i, rc);
          } else if (c != nullptr) {
            const int crc = net_.closeListen(lc);  // as NCCL: the listen comm goes once accepted
            lc = nullptr;
            if (crc != 0) failCall(st, kSetup, "closeListen", i, crc);
          }
        } else {
          const int rc = net_.connect(o_.dev, handles[static_cast<size_t>(i - first)].data(), &c);
          if (rc != 0) failCall(st, kSetup, "connect", i, rc);
        }
        if (c == nullptr) pending[keep++] = i;
      }
      if (!st->ok) return;
      pending.resize(keep);
      if (pending.empty() || sync.peerFailed()) return;
      if (now() > deadline) {
        fail(st, kSetup, rank_ == kRecv ? "accept" : "connect", pending.front(), 0,
             std::to_string(pending.size()) + " of " + std::to_string(count) +
                 " comms of the batch not there after " + formatSeconds(o_.timeout_s));
        return;
      }
    }
  }

  static std::string formatSeconds(double s) {
    char b[32];
    std::snprintf(b, sizeof b, "%g s", s);
    return b;
  }

  // regMr per comm (one shared buffer), one message over every comm, deregMr per comm.
  bool message() {
    watchdog(backstop(), "scale: regMr");
    Status st;
    double t = now();
    for (size_t i = 0; i < comms_.size() && st.ok; ++i) {
      const int rc = net_.regMr(comms_[i], buf_, buf_bytes_, loader::kPtrHost, &mhs_[i]);
      if (rc != 0) failCall(&st, kMessage, "regMr", static_cast<int64_t>(i), rc);
    }
    me_.reg_s = now() - t;
    PhaseSync reg(peerLimit());
    bool ok = reg.finish(st, "regMr").ok && st.ok;
    noteFailure(st);
    if (ok) {
      watchdog(backstop(), "scale: message");
      PhaseSync sync(peerLimit());
      messages(sync, &st);
      ok = sync.finish(st, "message").ok && st.ok;
      noteFailure(st);
    }
    watchdog(backstop(), "scale: deregMr");
    Status dst;
    t = now();
    for (size_t i = 0; i < comms_.size(); ++i) {
      if (mhs_[i] == nullptr) continue;
      const int rc = net_.deregMr(comms_[i], mhs_[i]);
      mhs_[i] = nullptr;
      if (rc != 0) failCall(&dst, kMessage, "deregMr", static_cast<int64_t>(i), rc);
    }
    me_.dereg_s = now() - t;
    PhaseSync dereg(peerLimit());
    ok = dereg.finish(dst, "deregMr").ok && dst.ok && ok;
    noteFailure(dst);
    return ok;
  }

  // B isends, A irecvs, one message per comm; a NULL request is retried on the next sweep (NCCL's
  // back-pressure), every request is tested to completion.
  void messages(PhaseSync& sync, Status* st) {
    std::vector<long> unposted;
    for (long i = 0; i < n_; ++i) unposted.push_back(i);
    std::vector<std::pair<long, void*>> inflight;
    const double deadline = now() + o_.timeout_s;
    me_.msg_first = now();
    long completed = 0;
    while ((!unposted.empty() || !inflight.empty()) && st->ok) {
      size_t keep = 0;
      for (size_t k = 0; k < unposted.size() && st->ok; ++k) {
        const long i = unposted[k];
        void* req = nullptr;
        int rc = 0;
        if (rank_ == kSend) {
          rc = net_.isend(comms_[static_cast<size_t>(i)], buf_, size_, kTag,
                          mhs_[static_cast<size_t>(i)], &req);
        } else {
          void* data[1] = {buf_};
          size_t sizes[1] = {buf_bytes_};
          int tags[1] = {kTag};
          void* mh[1] = {mhs_[static_cast<size_t>(i)]};
          rc = net_.irecv(comms_[static_cast<size_t>(i)], 1, data, sizes, tags, mh, &req);
        }
        if (rc != 0) {
          failCall(st, kMessage, rank_ == kSend ? "isend" : "irecv", i, rc);
        } else if (req != nullptr) {
          inflight.emplace_back(i, req);
        } else {
          unposted[keep++] = i;
        }
      }
      if (!st->ok) break;
      unposted.resize(keep);
      keep = 0;
      for (size_t k = 0; k < inflight.size() && st->ok; ++k) {
        int done = 0;
        int sizes[loader::kMaxRecvs] = {};
        const int rc = net_.test(inflight[k].second, &done, sizes);
        if (rc != 0) {
          failCall(st, kMessage, "test", inflight[k].first, rc);
        } else if (!done) {
          inflight[keep++] = inflight[k];
        } else {
          ++completed;
          me_.msg_last = now();
          if (rank_ == kRecv && static_cast<size_t>(sizes[0]) != size_) {
            fail(st, kMessage, "test", inflight[k].first, 0,
                 "received " + std::to_string(sizes[0]) + " bytes, expected " +
                     std::to_string(size_));
          }
        }
      }
      if (!st->ok) break;
      inflight.resize(keep);
      if (unposted.empty() && inflight.empty()) break;
      if (sync.peerFailed()) {
        fail(st, kMessage, "message", -1, 0, "stopped: the peer failed");
        break;
      }
      if (now() > deadline) {
        fail(st, kMessage, "message", inflight.empty() ? unposted.front() : inflight.front().first,
             0,
             std::to_string(n_ - completed) + " of " + std::to_string(n_) +
                 " messages not complete after " + formatSeconds(o_.timeout_s) + " (" +
                 std::to_string(unposted.size()) + " not posted)");
      }
    }
    if (!st->ok) me_.msg_last = 0;
  }

  // Closes every comm this side still has (and A's listen comms left after a failure), bounded
  // by the deadline; returns the seconds it took.
  double closeMine(Status* st) {
    const double t0 = now();
    const double deadline = t0 + o_.timeout_s;
    const char* step = rank_ == kRecv ? "closeRecv" : "closeSend";
    for (size_t i = 0; i < comms_.size(); ++i) {
      if (comms_[i] == nullptr) continue;
      if (now() > deadline) {
        const long left =
            std::count_if(comms_.begin(), comms_.end(), [](void* c) { return c != nullptr; });
        fail(st, kClose, step, static_cast<int64_t>(i), 0,
             std::to_string(left) + " comms still open after " + formatSeconds(o_.timeout_s) +
                 " of closing");
        break;
      }
      const int rc = rank_ == kRecv ? net_.closeRecv(comms_[i]) : net_.closeSend(comms_[i]);
      comms_[i] = nullptr;
      ++me_.closed;
      if (rc != 0) failCall(st, kClose, step, static_cast<int64_t>(i), rc);
    }
    for (size_t i = 0; i < listens_.size(); ++i) {
      if (listens_[i] == nullptr) continue;
      const int rc = net_.closeListen(listens_[i]);
      listens_[i] = nullptr;
      if (rc != 0) failCall(st, kClose, "closeListen", static_cast<int64_t>(i), rc);
    }
    return now() - t0;
  }

  // The timed close in the round's order (only if every earlier phase succeeded), then a
  // leftover pass, both sides at once: what a failed round or the close deadline left open is
  // closed after the peer has closed its side.
  void closeRound(bool ok) {
    watchdog(backstop(), "scale: close");
    if (ok) {
      me_.close_timed = true;
      Status st;
      if (order_ == Order::kBoth) {
        PhaseSync start(peerLimit());
        (void)start.finish(Status{}, "close start");  // both begin together
        me_.close_s = closeMine(&st);
        PhaseSync end(peerLimit());
        (void)end.finish(st, "close");
      } else {
        const int first = order_ == Order::kRecvFirst ? kRecv : kSend;
        PhaseSync sync(peerLimit());
        if (rank_ == first) {
          me_.close_s = closeMine(&st);
          (void)sync.finish(st, "close");
        } else {
          (void)sync.await("close (the first side's)");
          me_.close_s = closeMine(&st);
          ctlSend(&st, sizeof st);
        }
      }
      me_.closed_in_order = me_.closed;
      noteFailure(st);
    }
    watchdog(backstop(), "scale: leftover close");
    PhaseSync start(peerLimit());
    (void)start.finish(Status{}, "leftover close start");
    Status st;
    me_.leftover_close_s = closeMine(&st);
    PhaseSync end(peerLimit());
    (void)end.finish(st, "leftover close");
    noteFailure(st);
    watchdog(0, "scale: between rounds");
  }

  NetPlugin& net_;
  const ScaleOptions& o_;
  size_t size_;
  char* buf_;
  size_t buf_bytes_;
  int rank_;
  long n_;
  Order order_;
  std::vector<void*> comms_;    // A: recv comms, B: send comms; index = connection
  std::vector<void*> listens_;  // A: listen comms not yet accepted
  std::vector<void*> mhs_;
  SideResult me_;
};

// ---- output -------------------------------------------------------------------------------------

std::string mib(uint64_t bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f", static_cast<double>(bytes) / (1 << 20));
  return b;
}

std::string triple(const json& side, const char* key, bool as_mib) {
  std::string out;
  for (const char* when : {"before", "after_setup", "after_close"}) {
    if (!out.empty()) out += "/";
    const json& s = side[when];
    if (s.is_null()) {
      out += "-";
    } else if (as_mib) {
      out += mib(s[key].get<uint64_t>());
    } else {
      out += std::to_string(s[key].get<long>());
    }
  }
  return out;
}

std::string num(const json& v, const char* fmt) {
  if (v.is_null()) return "-";
  char b[32];
  std::snprintf(b, sizeof b, fmt, v.get<double>());
  return b;
}

void printHeader() {
  std::printf("%7s %-10s %-4s %9s %9s %8s %9s %8s %9s %20s %11s %20s %20s %10s\n", "comms", "order",
              "side", "setup_s", "comms/s", "reg_s", "msg_ms", "dereg_s", "close_s",
              "fds(0/setup/close)", "threads", "rss_MiB", "maps", "rss_B/comm");
  std::printf(
      "# 0/setup/close: before setup, after setup, after close. close_s*: not every comm "
      "was closed by the timed close (a failure or its deadline; the rest closed after)\n");
  std::fflush(stdout);
}

void printRound(const json& r) {
  for (const char* side : {"recv", "send"}) {
    const json& s = r[side];
    std::printf("%7ld %-10s %-4s %9s %9s %8s %9s %8s %8s%s %20s %11s %20s %20s %10s\n",
                r["comms"].get<long>(), r["order"].get<std::string>().c_str(), side,
                num(s["setup_s"], "%.3f").c_str(), num(s["comms_per_s"], "%.0f").c_str(),
                num(s["reg_s"], "%.3f").c_str(),
                s["message_s"].is_null()
                    ? "-"
                    : num(json(s["message_s"].get<double>() * 1e3), "%.2f").c_str(),
                num(s["dereg_s"], "%.3f").c_str(), num(s["close_s"], "%.3f").c_str(),
                s["comms_closed_in_order"].get<long>() < r["comms"].get<long>() ? "*" : " ",
                triple(s, "fds", false).c_str(), triple(s, "threads", false).c_str(),
                triple(s, "rss_bytes", true).c_str(), triple(s, "maps", false).c_str(),
                num(s["rss_per_comm_bytes"], "%.0f").c_str());
  }
  if (r["ok"].get<bool>()) {
    std::printf("#   round %ld %s: ok, message round %.2f ms (first isend to last completion)\n",
                r["comms"].get<long>(), r["order"].get<std::string>().c_str(),
                r["message_round_s"].get<double>() * 1e3);
  } else {
    const json& f = r["failed"];
    std::printf("#   round %ld %s: FAILED on the %s side at %s of comm %ld: %s\n",
                r["comms"].get<long>(), r["order"].get<std::string>().c_str(),
                f["side"].get<std::string>().c_str(), f["step"].get<std::string>().c_str(),
                f["index"].get<long>(), f["error"].get<std::string>().c_str());
  }
  for (const char* side : {"recv", "send"}) {
    const json& s = r[side];
    if (s["leftover_close_s"].get<double>() >= 0.001) {
      std::printf(
          "#   %s side: %ld of %ld comms closed in order, the rest (with listens) in %.3f s "
          "after\n",
          side, s["comms_closed_in_order"].get<long>(), s["comms_opened"].get<long>(),
          s["leftover_close_s"].get<double>());
    }
  }
  std::fflush(stdout);
}

// The round's entry, from A's and B's results: the earlier failure (by phase) is the round's.
json roundJson(long n, Order order, const SideResult& a, const json& b_json) {
  json r = {{"comms", n}, {"order", orderName(order)}, {"recv", a.toJson(n)}, {"send", b_json}};
  const bool ok = r["recv"]["ok"].get<bool>() && r["send"]["ok"].get<bool>();
  r["ok"] = ok;
  r["message_round_s"] = nullptr;
  r["failed"] = nullptr;
  if (a.msg_last > 0 && b_json["message_t1"].get<double>() > 0) {
    // The message round completed on both sides (a later close may still fail the round). Both
    // processes read one CLOCK_MONOTONIC (same host): first isend to the last completion.
    const double t0 = b_json["message_t0"].get<double>();
    const double t1 = std::max(a.msg_last, b_json["message_t1"].get<double>());
    r["message_round_s"] = t1 - t0;
  }
  if (!ok) {
    const char* side = !r["recv"]["ok"].get<bool>() ? "recv" : "send";
    if (!r["recv"]["ok"].get<bool>() && !r["send"]["ok"].get<bool>() &&
        b_json["failure_phase"].get<int>() < a.status.phase) {
      side = "send";
    }
    r["failed"] = r[side]["failure"];
    r["failed"]["side"] = side;
  }
  return r;
}

int runScale(ScaleOptions o) {
  if (o.plugin.empty()) o.plugin = defaultPluginPath();
  size_t size = 0;
  if (!parseSize(o.size, &size) || size > kMaxMessage) {
    std::fprintf(stderr, "pact-perf scale: --size must be a size up to 1M, got '%s'\n",
                 o.size.c_str());
    return 2;
  }
  if (o.comms.empty() ||
      std::any_of(o.comms.begin(), o.comms.end(), [](long n) { return n < 1; }) || o.batch < 1 ||
      o.timeout_s <= 0) {
    std::fprintf(stderr, "pact-perf scale: --comms, --batch and --timeout-s must be positive\n");
    return 2;
  }
  std::vector<Order> orders;
  if (o.order == "all") {
    orders = {Order::kBoth, Order::kRecvFirst, Order::kSendFirst};
  } else if (o.order == "both") {
    orders = {Order::kBoth};
  } else if (o.order == "recv-first") {
    orders = {Order::kRecvFirst};
  } else if (o.order == "send-first") {
    orders = {Order::kSendFirst};
  } else {
    std::fprintf(stderr, "pact-perf scale: --order is both, recv-first, send-first or all\n");
    return 2;
  }
  if (o.plugin.find('/') != std::string::npos && access(o.plugin.c_str(), R_OK) != 0) {
    std::fprintf(stderr, "pact-perf scale: cannot read plugin %s (build it, or pass --plugin)\n",
                 o.plugin.c_str());
    return 2;
  }
  // NCCL jobs usually run with the soft descriptor limit at the hard one (ulimit -n); so does this.
  rlimit lim{};
  getrlimit(RLIMIT_NOFILE, &lim);
  if (o.nofile != 0) {
    rlim_t want =
        o.nofile < 0 ? lim.rlim_max : std::min<rlim_t>(static_cast<rlim_t>(o.nofile), lim.rlim_max);
    lim.rlim_cur = want;
    if (setrlimit(RLIMIT_NOFILE, &lim) != 0)
      std::perror("pact-perf scale: setrlimit(RLIMIT_NOFILE)");
    getrlimit(RLIMIT_NOFILE, &lim);
  }

  const int rank = forkPeer();
  watchdog(static_cast<unsigned>(2 * o.timeout_s + 60), "scale: plugin open/init");
  std::string err;
  auto net = NetPlugin::open(o.plugin, o.version, &err);
  if (!net) die(err);
  check(net->init(-1, !o.verbose), "init");
  int ndev = 0;
  check(net->devices(&ndev), "devices");
  if (o.dev < 0 || o.dev >= ndev) {
    die("device " + std::to_string(o.dev) + " out of range (plugin has " + std::to_string(ndev) +
        ")");
  }
  loader::Properties props;
  check(net->getProperties(o.dev, &props), "getProperties");
  const size_t buf_bytes = std::max<size_t>(size, 4096);
  void* raw = nullptr;
  if (posix_memalign(&raw, 4096, buf_bytes) != 0) die("cannot allocate the message buffer");
  std::unique_ptr<char, FreeDeleter> buf(static_cast<char*>(raw));
  std::memset(buf.get(), rank == kSend ? 0x5a : 0, buf_bytes);
  const Snapshot init = snapshot();
  watchdog(0, "scale: rounds");

  auto env = [](const char* k) {
    const char* v = std::getenv(k);
    return v ? json(v) : json(nullptr);
  };
  json doc = {{"meta",
               {{"tool", "pact-perf scale"},
                {"plugin_path", o.plugin},
                {"plugin_name", net->name() ? net->name() : ""},
                {"version", net->version()},
                {"dev", o.dev},
                {"dev_name", props.name},
                {"max_comms", props.maxComms},
                {"size", size},
                {"batch", o.batch},
                {"timeout_s", o.timeout_s},
                {"nofile_soft", static_cast<long>(lim.rlim_cur)},
                {"nofile_hard", static_cast<long>(lim.rlim_max)},
                {"UCX_TLS", env("UCX_TLS")},
                {"UCX_NET_DEVICES", env("UCX_NET_DEVICES")},
                {"PACT_NET_DEVICES", env("PACT_NET_DEVICES")},
                {"after_init", {{"recv", snapJson(init)}}}}},
              {"results", json::array()}};
  if (rank == kSend) {
    sendString(snapJson(init).dump());
  } else {
    doc["meta"]["after_init"]["send"] = json::parse(recvString());
    std::printf(
        "# plugin %s (%s, v%d) dev %d %s (maxComms %d), message %zu B, batch %ld, "
        "UCX_TLS=%s, fd limit %ld/%ld, timeout %g s per wait\n",
        net->name() ? net->name() : "?", o.plugin.c_str(), net->version(), o.dev,
        props.name.c_str(), props.maxComms, size, o.batch,
        std::getenv("UCX_TLS") ? std::getenv("UCX_TLS") : "(unset)",
        static_cast<long>(lim.rlim_cur), static_cast<long>(lim.rlim_max), o.timeout_s);
    printHeader();
  }

  bool all_ok = true;
  for (long n : o.comms) {
    for (Order order : orders) {
      Round round(*net, o, size, buf.get(), buf_bytes, rank, n, order);
      SideResult me = round.run();
      if (rank == kSend) {
        json j = me.toJson(n);
        j["failure_phase"] = me.status.ok ? 99 : me.status.phase;
        sendString(j.dump());
        continue;
      }
      json b = json::parse(recvString());
      json r = roundJson(n, order, me, b);
      r["send"].erase("failure_phase");
      all_ok = all_ok && r["ok"].get<bool>();
      printRound(r);
      doc["results"].push_back(r);
      // Rewritten after every round: a run the watchdog ends still leaves what it measured.
      if (!o.json.empty() && !writeJson(o.json, doc, &err)) {
        std::fprintf(stderr, "pact-perf scale: %s\n", err.c_str());
      }
    }
  }
  watchdog(static_cast<unsigned>(2 * o.timeout_s + 60), "scale: finalize");
  barrier();
  net.reset();  // finalize, dlclose
  watchdog(0, "done");
  if (rank == kSend) {
    std::fflush(stdout);
    _exit(0);
  }
  int rc = all_ok ? 0 : 1;
  if (!reapPeer()) {
    std::fprintf(stderr, "pact-perf scale: peer process failed\n");
    rc = 1;
  }
  return rc;
}

}  // namespace

void addScaleCommand(CLI::App& app, int* exit_code) {
  auto o = std::make_shared<ScaleOptions>();
  CLI::App* c = app.add_subcommand(
      "scale",
      "many comm pairs between two processes: setup, one message each, close; fds, "
      "threads, RSS, mappings");
  c->add_option("--comms", o->comms, "comm pairs per round (repeatable, or a comma list)")
      ->delimiter(',')
      ->capture_default_str();
  c->add_option("--order", o->order,
                "close order: both, recv-first, send-first, or all (each its own round)")
      ->capture_default_str();
  c->add_option("--plugin", o->plugin,
                "NCCL net plugin .so (default: <exe dir>/../plugin/libnccl-net-pact.so)");
  c->add_option("--version", o->version, "ncclNetPlugin_vN to use; 0 = newest exported")
      ->check(CLI::Range(0, 12));
  c->add_option("--size", o->size, "bytes of the one message per comm (up to 1M)")
      ->capture_default_str();
  c->add_option("--batch", o->batch,
                "listens (handles) per bootstrap round trip; NCCL sends one at a time, but the "
                "bootstrap is not what is measured")
      ->capture_default_str();
  c->add_option("--dev", o->dev, "plugin device index")->capture_default_str();
  c->add_option("--timeout-s", o->timeout_s,
                "deadline of every wait (a batch's connect/accept, the message round, each close "
                "loop, the peer's word); past it the round fails")
      ->capture_default_str();
  c->add_option("--nofile", o->nofile,
                "soft RLIMIT_NOFILE for both processes: -1 = the hard limit, 0 = leave it")
      ->capture_default_str();
  c->add_option("--json", o->json, "also write the results to this JSON file");
  c->add_flag("-v,--verbose", o->verbose, "print the plugin's INFO/TRACE log lines");
  c->footer(
      "Rank 0 (A) listens and accepts (receiver), rank 1 (B, forked before the plugin opens)\n"
      "connects and isends. Per round: setup (batches of --batch connections: A listens, sends\n"
      "the handles, both poll accept/connect until each comm exists), regMr per comm of one "
      "shared\n"
      "buffer, one message per comm, deregMr, close in the round's order; snapshots of fds,\n"
      "threads, RSS and /proc/self/maps lines before setup, after setup and after close.\n"
      "A failed round names its step, comm and the plugin's error; both sides close what they\n"
      "have and the next round runs. Exit status 0 only if every round succeeded.");
  c->callback([o, exit_code] { *exit_code = runScale(*o); });
}

}  // namespace pact::perf
