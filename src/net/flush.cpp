// The GPU flush of receive comms (iflush, PACT_GPU_FLUSH; docs/gpu.md): the driver's
// GPUDirect RDMA flush where the device offers it, otherwise a 1-byte loopback read per buffer.
#include "net/comm.h"
#include "net/parts.h"

namespace pact::net {

namespace {
void onFlushReadDone(void* /*request*/, ucs_status_t st, void* user) {
  auto* p = static_cast<Part*>(user);
  completePart(p, st, 0);
}
}  // namespace

Status RecvComm::iflush(int n, void* const* data, const int* sizes, MemHandle* const* mhs,
                        GpuFlush mode, Request** out) {
  *out = nullptr;
  if (isError(error_)) return error_;
  if (mode == GpuFlush::kNever || mhs == nullptr) return Status::kOk;
  // The buffers that hold bytes in CUDA memory: only those need the GPU to see the NIC's writes.
  std::array<ucx::Region*, kMaxBuffers> regions{};
  int count = 0;
  for (int i = 0; i < n && i < kMaxBuffers; ++i) {
    const MemHandle* mh = mhs[i];
    if (mh == nullptr || mh->regions.empty() || (sizes != nullptr && sizes[i] <= 0) ||
        mh->regions[0]->type != ucx::MemoryType::kCuda)
      continue;
    regions[static_cast<size_t>(i)] = mh->regions[0].get();
    ++count;
  }
  // auto: only a NIC writing GPU memory directly (GPUDirect RDMA) can leave writes the GPU does
  // not see yet; tcp and shared memory land CUDA data through the driver's copies.
  if (count == 0 || (mode == GpuFlush::kAuto && !dev().info().rdma)) return Status::kOk;
  const cuda::Driver& driver = dev().driver();
  int first = 0;
  while (regions[static_cast<size_t>(first)] == nullptr) ++first;
  auto facts = driver.device(regions[static_cast<size_t>(first)]->device);
  if (facts.ok() && facts->gdrRdma && facts->hostFlush() && driver.canFlush()) {
    // One call covers every earlier write into memory of the owning context.
    if (Status s = driver.flushRdmaWrites(data[first]); s != Status::kOk) {
      fail(s, telemetry::ErrorKind::kTransport, "the CUDA driver's GPUDirect RDMA flush failed");
      return s;
    }
    counters_.add(telemetry::kGpuFlushes);
    return Status::kOk;
  }
  return flushByRead(n, data, regions, count, out);
}

// A 1-byte read of each buffer over a loopback endpoint: the read completes only after the
// NIC's earlier writes to the buffer have (PCIe ordering), as NCCL's own IB transport flushes.
Status RecvComm::flushByRead(int n, void* const* data,
                             const std::array<ucx::Region*, kMaxBuffers>& regions, int count,
                             Request** out) {
  if (!flushEp_ || flushEp_->failed()) {
    auto ep = dev().endpoint(0, kFlushLane, dev().addresses()[0]);
    if (!ep.ok()) {
      fail(ep.status(), telemetry::ErrorKind::kTransport, "the loopback endpoint for GPU flush reads: " + ep.error().message);
      return ep.status();
    }
    flushEp_ = std::move(ep.value());
  }
  Request* r = acquire(false, count, static_cast<size_t>(count), true);
  r->flush = true;
  size_t next = 0;
  for (int i = 0; i < n && i < kMaxBuffers; ++i) {
    ucx::Region* region = regions[static_cast<size_t>(i)];
    if (region == nullptr) continue;
    Part* p = &r->parts[next++];
    p->data = data[i];  // deregMr of the buffer waits for the read (Hub::drainRange)
    p->size = 1;
    p->done = false;
    ++r->pending;
    auto rkey = region->flushKey(flushEp_->ep.get(), dev().rail(0).cache.get());
    if (!rkey.ok()) {
      completePart(p, UCS_ERR_INVALID_PARAM, 0);
      continue;
    }
    ucp_request_param_t param = sendParam(onFlushReadDone, p);
    track(p, flushEp_->ep.get(&flushWord_, 1, reinterpret_cast<uint64_t>(data[i]), rkey.value(), param));
    counters_.add(telemetry::kGpuFlushReads);
  }
  *out = r;
  return Status::kOk;
}

}  // namespace pact::net
