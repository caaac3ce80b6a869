// pact.Engine, pact.Transfer and pact.Group over the C API. Every call into the engine releases
// the GIL (the engine lock may be held by the progress thread); blocking waits run in slices so
// that Ctrl-C (a pending signal) interrupts them. No Python code ever runs under the engine lock:
// the commit hook is C++ (CommitPolicy) and results reach Python by polling (docs/python.md).
#include <nanobind/stl/optional.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <chrono>
#include <optional>

#include <unistd.h>

#include "binding.h"

namespace pact::py {

namespace {

nb::object errorsModule() { return nb::module_::import_("pact._errors"); }

// The commit hook: the policy, in C++, on the progress thread, engine lock held, no GIL.
int commitHook(void* user, pact_xfer_t, const pact_key_t* key, pact_peer_t, const pact_block_t*,
               size_t) {
  auto* policy = static_cast<CommitPolicy*>(user);
  std::lock_guard<std::mutex> g(policy->mu);
  if (policy->refused.count(key->request_id) != 0) {
    ++policy->rejected;
    return 1;
  }
  ++policy->committed;
  return 0;
}

// Calls wait(slice_ms) until it returns something other than PACT_ERR_TIMED_OUT or timeout_ms
// (-1: forever) passed, checking for signals between slices. Returns the last status; raises
// pact.TimedOut naming the whole timeout when it passed.
template <typename F>
pact_status_t sliced(const char* what, int timeoutMs, F&& wait) {
  constexpr int kSliceMs = 100;
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    int slice = kSliceMs;
    if (timeoutMs >= 0) {
      const auto spent = std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::steady_clock::now() - start).count();
      slice = static_cast<int>(std::min<int64_t>(kSliceMs, std::max<int64_t>(0, timeoutMs - spent)));
    }
    pact_status_t s;
    {
      nb::gil_scoped_release unlocked;
      s = wait(slice);
    }
    if (s != PACT_ERR_TIMED_OUT) return s;
    if (timeoutMs >= 0 && std::chrono::steady_clock::now() - start >= std::chrono::milliseconds(timeoutMs))
      fail(PACT_ERR_TIMED_OUT, std::string(what) + ": not done within " + std::to_string(timeoutMs) +
                                   " ms (the operation goes on)");
    if (PyErr_CheckSignals() != 0) throw nb::python_error();
  }
}

// The TransferInfo of i; a final transfer counts as seen by the application (poll skips it).
nb::object info(Core& core, pact_xfer_t id, const pact_xfer_info_t& i) {
  if (auto it = core.open.find(id); i.final && it != core.open.end()) it->second.reported = true;
  nb::object pact = nb::module_::import_("pact");
  return pact.attr("TransferInfo")(id, pact.attr("State")(static_cast<int>(i.state)),
                                   static_cast<int>(i.result), i.final != 0, i.retries,
                                   fromKey(i.key), i.peer, i.bytes);
}

struct Transfer {
  CoreRef core;
  pact_xfer_t id = 0;
  bool sender = false;

  Transfer(CoreRef c, pact_xfer_t x, bool s) : core(std::move(c)), id(x), sender(s) {}
  Transfer(Transfer&& o) noexcept : core(std::move(o.core)), id(std::exchange(o.id, 0)), sender(o.sender) {}
  Transfer(const Transfer&) = delete;
  Transfer& operator=(const Transfer&) = delete;
  // Dropped: the transfer goes on, tracked, and is released once final and reported by poll.
  ~Transfer() {
    if (id == 0 || !core || core->engine == nullptr) return;
    if (auto it = core->open.find(id); it != core->open.end()) it->second.orphan = true;
    core->sweep();
  }

  nb::object query() {
    pact_xfer_info_t i{};
    pact_status_t s;
    {
      nb::gil_scoped_release unlocked;
      s = pact_xfer_query(core->get(), id, &i);
    }
    check(s, "Transfer.query");
    return info(*core, id, i);
  }
  nb::object wait(nb::handle timeout) {
    const int ms = toMs(timeout, "Transfer.wait");
    pact_engine_t e = core->get();
    pact_xfer_info_t i{};
    pact_status_t s = sliced("Transfer.wait", ms, [&](int slice) { return pact_xfer_wait(e, id, slice, &i); });
    check(s, "Transfer.wait");
    return info(*core, id, i);
  }
  bool release() {
    pact_status_t s;
    {
      nb::gil_scoped_release unlocked;
      s = pact_xfer_release(core->get(), id);
    }
    check(s, "Transfer.release", true);
    if (s == PACT_OK) core->open.erase(id);  // gone: its registrations may go
    else if (auto it = core->open.find(id); it != core->open.end()) it->second.released = true;
    return s == PACT_OK;
  }
};

struct Group {
  CoreRef core;
  pact_group_t group = nullptr;
  std::vector<std::shared_ptr<Memory>> step;  // the current step's registrations

  explicit Group(CoreRef c) : core(std::move(c)) {}
  Group(Group&& o) noexcept
      : core(std::move(o.core)), group(std::exchange(o.group, nullptr)), step(std::move(o.step)) {}
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;

  pact_group_t get() const {
    if (group == nullptr) invalid("the group is closed");
    core->get();
    return group;
  }
  void close() {
    if (group != nullptr && core->engine != nullptr) {
      nb::gil_scoped_release unlocked;
      pact_group_destroy(group);
    }
    group = nullptr;
    step.clear();
  }
  ~Group() { close(); }
};

struct Engine {
  CoreRef core = std::make_shared<Core>();
  std::string name;
  uint64_t epoch = 0;  // the receiver's current model epoch (set_epoch)

  Engine(std::optional<std::string> name, std::optional<std::string> listen, int port,
         uint64_t epoch, uint64_t creditBudget, bool progressThread) {
    if (port < 0 || port > 65535) invalid("Engine: port " + std::to_string(port) + " outside 0..65535");
    pact_engine_config_t c;
    pact_engine_config_init(&c);
    c.name = name ? name->c_str() : nullptr;
    c.listen_ip = listen ? listen->c_str() : nullptr;
    c.listen_port = static_cast<uint16_t>(port);
    c.model_epoch = epoch;
    c.credit_budget = creditBudget;
    c.progress_thread = progressThread ? 1 : 0;
    pact_status_t s;
    {
      nb::gil_scoped_release unlocked;
      s = pact_engine_create(&c, &core->engine);
    }
    check(s, "Engine");
    this->name = name ? *name : "pact-" + std::to_string(getpid());
    this->epoch = epoch;
    check(pact_set_commit_hook(core->engine, commitHook, &core->policy), "Engine");
  }
  ~Engine() { core->close(); }

  std::string address() {
    char buf[128];
    check(pact_engine_address(core->get(), buf, sizeof buf), "Engine.address");
    return buf;
  }
  uint64_t connect(const std::string& address, nb::handle timeout) {
    const int ms = toMs(timeout, "Engine.connect");
    pact_peer_t peer = 0;
    pact_status_t s;
    {
      nb::gil_scoped_release unlocked;
      s = pact_connect(core->get(), address.c_str(), ms < 0 ? std::numeric_limits<int>::max() : ms, &peer);
    }
    check(s, "Engine.connect");
    return peer;
  }
  uint64_t waitPeer(const std::string& peerName, nb::handle timeout) {
    const int ms = toMs(timeout, "Engine.wait_peer");
    pact_engine_t e = core->get();
    pact_peer_t peer = 0;
    check(sliced("Engine.wait_peer", ms, [&](int slice) { return pact_peer_wait(e, peerName.c_str(), slice, &peer); }),
          "Engine.wait_peer");
    return peer;
  }

  Transfer open(bool sender, pact_peer_t peer, nb::handle key, nb::handle blocks,
                nb::handle deadline, const std::optional<std::string>& cls, const char* what) {
    pact_engine_t e = core->get();
    const pact_key_t k = toKey(key);
    auto bs = toBlocks(*core, blocks, !sender, what);
    const uint64_t us = toDeadlineUs(deadline);
    pact_xfer_t x = 0;
    pact_status_t s;
    {
      nb::gil_scoped_release unlocked;
      const char* c = cls ? cls->c_str() : nullptr;
      s = sender ? pact_send(e, peer, &k, bs.data(), bs.size(), us, c, &x)
                 : pact_expect(e, &k, bs.data(), bs.size(), us, c, &x);
    }
    check(s, what);
    core->open[x].memories = memoriesOf(blocks);
    return Transfer{core, x, sender};
  }
  // Batched: one call per item, all or nothing (what was opened before a failing item is released).
  std::vector<Transfer> openBatch(bool sender, nb::handle items, nb::handle deadline,
                                  const std::optional<std::string>& cls, const char* what) {
    if (!nb::isinstance<nb::sequence>(items)) invalid(std::string(what) + ": expected a list");
    std::vector<Transfer> out;
    size_t i = 0;
    try {
      for (nb::handle item : items) {
        const size_t want = sender ? 3 : 2;
        if (!nb::isinstance<nb::tuple>(item) || nb::len(item) != want)
          invalid(std::string(what) + ": items[" + std::to_string(i) + "] must be a tuple " +
                  (sender ? "(peer, key, blocks)" : "(key, blocks)"));
        nb::tuple t = nb::borrow<nb::tuple>(item);
        out.push_back(sender ? open(true, nb::cast<uint64_t>(t[0]), t[1], t[2], deadline, cls, what)
                             : open(false, 0, t[0], t[1], deadline, cls, what));
        ++i;
      }
    } catch (...) {
      for (auto& x : out) {
        try {
          (void)x.release();  // a fresh transfer: nothing of UCX touches its blocks yet
        } catch (const nb::python_error&) {
        }
        x.id = 0;
      }
      throw;
    }
    return out;
  }

  // The transfers opened here that are final and were not seen final yet.
  std::vector<nb::object> poll(nb::handle timeout) {
    const int ms = toMs(timeout, "Engine.poll");
    pact_engine_t e = core->get();
    std::vector<nb::object> out;
    auto collect = [&] {
      std::vector<pact_xfer_t> ids;
      for (auto& [id, t] : core->open)
        if (!t.reported && !t.released) ids.push_back(id);
      std::vector<pact_xfer_info_t> infos(ids.size());
      std::vector<pact_status_t> st(ids.size());
      {
        nb::gil_scoped_release unlocked;
        for (size_t i = 0; i < ids.size(); ++i) st[i] = pact_xfer_query(e, ids[i], &infos[i]);
      }
      for (size_t i = 0; i < ids.size(); ++i)
        if (st[i] == PACT_OK && infos[i].final) {
          out.push_back(info(*core, ids[i], infos[i]));
        }
      core->sweep();
    };
    collect();
    if (!out.empty() || ms == 0) return out;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms < 0 ? 0 : ms);
    while (out.empty() && (ms < 0 || std::chrono::steady_clock::now() < deadline)) {
      {
        nb::gil_scoped_release unlocked;
        (void)pact_progress(e, 10);
      }
      if (PyErr_CheckSignals() != 0) throw nb::python_error();
      collect();
    }
    return out;
  }

  void progress(nb::handle timeout) {
    const int ms = toMs(timeout, "Engine.progress");
    nb::gil_scoped_release unlocked;
    (void)pact_progress(core->get(), ms < 0 ? 0 : ms);
  }

  nb::dict stats() {
    pact_stats_t s{};
    check(pact_stats(core->get(), &s), "Engine.stats");
    nb::dict d;
    d["committed"] = s.committed;
    d["aborted"] = s.aborted;
    d["retried"] = s.retried;
    d["duplicates_dropped"] = s.duplicates_dropped;
    d["stale_rejected"] = s.stale_rejected;
    d["out_of_range"] = s.out_of_range;
    d["checksum_failures"] = s.checksum_failures;
    d["open_registrations"] = s.open_registrations;
    d["open_transfers"] = s.open_transfers;
    d["staged_bytes"] = s.staged_bytes;
    d["peak_staged_bytes"] = s.peak_staged_bytes;
    d["credit_budget"] = s.credit_budget;
    d["credit_stall_ns"] = s.credit_stall_ns;
    d["bytes_received"] = s.bytes_received;
    d["bytes_sent"] = s.bytes_sent;
    d["faults_injected"] = s.faults_injected;
    std::lock_guard<std::mutex> g(core->policy.mu);
    d["policy_committed"] = core->policy.committed;
    d["policy_refused"] = core->policy.rejected;
    d["tracked_transfers"] = core->open.size();
    return d;
  }

  std::vector<nb::object> trace(size_t max) {
    std::vector<pact_event_t> ev(max == 0 ? 1 : max);
    size_t n;
    {
      nb::gil_scoped_release unlocked;
      n = pact_trace_read(core->get(), ev.data(), ev.size(), &core->traceCursor);
    }
    nb::object pact = nb::module_::import_("pact");
    std::vector<nb::object> out;
    for (size_t i = 0; i < n; ++i)
      out.push_back(pact.attr("TraceEvent")(ev[i].time_ns, fromKey(ev[i].key), ev[i].peer,
                                            ev[i].role == 0 ? "receiver" : "sender",
                                            pact.attr("State")(static_cast<int>(ev[i].state)),
                                            static_cast<int>(ev[i].event)));
    return out;
  }

  Group group(uint64_t id, const std::vector<uint64_t>& peers, uint32_t rank) {
    Group g(core);
    pact_status_t s;
    {
      nb::gil_scoped_release unlocked;
      s = pact_group_create(core->get(), id, peers.data(), peers.size(), rank, &g.group);
    }
    check(s, "Engine.group");
    return g;
  }

  void policy(uint64_t request, bool refuse) {
    std::lock_guard<std::mutex> g(core->policy.mu);
    if (refuse) core->policy.refused.insert(request);
    else core->policy.refused.erase(request);
  }
};

}  // namespace

void Core::sweep() {
  if (engine == nullptr) return;
  for (auto it = open.begin(); it != open.end();) {
    Tracked& t = it->second;
    bool drop = false;
    if (t.released || (t.orphan && t.reported)) {
      pact_xfer_info_t i{};
      const pact_status_t q = pact_xfer_query(engine, it->first, &i);
      if (q != PACT_OK || i.final) {  // NOT_FOUND: the engine let go of a released id
        if (!t.released) (void)pact_xfer_release(engine, it->first);
        drop = true;
      }
    }
    it = drop ? open.erase(it) : std::next(it);
  }
}

void Core::close() {
  if (engine == nullptr) return;
  pact_engine_t e = std::exchange(engine, nullptr);
  {
    nb::gil_scoped_release unlocked;
    pact_engine_destroy(e);  // aborts what is open, waits until no data operation targets memory
  }
  open.clear();
}

void fail(pact_status_t status, const std::string& message) {
  nb::object cls = errorsModule().attr("error_class")(static_cast<int>(status));
  PyErr_SetObject(cls.ptr(), nb::make_tuple(static_cast<int>(status), message).ptr());
  throw nb::python_error();
}

void raise(pact_status_t status, const std::string& context) {
  std::string message = pact_last_error();  // first: nothing may overwrite it
  if (message.empty()) message = pact_status_string(status);
  fail(status, context + ": " + message);
}

void bindEngine(nb::module_& m) {
  nb::class_<Transfer>(m, "Transfer", "A transfer opened by Engine.send or Engine.expect.")
      .def_ro("id", &Transfer::id)
      .def_ro("sender", &Transfer::sender, "True on the sending side.")
      .def("query", &Transfer::query, "The transfer's TransferInfo now (no waiting).")
      .def("wait", &Transfer::wait, nb::arg("timeout") = nb::none(),
           "Blocks (GIL released) until the transfer is final; returns its TransferInfo (whose "
           "result says committed or why not). Raises pact.TimedOut after timeout seconds.")
      .def("release", &Transfer::release,
           "Ends interest (an open transfer is aborted). True: gone, its blocks are free; False: "
           "UCX still touches its blocks, wait() until final before reusing them. A Transfer "
           "dropped unreleased is released once final and seen (wait, query or poll).")
      .def("__repr__", [](const Transfer& t) {
        return std::string("<pact.Transfer ") + std::to_string(t.id) + (t.sender ? " send>" : " expect>");
      });

  nb::class_<Group>(m, "Group", "An all-to-all group (Engine.group).")
      .def("step",
           [](Group& g, uint64_t epoch, uint32_t generation, nb::handle send, nb::handle recv,
              nb::handle deadline) {
             pact_group_t grp = g.get();
             auto s = toBlocks(*g.core, send, false, "Group.step send");
             auto r = toBlocks(*g.core, recv, true, "Group.step recv");
             if (s.size() != r.size()) invalid("Group.step: send and recv differ in length");
             const uint64_t us = toDeadlineUs(deadline);
             pact_status_t st;
             {
               nb::gil_scoped_release unlocked;
               st = pact_group_step(grp, epoch, generation, s.data(), r.data(), us);
             }
             check(st, "Group.step");
             g.step = memoriesOf(send);
             for (auto& mem : memoriesOf(recv)) g.step.push_back(mem);
           },
           nb::arg("model_epoch"), nb::arg("generation"), nb::arg("send"), nb::arg("recv"),
           nb::arg("deadline") = nb::none(),
           "Starts a step: send[r] goes to rank r, recv[r] is expected from it (one block per rank).")
      .def("wait",
           [](Group& g, nb::handle timeout) {
             pact_group_t grp = g.get();
             check(sliced("Group.wait", toMs(timeout, "Group.wait"), [&](int slice) { return pact_group_wait(grp, slice); }),
                   "Group.wait");
           },
           nb::arg("timeout") = nb::none(),
           "Blocks until the step is final; raises the first chunk's failure.")
      .def("close", &Group::close)
      .def("__enter__", [](nb::handle self) { return nb::borrow(self); })
      .def("__exit__", [](Group& g, nb::args) { g.close(); });

  nb::class_<Engine>(m, "Engine")
      .def(nb::init<std::optional<std::string>, std::optional<std::string>, int, uint64_t, uint64_t, bool>(),
           nb::kw_only(), nb::arg("name") = nb::none(), nb::arg("listen") = nb::none(),
           nb::arg("port") = 0, nb::arg("model_epoch") = 0, nb::arg("credit_budget") = 0,
           nb::arg("progress_thread") = true,
           "A transfer engine: UCX on the devices of PACT_NET_DEVICES, listening on listen:port "
           "when listen is given, progressed by its own thread unless progress_thread=False.")
      .def_ro("name", &Engine::name)
      .def_ro("model_epoch", &Engine::epoch)
      .def_prop_ro("address", &Engine::address, "'ip:port' peers connect to.")
      .def_prop_ro("closed", [](const Engine& e) { return e.core->engine == nullptr; })
      .def("connect", &Engine::connect, nb::arg("address"), nb::arg("timeout") = 10.0,
           "Connects to the engine at 'ip:port'; returns the peer id.")
      .def("wait_peer", &Engine::waitPeer, nb::arg("name"), nb::arg("timeout") = 10.0,
           "Waits for a peer (connected or accepted) of that name; returns its id.")
      .def("disconnect",
           [](Engine& e, uint64_t peer, const std::string& reason) {
             pact_status_t s;
             {
               nb::gil_scoped_release unlocked;
               s = pact_peer_disconnect(e.core->get(), peer, reason.c_str());
             }
             check(s, "Engine.disconnect");
           },
           nb::arg("peer"), nb::arg("reason") = "",
           "Drops the peer as gone or restarted: its open transfers end pact.PeerStale, the peer "
           "is told; connect again for a new id.")
      .def("peer_credit",
           [](Engine& e, uint64_t peer) {
             uint64_t budget = 0, inUse = 0;
             check(pact_peer_credit(e.core->get(), peer, &budget, &inUse), "Engine.peer_credit");
             return nb::make_tuple(budget, inUse);
           },
           nb::arg("peer"), "(budget, in_use) this engine has of that receiver's credit.")
      .def("register", [](Engine& e, nb::handle obj) { return registerObject(e.core, obj); },
           nb::arg("buffer"),
           "Registers a buffer-protocol or DLPack object's memory; the Memory keeps it alive.")
      .def("set_epoch",
           [](Engine& e, uint64_t epoch) {
             nb::gil_scoped_release unlocked;
             const pact_status_t s = pact_set_epoch(e.core->get(), epoch);
             nb::gil_scoped_acquire locked;
             check(s, "Engine.set_epoch");
             e.epoch = epoch;
           },
           nb::arg("model_epoch"))
      .def("set_credit",
           [](Engine& e, uint64_t budget, uint64_t peer) {
             check(pact_set_credit(e.core->get(), peer, budget), "Engine.set_credit");
           },
           nb::arg("budget"), nb::arg("peer") = 0,
           "Credit budget in bytes: the engine's total (peer 0) or one sender's share.")
      .def("refuse", [](Engine& e, uint64_t r) { e.policy(r, true); }, nb::arg("request_id"),
           "Commit policy: transfers of this request id are rejected at commit (PACT_ERR_REJECTED "
           "for both sides) until allow(request_id).")
      .def("allow", [](Engine& e, uint64_t r) { e.policy(r, false); }, nb::arg("request_id"))
      .def("expect",
           [](Engine& e, nb::handle key, nb::handle blocks, nb::handle deadline,
              std::optional<std::string> cls) { return e.open(false, 0, key, blocks, deadline, cls, "Engine.expect"); },
           nb::arg("key"), nb::arg("blocks"), nb::kw_only(), nb::arg("deadline") = nb::none(),
           nb::arg("traffic_class") = nb::none(),
           "Expects the transfer key into blocks (receiver side).")
      .def("send",
           [](Engine& e, uint64_t peer, nb::handle key, nb::handle blocks, nb::handle deadline,
              std::optional<std::string> cls) { return e.open(true, peer, key, blocks, deadline, cls, "Engine.send"); },
           nb::arg("peer"), nb::arg("key"), nb::arg("blocks"), nb::kw_only(),
           nb::arg("deadline") = nb::none(), nb::arg("traffic_class") = nb::none(),
           "Offers the transfer key to peer and sends blocks once the receiver advertised it.")
      .def("expect_batch",
           [](Engine& e, nb::handle items, nb::handle deadline, std::optional<std::string> cls) {
             return e.openBatch(false, items, deadline, cls, "Engine.expect_batch");
           },
           nb::arg("items"), nb::kw_only(), nb::arg("deadline") = nb::none(),
           nb::arg("traffic_class") = nb::none(), "expect() for each (key, blocks); all or nothing.")
      .def("send_batch",
           [](Engine& e, nb::handle items, nb::handle deadline, std::optional<std::string> cls) {
             return e.openBatch(true, items, deadline, cls, "Engine.send_batch");
           },
           nb::arg("items"), nb::kw_only(), nb::arg("deadline") = nb::none(),
           nb::arg("traffic_class") = nb::none(), "send() for each (peer, key, blocks); all or nothing.")
      .def("poll", &Engine::poll, nb::arg("timeout") = 0,
           "TransferInfo of every transfer opened here that became final and was not seen final "
           "(by wait, query or an earlier poll); waits up to timeout seconds for one. A transfer "
           "whose Transfer object was dropped is released once poll reported it.")
      .def("progress", &Engine::progress, nb::arg("timeout") = 0,
           "Progresses an engine without a progress thread.")
      .def("stats", &Engine::stats, "The engine's counters, the commit policy's and the binding's.")
      .def("trace", &Engine::trace, nb::arg("max") = 4096,
           "Trace events recorded since the last call (a bounded ring; PACT_TRACE_EVENTS).")
      .def("group", &Engine::group, nb::arg("group_id"), nb::arg("peers"), nb::arg("my_rank"),
           "An all-to-all group: peers[r] is the connection to rank r.")
      .def("close", [](Engine& e) { e.core->close(); },
           "Aborts open transfers, waits until no data operation targets memory, frees everything.")
      .def("__enter__", [](nb::handle self) { return nb::borrow(self); })
      .def("__exit__", [](Engine& e, nb::args) { e.core->close(); })
      .def("__repr__", [](const Engine& e) {
        return "<pact.Engine " + e.name + (e.core->engine == nullptr ? " closed>" : ">");
      });
}

}  // namespace pact::py
