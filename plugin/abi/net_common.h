/* pact: types and constants shared by every NCCL net plugin ABI version we speak (v8..v12).
 *
 * Written by the pact project from the ABI facts in shared/reference/nccl-net-abi.md; the names and
 * numeric values are the ABI (NCCL freezes them), the text is ours. Plain C, usable from C++.
 * Only plugin/ code includes this directory. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Return code of every plugin entry point. Values are frozen; plugins should only ever return
 * 0..6 (older NCCL releases know no more). */
typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
  ncclTimeout = 8,
  ncclNumResults = 9
} ncclResult_t;

/* Severity passed to the logger NCCL hands to init(). */
typedef enum {
  NCCL_LOG_NONE = 0,
  NCCL_LOG_VERSION = 1,
  NCCL_LOG_WARN = 2,
  NCCL_LOG_INFO = 3,
  NCCL_LOG_ABORT = 4,
  NCCL_LOG_TRACE = 5
} ncclDebugLogLevel;

/* Subsystem bit mask passed with each log line (a plugin normally uses NCCL_NET | NCCL_INIT). */
typedef enum {
  NCCL_INIT = 0x1,
  NCCL_COLL = 0x2,
  NCCL_P2P = 0x4,
  NCCL_SHM = 0x8,
  NCCL_NET = 0x10,
  NCCL_GRAPH = 0x20,
  NCCL_TUNING = 0x40,
  NCCL_ENV = 0x80,
  NCCL_ALLOC = 0x100,
  NCCL_CALL = 0x200,
  NCCL_PROXY = 0x400,
  NCCL_NVLS = 0x800,
  NCCL_BOOTSTRAP = 0x1000,
  NCCL_REG = 0x2000,
  NCCL_PROFILE = 0x4000,
  NCCL_RAS = 0x8000,
  NCCL_DESTROY = 0x10000,
  NCCL_ALLOC_HOST = 0x20000,
  NCCL_ALL = ~0
} ncclDebugLogSubSys;

/* printf-style logger; fmt and the variadic arguments follow printf rules. */
typedef void (*ncclDebugLogger_t)(ncclDebugLogLevel level, unsigned long flags, const char* file,
                                  int line, const char* fmt, ...);

/* Profiler hook handed to init() from v10 on. type: 0 start (reads pHandle, writes *eHandle),
 * 1 stop, 2 update, 3 update-and-stop (these use *eHandle). A no-op when no profiler is loaded. */
typedef ncclResult_t (*ncclProfilerCallback_t)(void** eHandle, int type, void* pHandle,
                                               int64_t pluginId, void* extData);
#define NCCL_PROFILER_NET_EVENT_START 0
#define NCCL_PROFILER_NET_EVENT_STOP 1
#define NCCL_PROFILER_NET_EVENT_UPDATE 2
#define NCCL_PROFILER_NET_EVENT_UPDATE_AND_STOP 3

/* Memory kinds, used both in ptrSupport (a mask) and as regMr's type argument. */
#define NCCL_PTR_HOST 0x1
#define NCCL_PTR_CUDA 0x2
#define NCCL_PTR_DMABUF 0x4

/* Opaque connection handle exchanged out of band: listen() fills at most this many bytes. */
#define NCCL_NET_HANDLE_MAXSIZE 128
/* In-flight requests NCCL keeps per comm (multiply by maxRecvs when comms are shared). */
#define NCCL_NET_MAX_REQUESTS 32
/* *request == (void*)0x1 on entry to irecv: completion may be reported early (LL/LL128, n == 1). */
#define NCCL_NET_OPTIONAL_RECV_COMPLETION 0x1
#define NCCL_NET_MULTI_REQUEST 0x2
/* Upper bound for maxP2pBytes / maxCollBytes (1 TiB). */
#define NCCL_MAX_NET_SIZE_BYTES (1ULL << 40)
/* "Not set" markers. */
#define NCCL_NET_TRAFFIC_CLASS_UNDEF (-1)
#define NCCL_NET_ATTR_UNDEF (-1)
#define NCCL_NET_ID_UNDEF (-1)
/* Registration flags (only used by GIN/RMA paths). */
#define NCCL_NET_MR_FLAG_FORCE_SO (1 << 0)
#define NCCL_NET_MR_FLAG_SIGNAL_NEVER_RESET (1 << 1)

/* Values NCCL's shims substitute when a pre-v9 plugin has no maxP2pBytes / maxCollBytes
 * (our names; NCCL calls them MAX_NET_SIZE / MAX_COLLNET_SIZE). */
#define PACT_ABI_LEGACY_MAX_P2P_BYTES ((size_t)1 << 30)
#define PACT_ABI_LEGACY_MAX_COLL_BYTES ((size_t)512 << 20)

/* What the GPU side of a connection needs. A net plugin reports HOST (version 0), or UNPACK
 * with NCCL_NET_DEVICE_UNPACK_VERSION; NCCL rejects anything else. */
typedef enum {
  NCCL_NET_DEVICE_HOST = 0,
  NCCL_NET_DEVICE_UNPACK = 1,
  NCCL_NET_DEVICE_GIN_PROXY = 2,
  NCCL_NET_DEVICE_GIN_GDAKI = 3,
  NCCL_NET_DEVICE_GIN_GPI = 4 /* known to the NCCL core only */
} ncclNetDeviceType;

#define NCCL_NET_DEVICE_INVALID_VERSION 0x0
#define NCCL_NET_DEVICE_UNPACK_VERSION 0x7
#define NCCL_NET_MTU_SIZE 4096

/* Device-side comm handle returned through connect/accept's last argument (32 bytes on LP64).
 * The layout has not changed from v7 through v12; each version header typedefs its own name.
 * HOST plugins leave the pointer NULL (and must cope with the pointer-to-pointer being NULL). */
typedef struct {
  ncclNetDeviceType netDeviceType;
  int netDeviceVersion;
  void* handle;
  size_t size;
  int needsProxyProgress;
} ncclNetDeviceHandle_v7_t;

/* Physical NIC slots in a virtual device: 4 for v9..v11, 8 for v12. */
#define NCCL_NET_MAX_DEVS_PER_NIC_V11 4
#define NCCL_NET_MAX_DEVS_PER_NIC_V12 8

#ifdef __cplusplus
} /* extern "C" */
static_assert(sizeof(ncclResult_t) == 4, "ncclResult_t is an int-sized enum");
static_assert(sizeof(ncclNetDeviceHandle_v7_t) == 32, "device handle is 32 bytes on LP64");
#endif
