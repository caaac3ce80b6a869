/* pact: NCCL net plugin ABI v8 (NCCL 2.20 and later). Written by the pact project from the ABI
 * facts; see net_common.h. v8 differs from v9 by int message sizes in isend/irecv and by having
 * no makeVDevice; regMr already takes a size_t. */
#pragma once

#include "net_common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef ncclNetDeviceHandle_v7_t ncclNetDeviceHandle_v8_t;

/* Per-device facts (64 bytes on LP64). No forceFlush, vProps or size limits yet. */
typedef struct {
  char* name;          /* unique per device: the topology key */
  char* pciPath;       /* sysfs device directory, or NULL */
  uint64_t guid;       /* with port: identifies a physical port */
  int ptrSupport;      /* NCCL_PTR_* mask */
  int regIsGlobal;     /* registration-cache hint */
  int speed;           /* Mbps */
  int port;
  float latency;       /* microseconds */
  int maxComms;
  int maxRecvs;        /* largest n accepted by irecv */
  ncclNetDeviceType netDeviceType;
  int netDeviceVersion;
} ncclNetProperties_v8_t;

/* Entry points, in ABI slot order (19 pointers). */
typedef struct {
  const char* name;
  ncclResult_t (*init)(ncclDebugLogger_t logFunction);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v8_t* props);
  ncclResult_t (*listen)(int dev, void* handle, void** listenComm);
  ncclResult_t (*connect)(int dev, void* handle, void** sendComm,
                          ncclNetDeviceHandle_v8_t** sendDevComm);
  ncclResult_t (*accept)(void* listenComm, void** recvComm, ncclNetDeviceHandle_v8_t** recvDevComm);
  ncclResult_t (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);
  ncclResult_t (*regMrDmaBuf)(void* comm, void* data, size_t size, int type, uint64_t offset,
                              int fd, void** mhandle);
  ncclResult_t (*deregMr)(void* comm, void* mhandle);
  ncclResult_t (*isend)(void* sendComm, void* data, int size, int tag, void* mhandle,
                        void** request);
  ncclResult_t (*irecv)(void* recvComm, int n, void** data, int* sizes, int* tags,
                        void** mhandles, void** request);
  ncclResult_t (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles,
                         void** request);
  ncclResult_t (*test)(void* request, int* done, int* sizes);
  ncclResult_t (*closeSend)(void* sendComm);
  ncclResult_t (*closeRecv)(void* recvComm);
  ncclResult_t (*closeListen)(void* listenComm);
  ncclResult_t (*getDeviceMr)(void* comm, void* mhandle, void** dptr_mhandle);
  ncclResult_t (*irecvConsumed)(void* recvComm, int n, void* request);
} ncclNet_v8_t;

#ifdef __cplusplus
} /* extern "C" */
#if defined(__LP64__)
static_assert(sizeof(ncclNetProperties_v8_t) == 64, "v8 properties layout");
static_assert(sizeof(ncclNet_v8_t) == 152, "v8 function table layout");
#endif
#endif
