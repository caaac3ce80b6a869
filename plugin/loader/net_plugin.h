// pact::loader: opens ANY NCCL net plugin .so exactly as NCCL does (dlopen RTLD_NOW|RTLD_LOCAL,
// dlsym ncclNetPlugin_vN) and exposes one version-independent interface over v8..v12.
// Used by pact-perf (to drive any plugin) and by the `abi` test suite. It is the only code
// outside plugin/nccl that includes plugin/abi headers.
//
// Thread safety: the object itself holds no mutable state after open(); calls are forwarded to the
// plugin, which defines their thread rules (NCCL's: service thread vs progress thread).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "pact_config.h"

namespace pact::loader {

// ncclResult_t values (frozen by NCCL).
enum Result : int {
  kSuccess = 0, kUnhandledCudaError = 1, kSystemError = 2, kInternalError = 3,
  kInvalidArgument = 4, kInvalidUsage = 5, kRemoteError = 6, kInProgress = 7,
};

inline constexpr int kPtrHost = 0x1;
inline constexpr int kPtrCuda = 0x2;
inline constexpr int kPtrDmabuf = 0x4;
inline constexpr int kHandleSize = 128;
inline constexpr int kMaxRecvs = 8;
inline constexpr int kOldestVersion = PACT_NET_ABI_OLDEST;  // the tables pact's plugin exports
inline constexpr int kNewestVersion = PACT_NET_ABI_NEWEST;

// Union of every version's properties; fields a version lacks get NCCL's shim defaults.
struct Properties {
  std::string name;
  std::string pciPath;  // empty when the plugin returned NULL
  uint64_t guid = 0;
  int ptrSupport = 0, regIsGlobal = 0, forceFlush = 0, speed = 0, port = 0;
  float latency = 0;
  int maxComms = 0, maxRecvs = 0, netDeviceType = 0, netDeviceVersion = 0;
  int vNdevs = 0;
  int vDevs[8] = {};
  size_t maxP2pBytes = 0, maxCollBytes = 0;
  int maxMultiRequestSize = 1;
  int16_t railId = -1, planeId = -1;
};

class NetPlugin {
 public:
  // path: file to dlopen. version: 0 = the newest ncclNetPlugin_vN found (12 down to 8, like NCCL),
  // or exactly N. Returns nullptr and sets *error on failure.
  static std::unique_ptr<NetPlugin> open(const std::string& path, int version, std::string* error);
  ~NetPlugin();  // finalize (v11+, if init succeeded) then dlclose
  NetPlugin(const NetPlugin&) = delete;
  NetPlugin& operator=(const NetPlugin&) = delete;

  int version() const;
  const char* name() const;
  // The text of the last WARN/ABORT line any plugin logged in this process since the previous
  // call (empty if none), and forgets it: the cause to print next to a failed call's result.
  static std::string takeLastWarning();

  // init: v8/v9 init(logger), v10 init(logger, prof), v11/v12 init(&ctx, commId, &config, logger, prof).
  // trafficClass is passed in config for v11/v12 and remembered for v10's connect.
  // Logs go to stderr unless quiet.
  int init(int trafficClass = -1, bool quiet = true);
  // NCCL's profiler callback for init (v10+) in place of the no-op one NCCL passes when no
  // profiler is loaded; set before init. The callback's C type is the ABI's.
  using ProfilerCallback = int (*)(void** eHandle, int type, void* pHandle, int64_t pluginId, void* extData);
  void setProfiler(ProfilerCallback cb);
  int devices(int* ndev);
  int getProperties(int dev, Properties* props);
  int listen(int dev, void* handle /*kHandleSize bytes*/, void** listenComm);
  // nullDevHandlePtr: pass a NULL ncclNetDeviceHandle** (NCCL's GDR probe) instead of &local.
  int connect(int dev, void* handle, void** sendComm, bool nullDevHandlePtr = false);
  int accept(void* listenComm, void** recvComm, bool nullDevHandlePtr = false);
  int regMr(void* comm, void* data, size_t size, int type, void** mhandle);
  // kInvalidUsage when the table's regMrDmaBuf is NULL (NCCL then never uses dmabuf).
  int regMrDmaBuf(void* comm, void* data, size_t size, int type, uint64_t offset, int fd, void** mhandle);
  bool hasRegMrDmaBuf();
  int deregMr(void* comm, void* mhandle);
  // phandle(s): the profiler's parent event per buffer (v10+; NCCL's proxy step), null: none.
  int isend(void* sendComm, void* data, size_t size, int tag, void* mhandle, void** request,
            void* phandle = nullptr);
  int irecv(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles, void** request,
            void* const* phandles = nullptr);
  int iflush(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request);
  int test(void* request, int* done, int* sizes);
  int closeSend(void* sendComm);
  int closeRecv(void* recvComm);
  int closeListen(void* listenComm);
  // Any other symbol the library exports (e.g. a plugin's own control API), or nullptr.
  void* symbol(const char* name) const;
  bool hasMakeVDevice() const;
  int makeVDevice(int* d, int ndevs, const int* devs);
  int finalize();  // v11+: finalize(ctx); older: no-op returning kSuccess

 private:
  NetPlugin();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace pact::loader
