/* pact: NCCL net plugin ABI v9 (NCCL 2.24 and later). Written by the pact project from the ABI
 * facts; see net_common.h. New in v9: size_t message sizes, forceFlush, virtual devices
 * (vProps + makeVDevice) and the maxP2pBytes / maxCollBytes limits. */
#pragma once

#include "net_common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef ncclNetDeviceHandle_v7_t ncclNetDeviceHandle_v9_t;

/* The physical devices a (virtual) device is made of; {1, {dev}} for a physical one. */
typedef struct {
  int ndevs;
  int devs[NCCL_NET_MAX_DEVS_PER_NIC_V11];
} ncclNetVDeviceProps_v9_t;

/* Per-device facts (104 bytes on LP64). */
typedef struct {
  char* name;
  char* pciPath;
  uint64_t guid;
  int ptrSupport;
  int regIsGlobal;
  int forceFlush;      /* 1: NCCL must iflush after every GDR receive */
  int speed;           /* Mbps */
  int port;
  float latency;       /* microseconds */
  int maxComms;
  int maxRecvs;
  ncclNetDeviceType netDeviceType;
  int netDeviceVersion;
  ncclNetVDeviceProps_v9_t vProps;
  size_t maxP2pBytes;  /* in (0, NCCL_MAX_NET_SIZE_BYTES] */
  size_t maxCollBytes; /* in (0, NCCL_MAX_NET_SIZE_BYTES] */
} ncclNetProperties_v9_t;

/* Entry points, in ABI slot order (20 pointers). */
typedef struct {
  const char* name;
  ncclResult_t (*init)(ncclDebugLogger_t logFunction);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v9_t* props);
  ncclResult_t (*listen)(int dev, void* handle, void** listenComm);
  ncclResult_t (*connect)(int dev, void* handle, void** sendComm,
                          ncclNetDeviceHandle_v9_t** sendDevComm);
  ncclResult_t (*accept)(void* listenComm, void** recvComm, ncclNetDeviceHandle_v9_t** recvDevComm);
  ncclResult_t (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);
  ncclResult_t (*regMrDmaBuf)(void* comm, void* data, size_t size, int type, uint64_t offset,
                              int fd, void** mhandle);
  ncclResult_t (*deregMr)(void* comm, void* mhandle);
  ncclResult_t (*isend)(void* sendComm, void* data, size_t size, int tag, void* mhandle,
                        void** request);
  ncclResult_t (*irecv)(void* recvComm, int n, void** data, size_t* sizes, int* tags,
                        void** mhandles, void** request);
  ncclResult_t (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles,
                         void** request);
  ncclResult_t (*test)(void* request, int* done, int* sizes);
  ncclResult_t (*closeSend)(void* sendComm);
  ncclResult_t (*closeRecv)(void* recvComm);
  ncclResult_t (*closeListen)(void* listenComm);
  ncclResult_t (*getDeviceMr)(void* comm, void* mhandle, void** dptr_mhandle);
  ncclResult_t (*irecvConsumed)(void* recvComm, int n, void* request);
  ncclResult_t (*makeVDevice)(int* d, ncclNetVDeviceProps_v9_t* props);
} ncclNet_v9_t;

#ifdef __cplusplus
} /* extern "C" */
#if defined(__LP64__)
static_assert(sizeof(ncclNetVDeviceProps_v9_t) == 20, "v9 vProps layout");
static_assert(sizeof(ncclNetProperties_v9_t) == 104, "v9 properties layout");
static_assert(sizeof(ncclNet_v9_t) == 160, "v9 function table layout");
#endif
#endif
