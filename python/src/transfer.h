// pact.Transfer and pact.Group: what Engine.send/expect and Engine.group return, and the sliced
// blocking wait every waiting call shares (docs/python.md).
#pragma once

#include <algorithm>
#include <chrono>
#include <utility>

#include "binding.h"

namespace pact::py {

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
nb::object info(Core& core, pact_xfer_t id, const pact_xfer_info_t& i);

struct Transfer {
  CoreRef core;
  pact_xfer_t id = 0;
  bool sender = false;

  Transfer(CoreRef c, pact_xfer_t x, bool s) : core(std::move(c)), id(x), sender(s) {}
  Transfer(Transfer&& o) noexcept : core(std::move(o.core)), id(std::exchange(o.id, 0)), sender(o.sender) {}
  Transfer(const Transfer&) = delete;
  Transfer& operator=(const Transfer&) = delete;
  // Dropped: the transfer goes on, tracked, and is released once final and seen (wait, query
  // or poll): now if it was, else by the poll that reports it.
  ~Transfer() {
    if (id == 0 || !core || core->engine == nullptr) return;
    if (auto it = core->open.find(id); it != core->open.end()) it->second.orphan = true;
    core->settle(id);
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

void bindTransfer(nb::module_& m);

}  // namespace pact::py
