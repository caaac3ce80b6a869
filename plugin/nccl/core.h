// The version-independent side of the NCCL shims: one function per net API entry point, in
// NCCL's own C types, each running inside guard() so no exception crosses the C ABI. Where a
// signature is the same in every version the shims point straight at these.
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <new>

#include "abi/net_common.h"
#include "common/log.h"
#include "common/status.h"
#include "net/net.h"

namespace pact::plugin {

ncclResult_t toNccl(Status s);

template <typename F>
ncclResult_t guard(const char* fn, F&& f) noexcept {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    PACT_ERROR("%s: out of memory", fn);
    return ncclSystemError;
  } catch (const std::exception& e) {
    PACT_ERROR("%s: internal error: %s", fn, e.what());
    return ncclInternalError;
  } catch (...) {
    PACT_ERROR("%s: internal error", fn);
    return ncclInternalError;
  }
}

// ctx: non-null for v11+ (a fresh per-communicator context is returned), null for v8..v10
// (one process-wide initialisation, reference-counted). classes false: the ABI passes NCCL no
// traffic class (v8, v9), so init says once that PACT_TC_<n> variables do nothing.
ncclResult_t init(void** ctx, int trafficClass, ncclDebugLogger_t logger, bool classes = true);
// The process-wide core between the first init and the last finalize, else null.
std::shared_ptr<net::Net> activeNet();
ncclResult_t finalize(void* ctx);
ncclResult_t devices(int* ndev);
ncclResult_t properties(int dev, net::Properties* out);
ncclResult_t makeVDevice(int* d, int ndevs, const int* devs);
// Interned copy of a string that stays valid for the life of the loaded library.
char* intern(const std::string& s);
// trafficClass: NCCL's class of the communicator (-1 = unset), from init's config (v11+) or
// connect's (v10); v8/v9 have none.
ncclResult_t listen(int trafficClass, int dev, void* handle, void** listenComm);
ncclResult_t connect(int trafficClass, int dev, void* handle, void** sendComm,
                     ncclNetDeviceHandle_v7_t** devComm);
// The traffic class a v11+ context was created with.
int ctxTrafficClass(void* ctx);
ncclResult_t accept(void* listenComm, void** recvComm, ncclNetDeviceHandle_v7_t** devComm);
ncclResult_t regMr(void* comm, void* data, size_t size, int type, void** mhandle);
ncclResult_t regMrDmaBuf(void* comm, void* data, size_t size, int type, uint64_t offset, int fd,
                         void** mhandle);
ncclResult_t deregMr(void* comm, void* mhandle);
ncclResult_t isend(void* sendComm, void* data, size_t size, int tag, void* mhandle, void** request);
ncclResult_t irecv(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles,
                   void** request);
ncclResult_t iflush(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request);
ncclResult_t test(void* request, int* done, int* sizes);
ncclResult_t closeSend(void* sendComm);
ncclResult_t closeRecv(void* recvComm);
ncclResult_t closeListen(void* listenComm);

// v8 carries int sizes: shared by its isend/irecv adapters.
ncclResult_t isendInt(void* sendComm, void* data, int size, int tag, void* mhandle, void** request);
ncclResult_t irecvInt(void* recvComm, int n, void** data, int* sizes, int* tags, void** mhandles,
                      void** request);

// Fills the fields common to every properties version; the shims add what their version has.
template <typename P>
ncclResult_t fillCommon(int dev, P* out, net::Properties* core) {
  ncclResult_t r = properties(dev, core);
  if (r != ncclSuccess) return r;
  out->name = intern(core->name);
  out->pciPath = core->pciPath.empty() ? nullptr : intern(core->pciPath);
  out->guid = core->guid;
  out->ptrSupport = core->ptrSupport;
  out->speed = core->speedMbps;
  out->port = core->port;
  out->latency = core->latencyUs;
  out->maxComms = core->maxComms;
  out->maxRecvs = core->maxRecvs;
  out->netDeviceType = NCCL_NET_DEVICE_HOST;
  out->netDeviceVersion = NCCL_NET_DEVICE_INVALID_VERSION;
  return ncclSuccess;
}

template <typename V>
void fillVProps(V* v, const net::Properties& core) {
  v->ndevs = static_cast<int>(core.vDevs.size());
  for (size_t i = 0; i < core.vDevs.size() && i < sizeof(v->devs) / sizeof(v->devs[0]); ++i)
    v->devs[i] = core.vDevs[i];
}

}  // namespace pact::plugin
