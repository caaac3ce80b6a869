// The pact Python binding's shared parts: the engine core every Python object holds, the one
// place a C status becomes a pact.Error, and the registered-memory types (docs/python.md).
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "pact/pact.h"

namespace pact::py {

namespace nb = nanobind;

// Raises the pact.Error subclass of status with the C API's message for this thread's last
// failing call (read before anything else can overwrite it). Never returns.
[[noreturn]] void raise(pact_status_t status, const std::string& context);
// Raises unless status is PACT_OK (or PACT_IN_PROGRESS when allowed).
inline void check(pact_status_t status, const char* context, bool inProgressOk = false) {
  if (status == PACT_OK || (inProgressOk && status == PACT_IN_PROGRESS)) return;
  raise(status, context);
}
// The pact.Error subclass of status with the binding's own message (no C call failed).
[[noreturn]] void fail(pact_status_t status, const std::string& message);
[[noreturn]] inline void invalid(const std::string& message) { fail(PACT_ERR_INVALID_ARG, message); }

// The commit policy, evaluated in C inside the engine's commit hook (engine lock held, on the
// progress thread, no GIL): request ids the application refused (preempted or abandoned
// requests) are rejected; everything else the engine hands over is committed.
struct CommitPolicy {
  std::mutex mu;
  std::unordered_set<uint64_t> refused;
  uint64_t committed = 0;
  uint64_t rejected = 0;
};

struct Memory;

// A transfer opened through Python, tracked until it is released: the registrations of its blocks
// stay alive (a dropped Transfer never frees memory UCX still writes, and a registration is
// deregistered only once no transfer uses it).
struct Tracked {
  std::vector<std::shared_ptr<Memory>> memories;
  bool reported = false;  // Engine.poll returned it final
  bool orphan = false;    // its Transfer object is gone: released once final and reported
  bool released = false;  // released while UCX still touched its blocks: dropped once final
};

// What every Python object of one engine shares: the C handle (null once closed), the policy and
// the tracked transfers. Touched only with the GIL held.
struct Core {
  pact_engine_t engine = nullptr;
  CommitPolicy policy;
  std::unordered_map<pact_xfer_t, Tracked> open;
  uint64_t traceCursor = 0;

  pact_engine_t get() const {
    if (engine == nullptr) invalid("the engine is closed");
    return engine;
  }
  // Releases what may go: orphans final and reported, released transfers now final; settle
  // looks at one transfer, sweep at all (Engine.poll).
  void settle(pact_xfer_t id);
  void sweep();
  void close();  // destroys the engine (bounded; transfers still open are aborted)
  ~Core() { close(); }

 private:
  bool mayDrop(pact_xfer_t id, const Tracked& t);  // releases t's transfer when it may go
};
using CoreRef = std::shared_ptr<Core>;

// A registration: the C handle and a reference to the Python object whose memory it covers, so
// the memory outlives the registration (a bytearray with an exported buffer cannot be resized).
struct Memory {
  CoreRef core;
  pact_mr_t mr = nullptr;
  Py_buffer buffer{};  // held while registered (buffer protocol): the exporter cannot resize
  bool holdsBuffer = false;
  nb::object owner;    // DLPack: the ndarray view holding the producer's capsule
  uintptr_t addr = 0;
  size_t nbytes = 0;
  bool readonly = false;
  bool device = false;  // CUDA memory
  int deviceId = -1;

  void close();
  void drop();  // lets go of the Python memory (GIL held)
  ~Memory();
};

// A range of a registration: what transfers and group steps take.
struct Block {
  std::shared_ptr<Memory> memory;
  uint64_t offset = 0;
  uint64_t length = 0;
};

// Engine.register: the object's memory (buffer protocol or DLPack), registered.
std::shared_ptr<Memory> registerObject(const CoreRef& core, nb::handle obj);
// The C blocks of a Python sequence of Block or Memory objects (a Memory is all of it), checked:
// every registration of this engine and still open, and writable when receiving into it.
std::vector<pact_block_t> toBlocks(const Core& core, nb::handle blocks, bool receiving,
                                   const char* what, std::vector<std::shared_ptr<Memory>>* keep);
// A pact_key_t from (request_id, transfer_id, model_epoch[, generation]) or a pact.Key.
pact_key_t toKey(nb::handle key);
nb::object fromKey(const pact_key_t& k);
// The pure-Python types results are built of (pact/__init__.py), looked up once: importing
// `pact` and calling the State enum for every TransferInfo cost 0.7 of query()'s 2.8 us.
struct PyTypes {
  nb::handle key, transferInfo, traceEvent, state;
  std::vector<nb::handle> states;  // State's members by value
  nb::object stateOf(int value) const;  // State(value): ValueError for a value it lacks
};
const PyTypes& pyTypes();
// Seconds (None: forever, as -1) to milliseconds; deadlines in seconds (None: 0) to microseconds.
int toMs(nb::handle seconds, const char* what);
uint64_t toDeadlineUs(nb::handle seconds);

void bindMemory(nb::module_& m);
void bindEngine(nb::module_& m);

}  // namespace pact::py
