// pact::loader implementation: one std::variant over the versioned function tables, one adapter
// per entry point. Calls that have the same signature in every version go through a generic
// lambda; the ones that changed between versions branch with `if constexpr`.
#include "net_plugin.h"

#include <dlfcn.h>

#include <atomic>
#include <climits>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <type_traits>
#include <variant>

#include "plugin/abi/net_v10.h"
#include "plugin/abi/net_v11.h"
#include "plugin/abi/net_v12.h"
#include "plugin/abi/net_v8.h"
#include "plugin/abi/net_v9.h"

namespace pact::loader {
namespace {

using Table = std::variant<const ncclNet_v8_t*, const ncclNet_v9_t*, const ncclNet_v10_t*,
                           const ncclNet_v11_t*, const ncclNet_v12_t*>;

template <class T>
inline constexpr bool kIsV8 = std::is_same_v<T, const ncclNet_v8_t*>;
template <class T>
inline constexpr bool kIsV9 = std::is_same_v<T, const ncclNet_v9_t*>;
template <class T>
inline constexpr bool kIsV10 = std::is_same_v<T, const ncclNet_v10_t*>;
template <class T>
inline constexpr bool kHasCtx =
    std::is_same_v<T, const ncclNet_v11_t*> || std::is_same_v<T, const ncclNet_v12_t*>;

// The logger is a bare function pointer (no user data), so its one knob is process-wide.
std::atomic<bool> g_quiet{true};

// The last WARN/ABORT message (process-wide, like the logger): what a caller can report next to a
// failed call's ncclResult_t.
std::mutex g_warn_mu;
std::string g_last_warning;

const char* levelName(ncclDebugLogLevel level) {
  switch (level) {
    case NCCL_LOG_NONE: return "NONE";
    case NCCL_LOG_VERSION: return "VERSION";
    case NCCL_LOG_WARN: return "WARN";
    case NCCL_LOG_INFO: return "INFO";
    case NCCL_LOG_ABORT: return "ABORT";
    case NCCL_LOG_TRACE: return "TRACE";
    default: return "?";
  }
}

void logToStderr(ncclDebugLogLevel level, unsigned long /*flags*/, const char* file, int line,
                 const char* fmt, ...) {
  bool always = level == NCCL_LOG_WARN || level == NCCL_LOG_ABORT;
  if (!always && g_quiet.load(std::memory_order_relaxed)) return;
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(msg, sizeof(msg), fmt ? fmt : "", ap);
  va_end(ap);
  if (always) {
    std::lock_guard<std::mutex> lock(g_warn_mu);
    g_last_warning = msg;
  }
  // One fprintf call so that lines from several threads do not interleave.
  std::fprintf(stderr, "NCCL-LOG %s %s:%d %s\n", levelName(level), file ? file : "?", line, msg);
}

// Stands in for NCCL's profiler with no profiler loaded: accepts every event, records nothing.
ncclResult_t noProfiler(void** eHandle, int type, void* /*pHandle*/, int64_t /*pluginId*/,
                        void* /*extData*/) {
  if (type == NCCL_PROFILER_NET_EVENT_START && eHandle != nullptr) *eHandle = nullptr;
  return ncclSuccess;
}

const char* symbolFor(int version) {
  switch (version) {
    case 8: return "ncclNetPlugin_v8";
    case 9: return "ncclNetPlugin_v9";
    case 10: return "ncclNetPlugin_v10";
    case 11: return "ncclNetPlugin_v11";
    case 12: return "ncclNetPlugin_v12";
    default: return nullptr;
  }
}

Table makeTable(int version, const void* sym) {
  switch (version) {
    case 8: return static_cast<const ncclNet_v8_t*>(sym);
    case 9: return static_cast<const ncclNet_v9_t*>(sym);
    case 10: return static_cast<const ncclNet_v10_t*>(sym);
    case 11: return static_cast<const ncclNet_v11_t*>(sym);
    default: return static_cast<const ncclNet_v12_t*>(sym);
  }
}

template <class T>
struct PropsOf;
template <>
struct PropsOf<const ncclNet_v8_t*> {
  using type = ncclNetProperties_v8_t;
};
template <>
struct PropsOf<const ncclNet_v9_t*> {
  using type = ncclNetProperties_v9_t;
};
template <>
struct PropsOf<const ncclNet_v10_t*> {
  using type = ncclNetProperties_v10_t;
};
template <>
struct PropsOf<const ncclNet_v11_t*> {
  using type = ncclNetProperties_v11_t;
};
template <>
struct PropsOf<const ncclNet_v12_t*> {
  using type = ncclNetProperties_v12_t;
};

// Field-by-field copy of the fields every version has.
template <class P>
void copyCommon(const P& in, Properties* out) {
  out->name = in.name ? in.name : "";
  out->pciPath = in.pciPath ? in.pciPath : "";
  out->guid = in.guid;
  out->ptrSupport = in.ptrSupport;
  out->regIsGlobal = in.regIsGlobal;
  out->speed = in.speed;
  out->port = in.port;
  out->latency = in.latency;
  out->maxComms = in.maxComms;
  out->maxRecvs = in.maxRecvs;
  out->netDeviceType = static_cast<int>(in.netDeviceType);
  out->netDeviceVersion = in.netDeviceVersion;
}

// Fields added in v9 (forceFlush, vProps, size limits).
template <class P>
void copyV9(const P& in, Properties* out) {
  out->forceFlush = in.forceFlush;
  constexpr int kSlots = static_cast<int>(sizeof(in.vProps.devs) / sizeof(in.vProps.devs[0]));
  out->vNdevs = in.vProps.ndevs;
  for (int i = 0; i < kSlots && i < in.vProps.ndevs; ++i) out->vDevs[i] = in.vProps.devs[i];
  out->maxP2pBytes = in.maxP2pBytes;
  out->maxCollBytes = in.maxCollBytes;
}

}  // namespace

struct NetPlugin::Impl {
  void* dl = nullptr;
  int version = 0;
  Table table;
  void* ctx = nullptr;  // v11+: what init returned
  bool inited = false;
  bool finalized = false;
  ncclNetCommConfig_v12_t config{NCCL_NET_TRAFFIC_CLASS_UNDEF};  // kept alive for the plugin
  ncclProfilerCallback_t profiler = noProfiler;

  template <class F>
  int call(F&& f) {
    return std::visit(std::forward<F>(f), table);
  }
};

NetPlugin::NetPlugin() : impl_(std::make_unique<Impl>()) {}

NetPlugin::~NetPlugin() {
  if (!impl_) return;
  if (impl_->version >= 11 && impl_->inited && !impl_->finalized) {
    int rc = finalize();
    if (rc != kSuccess)
      std::fprintf(stderr, "pact-loader: finalize failed in destructor: %d\n", rc);
  }
  if (impl_->dl != nullptr) dlclose(impl_->dl);
}

std::unique_ptr<NetPlugin> NetPlugin::open(const std::string& path, int version,
                                           std::string* error) {
  auto fail = [&](std::string msg) -> std::unique_ptr<NetPlugin> {
    if (error != nullptr) *error = std::move(msg);
    return nullptr;
  };
  if (version != 0 && (version < kOldestVersion || version > kNewestVersion)) {
    return fail("unsupported net plugin version " + std::to_string(version) + " (supported " +
                std::to_string(kOldestVersion) + ".." + std::to_string(kNewestVersion) + ")");
  }
  std::unique_ptr<NetPlugin> p(new NetPlugin());
  dlerror();
  p->impl_->dl = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (p->impl_->dl == nullptr) {
    const char* why = dlerror();
    return fail("dlopen " + path + ": " + (why ? why : "unknown error"));
  }
  int lo = version == 0 ? kOldestVersion : version;
  int hi = version == 0 ? kNewestVersion : version;
  for (int v = hi; v >= lo; --v) {
    void* sym = dlsym(p->impl_->dl, symbolFor(v));
    if (sym == nullptr) continue;
    p->impl_->version = v;
    p->impl_->table = makeTable(v, sym);
    return p;
  }
  return fail(path + ": no " +
              (version == 0 ? std::string("ncclNetPlugin_v8..v12") : symbolFor(version)) +
              " symbol");
}

int NetPlugin::version() const { return impl_->version; }

std::string NetPlugin::takeLastWarning() {
  std::lock_guard<std::mutex> lock(g_warn_mu);
  std::string w;
  w.swap(g_last_warning);
  return w;
}

const char* NetPlugin::name() const {
  return std::visit([](auto* t) { return t->name; }, impl_->table);
}

namespace {
// The caller's profiler (one per process, as NCCL's), behind a callback of the ABI's own type.
std::atomic<NetPlugin::ProfilerCallback> g_profiler{nullptr};
ncclResult_t profilerTrampoline(void** eHandle, int type, void* pHandle, int64_t pluginId, void* extData) {
  const NetPlugin::ProfilerCallback cb = g_profiler.load(std::memory_order_acquire);
  return cb != nullptr ? static_cast<ncclResult_t>(cb(eHandle, type, pHandle, pluginId, extData))
                       : noProfiler(eHandle, type, pHandle, pluginId, extData);
}
}  // namespace

void NetPlugin::setProfiler(ProfilerCallback cb) {
  g_profiler.store(cb, std::memory_order_release);
  impl_->profiler = cb != nullptr ? profilerTrampoline : noProfiler;
}

int NetPlugin::init(int trafficClass, bool quiet) {
  g_quiet.store(quiet, std::memory_order_relaxed);
  impl_->config.trafficClass = trafficClass;
  Impl& im = *impl_;
  if (im.version >= 11 && im.inited && !im.finalized) return kInvalidUsage;  // would leak a ctx
  int rc = im.call([&](auto* t) -> int {
    using T = decltype(t);
    if constexpr (kIsV8<T> || kIsV9<T>) {
      return t->init(logToStderr);
    } else if constexpr (kIsV10<T>) {
      return t->init(logToStderr, im.profiler);
    } else {
      std::random_device rd;
      uint64_t commId = (static_cast<uint64_t>(rd()) << 32) ^ rd();
      void* ctx = nullptr;
      int r = t->init(&ctx, commId, &im.config, logToStderr, im.profiler);
      if (r == ncclSuccess) im.ctx = ctx;
      return r;
    }
  });
  if (rc == kSuccess) {
    im.inited = true;
    im.finalized = false;
  }
  return rc;
}

int NetPlugin::devices(int* ndev) {
  return impl_->call([&](auto* t) -> int { return t->devices(ndev); });
}

int NetPlugin::getProperties(int dev, Properties* props) {
  if (props == nullptr) return kInvalidArgument;
  return impl_->call([&](auto* t) -> int {
    using T = decltype(t);
    typename PropsOf<T>::type in;
    std::memset(&in, 0, sizeof(in));  // NCCL does not, but a deterministic harness should
    int rc = t->getProperties(dev, &in);
    if (rc != ncclSuccess) return rc;
    Properties out;
    copyCommon(in, &out);
    if constexpr (kIsV8<T>) {  // NCCL's v8 shim defaults
      out.forceFlush = 0;
      out.vNdevs = 1;
      out.vDevs[0] = dev;
      out.maxP2pBytes = PACT_ABI_LEGACY_MAX_P2P_BYTES;
      out.maxCollBytes = PACT_ABI_LEGACY_MAX_COLL_BYTES;
    } else {
      copyV9(in, &out);
    }
    if constexpr (kHasCtx<T>) {
      out.maxMultiRequestSize = in.maxMultiRequestSize;
    } else {
      out.maxMultiRequestSize = 1;
    }
    if constexpr (std::is_same_v<T, const ncclNet_v12_t*>) {
      out.railId = in.railId;
      out.planeId = in.planeId;
    } else {
      out.railId = -1;
      out.planeId = -1;
    }
    *props = std::move(out);
    return ncclSuccess;
  });
}

int NetPlugin::listen(int dev, void* handle, void** listenComm) {
  return impl_->call([&](auto* t) -> int {
    if constexpr (kHasCtx<decltype(t)>) {
      return t->listen(impl_->ctx, dev, handle, listenComm);
    } else {
      return t->listen(dev, handle, listenComm);
    }
  });
}

int NetPlugin::connect(int dev, void* handle, void** sendComm, bool nullDevHandlePtr) {
  return impl_->call([&](auto* t) -> int {
    using T = decltype(t);
    ncclNetDeviceHandle_v7_t* local = nullptr;
    ncclNetDeviceHandle_v7_t** dh = nullptr;
    if (!nullDevHandlePtr) dh = &local;
    if constexpr (kHasCtx<T>) {
      return t->connect(impl_->ctx, dev, handle, sendComm, dh);
    } else if constexpr (kIsV10<T>) {
      return t->connect(dev, &impl_->config, handle, sendComm, dh);
    } else {
      return t->connect(dev, handle, sendComm, dh);
    }
  });
}

int NetPlugin::accept(void* listenComm, void** recvComm, bool nullDevHandlePtr) {
  return impl_->call([&](auto* t) -> int {
    ncclNetDeviceHandle_v7_t* local = nullptr;
    return t->accept(listenComm, recvComm, nullDevHandlePtr ? nullptr : &local);
  });
}

int NetPlugin::regMr(void* comm, void* data, size_t size, int type, void** mhandle) {
  return impl_->call([&](auto* t) -> int { return t->regMr(comm, data, size, type, mhandle); });
}

int NetPlugin::regMrDmaBuf(void* comm, void* data, size_t size, int type, uint64_t offset, int fd,
                           void** mhandle) {
  return impl_->call([&](auto* t) -> int {
    if (t->regMrDmaBuf == nullptr) return kInvalidUsage;
    return t->regMrDmaBuf(comm, data, size, type, offset, fd, mhandle);
  });
}

bool NetPlugin::hasRegMrDmaBuf() {
  return impl_->call([](auto* t) -> int { return t->regMrDmaBuf != nullptr; }) != 0;
}

int NetPlugin::deregMr(void* comm, void* mhandle) {
  return impl_->call([&](auto* t) -> int { return t->deregMr(comm, mhandle); });
}

int NetPlugin::isend(void* sendComm, void* data, size_t size, int tag, void* mhandle,
                     void** request, void* phandle) {
  return impl_->call([&](auto* t) -> int {
    using T = decltype(t);
    if constexpr (kIsV8<T>) {
      if (size > static_cast<size_t>(INT_MAX)) return kInvalidArgument;
      return t->isend(sendComm, data, static_cast<int>(size), tag, mhandle, request);
    } else if constexpr (kIsV9<T>) {
      return t->isend(sendComm, data, size, tag, mhandle, request);
    } else {
      return t->isend(sendComm, data, size, tag, mhandle, phandle, request);
    }
  });
}

int NetPlugin::irecv(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles,
                     void** request, void* const* phandles) {
  if (n < 0 || n > kMaxRecvs) return kInvalidArgument;
  return impl_->call([&](auto* t) -> int {
    using T = decltype(t);
    if constexpr (kIsV8<T>) {
      int isizes[kMaxRecvs] = {};
      for (int i = 0; i < n; ++i) {
        if (sizes[i] > static_cast<size_t>(INT_MAX)) return kInvalidArgument;
        isizes[i] = static_cast<int>(sizes[i]);
      }
      return t->irecv(recvComm, n, data, isizes, tags, mhandles, request);
    } else if constexpr (kIsV9<T>) {
      return t->irecv(recvComm, n, data, sizes, tags, mhandles, request);
    } else {
      void* ph[kMaxRecvs] = {};
      for (int i = 0; phandles != nullptr && i < n; ++i) ph[i] = phandles[i];
      return t->irecv(recvComm, n, data, sizes, tags, mhandles, ph, request);
    }
  });
}

int NetPlugin::iflush(void* recvComm, int n, void** data, int* sizes, void** mhandles,
                      void** request) {
  return impl_->call(
      [&](auto* t) -> int { return t->iflush(recvComm, n, data, sizes, mhandles, request); });
}

int NetPlugin::test(void* request, int* done, int* sizes) {
  return impl_->call([&](auto* t) -> int { return t->test(request, done, sizes); });
}

int NetPlugin::closeSend(void* sendComm) {
  return impl_->call([&](auto* t) -> int { return t->closeSend(sendComm); });
}

int NetPlugin::closeRecv(void* recvComm) {
  return impl_->call([&](auto* t) -> int { return t->closeRecv(recvComm); });
}

int NetPlugin::closeListen(void* listenComm) {
  return impl_->call([&](auto* t) -> int { return t->closeListen(listenComm); });
}

void* NetPlugin::symbol(const char* name) const { return dlsym(impl_->dl, name); }

bool NetPlugin::hasMakeVDevice() const {
  return std::visit(
      [](auto* t) -> bool {
        if constexpr (kIsV8<decltype(t)>) {
          return false;
        } else {
          return t->makeVDevice != nullptr;
        }
      },
      impl_->table);
}

int NetPlugin::makeVDevice(int* d, int ndevs, const int* devs) {
  return impl_->call([&](auto* t) -> int {
    using T = decltype(t);
    if constexpr (kIsV8<T>) {
      return kInvalidUsage;
    } else {
      if (t->makeVDevice == nullptr) return kInvalidUsage;
      using P = typename PropsOf<T>::type;
      using VP = decltype(P::vProps);
      constexpr int kSlots = static_cast<int>(sizeof(VP::devs) / sizeof(VP::devs[0]));
      if (ndevs < 0 || ndevs > kSlots || (ndevs > 0 && devs == nullptr)) return kInvalidArgument;
      VP vp{};
      vp.ndevs = ndevs;
      for (int i = 0; i < ndevs; ++i) vp.devs[i] = devs[i];
      return t->makeVDevice(d, &vp);
    }
  });
}

int NetPlugin::finalize() {
  Impl& im = *impl_;
  if (im.version < 11 || !im.inited || im.finalized) return kSuccess;
  int rc = im.call([&](auto* t) -> int {
    if constexpr (kHasCtx<decltype(t)>) {
      if (t->finalize == nullptr) return kInvalidUsage;
      return t->finalize(im.ctx);
    } else {
      return kSuccess;
    }
  });
  // A failed finalize still ends this ctx: NCCL never retries it either.
  im.finalized = true;
  im.inited = false;
  im.ctx = nullptr;
  return rc;
}

}  // namespace pact::loader
