// `pact-perf scale`'s round: see scale_round.h.
#include "scale_round.h"

#include "peer.h"
#include "report.h"

#include "pact/nccl_ext.h"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>

namespace pact::perf::scale {

using loader::NetPlugin;

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

// ---- what the process holds ---------------------------------------------------------------------

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

json SideResult::toJson(long n) const {
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

namespace {

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
    // The bench's own handle tables (8 B per comm each) are not what the plugin keeps.
    for (auto* v : {&comms_, &listens_, &mhs_}) std::vector<void*>().swap(*v);
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

}  // namespace

SideResult runRound(NetPlugin& net, const ScaleOptions& o, size_t size, char* buf, size_t buf_bytes,
                    int rank, long n, Order order) {
  return Round(net, o, size, buf, buf_bytes, rank, n, order).run();
}

}  // namespace pact::perf::scale
