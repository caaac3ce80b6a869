#include "plugin/nccl/profiler.h"

#include <atomic>

#include "pact/nccl_ext.h"

namespace pact::plugin::profiler {
namespace {

std::atomic<ncclProfilerCallback_t> g_callback{nullptr};

pact_net_event_t event(const void* comm, bool send, int buffer, uint64_t bytes) {
  pact_net_event_t e{};
  e.struct_size = sizeof e;
  e.kind = send ? PACT_NET_EVENT_SEND : PACT_NET_EVENT_RECV;
  e.comm = reinterpret_cast<uintptr_t>(comm);
  e.bytes = bytes;
  e.buffer = buffer;
  return e;
}

}  // namespace

void set(ncclProfilerCallback_t cb) {
  if (cb != nullptr) g_callback.store(cb, std::memory_order_release);
}

bool active() { return g_callback.load(std::memory_order_acquire) != nullptr; }

void start(void* request, void* comm, bool send, int n, void* const* phandles, const size_t* sizes) {
  const ncclProfilerCallback_t cb = g_callback.load(std::memory_order_acquire);
  if (cb == nullptr || request == nullptr || phandles == nullptr) return;
  auto* r = static_cast<net::Request*>(request);
  for (int i = 0; i < n && i < net::kMaxBuffers; ++i) {
    if (phandles[i] == nullptr) continue;
    r->face.handle[static_cast<size_t>(i)] = nullptr;
    pact_net_event_t e = event(comm, send, i, sizes[i]);
    (void)cb(&r->face.handle[static_cast<size_t>(i)], NCCL_PROFILER_NET_EVENT_START, phandles[i],
             PACT_NET_PROFILER_ID, &e);
    r->face.open = static_cast<uint8_t>(r->face.open | (1u << i));
  }
}

void stop(const net::Ending& ending, const int* sizes, ncclResult_t result) {
  const ncclProfilerCallback_t cb = g_callback.load(std::memory_order_acquire);
  if (cb == nullptr || ending.face.open == 0) return;
  net::FaceRecord events = ending.face;  // the callback writes through the handle slots
  for (int i = 0; i < net::kMaxBuffers; ++i) {
    if ((events.open & (1u << i)) == 0) continue;
    pact_net_event_t e = event(ending.comm, ending.send, i,
                               sizes != nullptr && result == ncclSuccess ? static_cast<uint64_t>(sizes[i]) : 0);
    e.result = result;
    e.pieces = ending.pieces;
    e.lanes = ending.lanes();
    (void)cb(&events.handle[static_cast<size_t>(i)], NCCL_PROFILER_NET_EVENT_UPDATE_AND_STOP, nullptr,
             PACT_NET_PROFILER_ID, &e);
  }
}

}  // namespace pact::plugin::profiler
