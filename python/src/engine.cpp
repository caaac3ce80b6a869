// pact.Engine over the C API (Transfer and Group: transfer.h). Every call into the engine releases
// the GIL (the engine lock may be held by the progress thread); blocking waits run in slices so
// that Ctrl-C (a pending signal) interrupts them. No Python code ever runs under the engine lock:
// the commit hook is C++ (CommitPolicy) and results reach Python by polling (docs/python.md).
#include <nanobind/stl/optional.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <chrono>
#include <cstring>
#include <optional>

#include <unistd.h>

#include "telemetry/counters.h"
#include "transfer.h"

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
    std::vector<std::shared_ptr<Memory>> keep;
    auto bs = toBlocks(*core, blocks, !sender, what, &keep);
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
    core->open[x].memories = std::move(keep);
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
          (void)x.release();  // a send already moving stays tracked until final (Core::settle)
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
    // pact_stats_t is the engine catalog, field for counter, in order (src/api/pact.cpp checks
    // it): every counter by its catalog name, none copied by hand.
    static_assert(sizeof(pact_stats_t) == pact::telemetry::kEngineCounters * sizeof(uint64_t));
    uint64_t values[pact::telemetry::kEngineCounters];
    std::memcpy(values, &s, sizeof values);
    nb::dict d;
    const auto& counters = pact::telemetry::kEngineCatalog.counters;
    for (size_t i = 0; i < counters.size(); ++i) d[counters[i].name] = values[i];
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
    const PyTypes& t = pyTypes();
    std::vector<nb::object> out;
    for (size_t i = 0; i < n; ++i)
      out.push_back(nb::borrow(t.traceEvent)(ev[i].time_ns, fromKey(ev[i].key), ev[i].peer,
                                             ev[i].role == 0 ? "receiver" : "sender",
                                             t.stateOf(static_cast<int>(ev[i].state)),
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

bool Core::mayDrop(pact_xfer_t id, const Tracked& t) {
  if (!t.released && !(t.orphan && t.reported)) return false;
  pact_xfer_info_t i{};
  const pact_status_t q = pact_xfer_query(engine, id, &i);
  if (q == PACT_OK && !i.final) return false;  // NOT_FOUND: the engine let go of a released id
  if (!t.released) (void)pact_xfer_release(engine, id);
  return true;
}

void Core::settle(pact_xfer_t id) {
  if (auto it = open.find(id); engine != nullptr && it != open.end() && mayDrop(id, it->second))
    open.erase(it);
}

void Core::sweep() {
  if (engine == nullptr) return;
  std::erase_if(open, [&](auto& kv) { return mayDrop(kv.first, kv.second); });
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
  bindTransfer(m);
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
