/* pact: NCCL net plugin ABI v11 (NCCL 2.28 and later). Written by the pact project from the ABI
 * facts; see net_common.h. New in v11: init is per communicator and returns a context that
 * listen/connect/finalize/setNetAttr receive; finalize and setNetAttr slots; the traffic class
 * moves from connect to init; properties gain maxMultiRequestSize. */
#pragma once

#include "net_common.h"
#include "net_v10.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef ncclNetDeviceHandle_v7_t ncclNetDeviceHandle_v11_t;
typedef ncclNetVDeviceProps_v9_t ncclNetVDeviceProps_v11_t;
typedef ncclNetCommConfig_v10_t ncclNetCommConfig_v11_t;

/* Per-device facts (112 bytes on LP64). */
typedef struct {
  char* name;
  char* pciPath;
  uint64_t guid;
  int ptrSupport;
  int regIsGlobal;
  int forceFlush;
  int speed;           /* Mbps */
  int port;
  float latency;       /* microseconds */
  int maxComms;
  int maxRecvs;
  ncclNetDeviceType netDeviceType;
  int netDeviceVersion;
  ncclNetVDeviceProps_v11_t vProps;
  size_t maxP2pBytes;
  size_t maxCollBytes;
  int maxMultiRequestSize; /* 1 unless the plugin supports multi-request */
} ncclNetProperties_v11_t;

/* Connection-shape hints for one direction (peers and flows); -1 = not given. */
typedef struct {
  int32_t maxConcurrentPeers;
  int32_t minConcurrentPeers;
  int32_t maxFlowsPerPeer;
  int32_t minFlowsPerPeer;
} ncclNetCommAttr_v11_t;

/* Hints passed through setNetAttr. op/algo/proto are bit masks (op bits indexed by ncclFunc_t). */
typedef struct {
  ncclNetCommAttr_v11_t sendCommAttr;
  ncclNetCommAttr_v11_t recvCommAttr;
  uint32_t op;
  uint32_t algo;
  uint32_t proto;
} ncclNetAttr_v11_t;

/* Entry points, in ABI slot order (22 pointers). */
typedef struct {
  const char* name;
  ncclResult_t (*init)(void** ctx, uint64_t commId, ncclNetCommConfig_v11_t* config,
                       ncclDebugLogger_t logFunction, ncclProfilerCallback_t profFunction);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v11_t* props);
  ncclResult_t (*listen)(void* ctx, int dev, void* handle, void** listenComm);
  ncclResult_t (*connect)(void* ctx, int dev, void* handle, void** sendComm,
                          ncclNetDeviceHandle_v11_t** sendDevComm);
  ncclResult_t (*accept)(void* listenComm, void** recvComm,
                         ncclNetDeviceHandle_v11_t** recvDevComm);
  ncclResult_t (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);
  ncclResult_t (*regMrDmaBuf)(void* comm, void* data, size_t size, int type, uint64_t offset,
                              int fd, void** mhandle);
  ncclResult_t (*deregMr)(void* comm, void* mhandle);
  ncclResult_t (*isend)(void* sendComm, void* data, size_t size, int tag, void* mhandle,
                        void* phandle, void** request);
  ncclResult_t (*irecv)(void* recvComm, int n, void** data, size_t* sizes, int* tags,
                        void** mhandles, void** phandles, void** request);
  ncclResult_t (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles,
                         void** request);
  ncclResult_t (*test)(void* request, int* done, int* sizes);
  ncclResult_t (*closeSend)(void* sendComm);
  ncclResult_t (*closeRecv)(void* recvComm);
  ncclResult_t (*closeListen)(void* listenComm);
  ncclResult_t (*getDeviceMr)(void* comm, void* mhandle, void** dptr_mhandle);
  ncclResult_t (*irecvConsumed)(void* recvComm, int n, void* request);
  ncclResult_t (*makeVDevice)(int* d, ncclNetVDeviceProps_v11_t* props);
  ncclResult_t (*finalize)(void* ctx); /* mandatory: called at every communicator destroy */
  ncclResult_t (*setNetAttr)(void* ctx, ncclNetAttr_v11_t* netAttr); /* may be NULL */
} ncclNet_v11_t;

#ifdef __cplusplus
} /* extern "C" */
#if defined(__LP64__)
static_assert(sizeof(ncclNetAttr_v11_t) == 44, "v11 net attr layout");
static_assert(sizeof(ncclNetProperties_v11_t) == 112, "v11 properties layout");
static_assert(sizeof(ncclNet_v11_t) == 176, "v11 function table layout");
#endif
#endif
