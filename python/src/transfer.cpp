// pact.Transfer and pact.Group over the C API (transfer.h).
#include "transfer.h"

#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>  // __repr__ returns std::string (without it: a TypeError)

#include <string>

namespace pact::py {

nb::object info(Core& core, pact_xfer_t id, const pact_xfer_info_t& i) {
  if (auto it = core.open.find(id); i.final && it != core.open.end()) it->second.reported = true;
  const PyTypes& t = pyTypes();
  return nb::borrow(t.transferInfo)(id, t.stateOf(static_cast<int>(i.state)), static_cast<int>(i.result),
                                    i.final != 0, i.retries, fromKey(i.key), i.peer, i.bytes);
}

namespace {

// "<pact.Transfer 3 send key=(42, 0, 7, 0) COMMITTED final>", or "... released>" once it is gone.
std::string reprOf(const Transfer& t) {
  std::string s = "<pact.Transfer " + std::to_string(t.id) + (t.sender ? " send" : " expect");
  pact_xfer_info_t i{};
  if (t.id == 0 || !t.core || t.core->engine == nullptr || pact_xfer_query(t.core->engine, t.id, &i) != PACT_OK)
    return s + " released>";
  s += " key=(" + std::to_string(i.key.request_id) + ", " + std::to_string(i.key.transfer_id) + ", " +
       std::to_string(i.key.model_epoch) + ", " + std::to_string(i.key.generation) + ") " +
       nb::cast<std::string>(pyTypes().stateOf(static_cast<int>(i.state)).attr("name"));  // pact.State's
  if (i.final) s += std::string(" final, ") + pact_status_string(i.result);
  return s + ">";
}

}  // namespace

void bindTransfer(nb::module_& m) {
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
      .def("__repr__", &reprOf);

  nb::class_<Group>(m, "Group", "An all-to-all group (Engine.group).")
      .def("step",
           [](Group& g, uint64_t epoch, uint32_t generation, nb::handle send, nb::handle recv,
              nb::handle deadline) {
             pact_group_t grp = g.get();
             std::vector<std::shared_ptr<Memory>> keep;
             auto s = toBlocks(*g.core, send, false, "Group.step send", &keep);
             auto r = toBlocks(*g.core, recv, true, "Group.step recv", &keep);
             if (s.size() != r.size()) invalid("Group.step: send and recv differ in length");
             const uint64_t us = toDeadlineUs(deadline);
             pact_status_t st;
             {
               nb::gil_scoped_release unlocked;
               st = pact_group_step(grp, epoch, generation, s.data(), r.data(), us);
             }
             check(st, "Group.step");
             g.step = std::move(keep);
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
      .def("__repr__",
           [](const Group& g) {
             return std::string("<pact.Group") + (g.group == nullptr ? " closed>" : ">");
           })
      .def("__enter__", [](nb::handle self) { return nb::borrow(self); })
      .def("__exit__", [](Group& g, nb::args) { g.close(); });
}

}  // namespace pact::py
