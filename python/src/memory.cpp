// Registered memory for Python: anything with the buffer protocol or DLPack (bytearray, numpy
// arrays, torch CPU tensors; CUDA tensors through DLPack, which need the GPU path), its blocks,
// and the conversions of blocks, keys and times every call shares.
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>

#include <cmath>
#include <limits>

#include "binding.h"

namespace pact::py {

void Memory::close() {
  if (mr == nullptr) return;
  if (core->engine != nullptr) {
    pact_status_t s;
    {
      nb::gil_scoped_release unlocked;
      s = pact_mem_deregister(core->engine, mr);
    }
    check(s, "Memory.close");
  }
  mr = nullptr;  // a closed engine released it already
  drop();
}

void Memory::drop() {
  if (holdsBuffer) PyBuffer_Release(&buffer);
  holdsBuffer = false;
  owner = nb::object();
}

Memory::~Memory() {
  if (mr != nullptr && core->engine != nullptr) (void)pact_mem_deregister(core->engine, mr);
  drop();
}

namespace {

bool contiguous(const nb::ndarray<nb::ro>& a) {
  int64_t expected = 1;
  for (size_t i = a.ndim(); i-- > 0;) {
    if (a.shape(i) != 1 && a.stride(i) != expected) return false;
    expected *= static_cast<int64_t>(a.shape(i));
  }
  return true;
}

}  // namespace

// Engine.register: the object's memory, registered with the engine.
std::shared_ptr<Memory> registerObject(const CoreRef& core, nb::handle obj) {
  pact_engine_t engine = core->get();
  auto mem = std::make_shared<Memory>();
  mem->core = core;
  void* data = nullptr;
  if (PyObject_CheckBuffer(obj.ptr())) {
    // Held until close: a bytearray or array with an exported buffer refuses to resize.
    if (PyObject_GetBuffer(obj.ptr(), &mem->buffer, PyBUF_WRITABLE | PyBUF_ND | PyBUF_STRIDES) != 0) {
      PyErr_Clear();
      if (PyObject_GetBuffer(obj.ptr(), &mem->buffer, PyBUF_ND | PyBUF_STRIDES) != 0) {
        PyErr_Clear();
        invalid(std::string("register: a ") + nb::type_name(obj.type()).c_str() +
                " refused its buffer");
      }
      mem->readonly = true;
    }
    mem->holdsBuffer = true;
    if (PyBuffer_IsContiguous(&mem->buffer, 'A') == 0)
      invalid("register: the buffer is not contiguous (register a contiguous copy)");
    data = mem->buffer.buf;
    mem->nbytes = static_cast<size_t>(mem->buffer.len);
  } else {
    nb::ndarray<nb::ro> view;
    if (nb::ndarray<> rw; nb::try_cast(obj, rw)) view = nb::ndarray<nb::ro>(rw);
    else if (nb::try_cast(obj, view)) mem->readonly = true;
    else
      invalid(std::string("register: a ") + nb::type_name(obj.type()).c_str() +
              " has neither the buffer protocol nor DLPack (pass a bytearray, a numpy array, a "
              "memoryview or a tensor)");
    if (!contiguous(view)) invalid("register: the array is not contiguous (register a contiguous copy)");
    data = const_cast<void*>(view.data());
    mem->nbytes = view.nbytes();
    const auto type = view.device_type();
    if (type == nb::device::cuda::value) {
      mem->device = true;
      mem->deviceId = view.device_id();
    } else if (type != nb::device::cpu::value) {
      invalid("register: memory on DLPack device type " + std::to_string(type) +
              " (host memory and CUDA are supported)");
    }
    mem->owner = nb::cast(view);
  }
  mem->addr = reinterpret_cast<uintptr_t>(data);
  if (mem->nbytes == 0) invalid("register: the buffer is empty");
  pact_mem_desc_t desc;
  pact_mem_desc_init(&desc);
  desc.addr = data;
  desc.length = mem->nbytes;
  desc.type = mem->device ? PACT_MEM_CUDA : PACT_MEM_HOST;
  desc.device = mem->deviceId;
  pact_status_t s;
  {
    nb::gil_scoped_release unlocked;
    s = pact_mem_register_ex(engine, &desc, &mem->mr);
  }
  check(s, "register");
  return mem;
}

std::vector<pact_block_t> toBlocks(const Core& core, nb::handle blocks, bool receiving,
                                   const char* what, std::vector<std::shared_ptr<Memory>>* keep) {
  if (nb::isinstance<Block>(blocks) || nb::isinstance<Memory>(blocks) ||
      !nb::isinstance<nb::sequence>(blocks))
    invalid(std::string(what) + ": blocks must be a list of Block or Memory objects");
  std::vector<pact_block_t> out;
  size_t i = 0;
  for (nb::handle item : blocks) {
    std::shared_ptr<Memory> mem;
    pact_block_t b{};
    if (Block* blk; nb::try_cast(item, blk) && blk != nullptr) {
      mem = blk->memory;
      b.offset = blk->offset;
      b.length = blk->length;
    } else if (nb::try_cast(item, mem) && mem != nullptr) {
      b.length = mem->nbytes;
    } else {
      invalid(std::string(what) + ": blocks[" + std::to_string(i) + "] is a " +
              nb::type_name(item.type()).c_str() + ", not a Block or Memory");
    }
    if (mem->core.get() != &core)
      invalid(std::string(what) + ": blocks[" + std::to_string(i) +
              "] is memory of another engine");
    if (mem->mr == nullptr)
      invalid(std::string(what) + ": blocks[" + std::to_string(i) + "] is memory that was closed");
    if (receiving && mem->readonly)
      invalid(std::string(what) + ": blocks[" + std::to_string(i) +
              "] is read-only memory (bytes, a read-only array): it cannot receive");
    b.mr = mem->mr;
    out.push_back(b);
    keep->push_back(std::move(mem));
    ++i;
  }
  if (out.empty()) invalid(std::string(what) + ": no blocks");
  return out;
}

pact_key_t toKey(nb::handle key) {
  if (!nb::isinstance<nb::sequence>(key) || nb::isinstance<nb::str>(key))
    invalid("key: expected pact.Key or (request_id, transfer_id, model_epoch[, generation])");
  const size_t n = nb::len(key);
  if (n != 3 && n != 4)
    invalid("key: " + std::to_string(n) + " fields (request_id, transfer_id, model_epoch[, generation])");
  pact_key_t k{};
  uint64_t* fields[] = {&k.request_id, &k.transfer_id, &k.model_epoch};
  const char* names[] = {"request_id", "transfer_id", "model_epoch", "generation"};
  for (size_t i = 0; i < n; ++i) {
    nb::handle v = key[i];
    uint64_t x = 0;
    if (!nb::isinstance<nb::int_>(v) || !nb::try_cast(v, x))
      invalid(std::string("key: ") + names[i] + " must be an int in [0, 2**64)");
    if (i < 3) {
      *fields[i] = x;
    } else {
      if (x > std::numeric_limits<uint32_t>::max()) invalid("key: generation must fit 32 bits");
      k.generation = static_cast<uint32_t>(x);
    }
  }
  return k;
}

nb::object fromKey(const pact_key_t& k) {
  return nb::borrow(pyTypes().key)(k.request_id, k.transfer_id, k.model_epoch, k.generation);
}

const PyTypes& pyTypes() {
  // Built on first use (pact/__init__.py has imported _pact by then) and never freed: the
  // references must outlive every call, interpreter shutdown included.
  static const PyTypes* types = [] {
    nb::object pact = nb::module_::import_("pact");
    auto* t = new PyTypes;
    t->key = nb::object(pact.attr("Key")).release();
    t->transferInfo = nb::object(pact.attr("TransferInfo")).release();
    t->traceEvent = nb::object(pact.attr("TraceEvent")).release();
    t->state = nb::object(pact.attr("State")).release();
    for (nb::handle m : nb::borrow(t->state)) {
      const size_t v = nb::cast<size_t>(m.attr("value"));
      if (t->states.size() <= v) t->states.resize(v + 1);
      t->states[v] = m.inc_ref();
    }
    return t;
  }();
  return *types;
}

nb::object PyTypes::stateOf(int value) const {
  if (value >= 0 && static_cast<size_t>(value) < states.size() && states[static_cast<size_t>(value)])
    return nb::borrow(states[static_cast<size_t>(value)]);
  return nb::borrow(state)(value);
}

namespace {
double seconds(nb::handle v, const char* what) {
  double s;
  if (nb::isinstance<nb::bool_>(v) || !nb::try_cast(v, s) || std::isnan(s) || s < 0)
    invalid(std::string(what) + ": seconds must be a number >= 0 or None");
  return s;
}
}  // namespace

int toMs(nb::handle v, const char* what) {
  if (v.is_none()) return -1;
  const double ms = std::ceil(seconds(v, what) * 1e3);
  return ms >= std::numeric_limits<int>::max() ? -1 : static_cast<int>(ms);
}

uint64_t toDeadlineUs(nb::handle v) {
  if (v.is_none()) return 0;
  const double us = std::ceil(seconds(v, "deadline") * 1e6);
  if (us < 1) invalid("deadline: must be > 0 seconds (None: the class default)");
  return us >= 1.8e19 ? std::numeric_limits<uint64_t>::max() : static_cast<uint64_t>(us);
}

void bindMemory(nb::module_& m) {
  nb::class_<Memory>(m, "Memory", "Memory registered with an Engine (Engine.register).")
      .def_prop_ro("nbytes", [](const Memory& mem) { return mem.nbytes; })
      .def_prop_ro("address", [](const Memory& mem) { return mem.addr; })
      .def_prop_ro("readonly", [](const Memory& mem) { return mem.readonly; },
                   "True for read-only buffers: they can be sent, never received into.")
      .def_prop_ro("device", [](const Memory& mem) { return mem.device ? mem.deviceId : -1; },
                   "CUDA device ordinal, -1 for host memory.")
      .def_prop_ro("closed", [](const Memory& mem) { return mem.mr == nullptr; })
      .def("block",
           [](const std::shared_ptr<Memory>& mem, int64_t offset, nb::object length) {
             if (mem->mr == nullptr) invalid("Memory.block: the memory was closed");
             if (offset < 0) invalid("Memory.block: offset " + std::to_string(offset) + " < 0");
             int64_t len = length.is_none() ? static_cast<int64_t>(mem->nbytes) - offset
                                            : nb::cast<int64_t>(length);
             if (len <= 0) invalid("Memory.block: length must be > 0");
             if (static_cast<uint64_t>(offset) + static_cast<uint64_t>(len) > mem->nbytes)
               fail(PACT_ERR_OUT_OF_RANGE, "Memory.block: [" + std::to_string(offset) + ", " +
                                              std::to_string(offset + len) + ") lies outside the " +
                                              std::to_string(mem->nbytes) + " registered bytes");
             return Block{mem, static_cast<uint64_t>(offset), static_cast<uint64_t>(len)};
           },
           nb::arg("offset") = 0, nb::arg("length") = nb::none(),
           "The range [offset, offset + length) of this registration (length None: to the end).")
      .def("close", &Memory::close,
           "Deregisters; raises pact.Busy while an unreleased transfer uses it.")
      .def("__enter__", [](nb::handle self) { return nb::borrow(self); })
      .def("__exit__", [](Memory& mem, nb::args) { mem.close(); })
      .def("__repr__", [](const Memory& mem) {
        return std::string("<pact.Memory ") + std::to_string(mem.nbytes) + " bytes" +
               (mem.device ? " cuda:" + std::to_string(mem.deviceId) : std::string(" host")) +
               (mem.readonly ? " read-only" : "") + (mem.mr == nullptr ? " closed>" : ">");
      });
  nb::class_<Block>(m, "Block", "A range of registered memory: Memory.block(offset, length).")
      .def_prop_ro("memory", [](const Block& b) { return b.memory; })
      .def_prop_ro("offset", [](const Block& b) { return b.offset; })
      .def_prop_ro("length", [](const Block& b) { return b.length; })
      .def("__repr__", [](const Block& b) {
        return "<pact.Block offset=" + std::to_string(b.offset) +
               " length=" + std::to_string(b.length) + ">";
      });
}

}  // namespace pact::py
