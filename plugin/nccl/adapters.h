// Adapters shared by several shim versions: the profiler-handle variants of isend/irecv (v10+),
// which start NCCL's profiler events (profiler.h), and the context-taking listen/connect/init of
// v11+. Each forwards to the version-independent entry points.
#pragma once

#include "plugin/nccl/core.h"
#include "plugin/nccl/profiler.h"

namespace pact::plugin {

inline ncclResult_t isendP(void* comm, void* data, size_t size, int tag, void* mh, void* phandle,
                           void** req) {
  const ncclResult_t r = isend(comm, data, size, tag, mh, req);
  if (r == ncclSuccess && phandle != nullptr) profiler::start(*req, comm, true, 1, &phandle, &size);
  return r;
}

inline ncclResult_t irecvP(void* comm, int n, void** data, size_t* sizes, int* tags, void** mhs,
                           void** phandles, void** req) {
  const ncclResult_t r = irecv(comm, n, data, sizes, tags, mhs, req);
  if (r == ncclSuccess && phandles != nullptr) profiler::start(*req, comm, false, n, phandles, sizes);
  return r;
}

// v8..v10: no class on listen; v8/v9: none on connect either (DEFAULT).
inline ncclResult_t listenNoClass(int dev, void* handle, void** listenComm) {
  return listen(-1, dev, handle, listenComm);
}

inline ncclResult_t connectNoClass(int dev, void* handle, void** sendComm,
                                   ncclNetDeviceHandle_v7_t** devComm) {
  return connect(-1, dev, handle, sendComm, devComm);
}

// v11+: the class comes with the per-communicator context from init.
inline ncclResult_t listenCtx(void* ctx, int dev, void* handle, void** listenComm) {
  return listen(ctxTrafficClass(ctx), dev, handle, listenComm);
}

inline ncclResult_t connectCtx(void* ctx, int dev, void* handle, void** sendComm,
                               ncclNetDeviceHandle_v7_t** devComm) {
  return connect(ctxTrafficClass(ctx), dev, handle, sendComm, devComm);
}

// makeVDevice (v9+): the props struct differs only in its member capacity.
template <typename VProps>
ncclResult_t makeVDeviceV(int* d, VProps* props) {
  if (props == nullptr) return ncclInvalidArgument;
  const int cap = static_cast<int>(sizeof(props->devs) / sizeof(props->devs[0]));
  if (props->ndevs < 1 || props->ndevs > cap) return ncclInvalidArgument;
  return makeVDevice(d, props->ndevs, props->devs);
}

template <typename Config>
ncclResult_t initCtx(void** ctx, uint64_t /*commId*/, Config* config, ncclDebugLogger_t logger,
                     ncclProfilerCallback_t prof) {
  if (ctx == nullptr) return ncclInvalidArgument;
  profiler::set(prof);
  return init(ctx, config ? config->trafficClass : -1, logger);
}

}  // namespace pact::plugin
