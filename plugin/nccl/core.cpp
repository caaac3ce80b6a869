#include "plugin/nccl/core.h"

#include <cctype>
#include <climits>
#include <mutex>
#include <optional>
#include <set>
#include <string>

#include "common/parse.h"
#include "pact_config.h"
#include "plugin/nccl/profiler.h"
#include "plugin/nccl/timeline.h"
#include "telemetry/exporter.h"

namespace pact::plugin {

namespace {

using net::Net;

// The process-wide core: created by the first init, released by the last finalize (v11+) or
// when the library is unloaded (v8..v10 have no finalize).
struct Global {
  std::mutex mu;
  std::optional<Result<Params>> params;  // PACT_*, read at the first init and passed down
  std::shared_ptr<Net> net;
  int refs = 0;
  ncclDebugLogger_t logger = nullptr;
  std::set<std::string> interned;
};
Global& global() {
  static Global g;
  return g;
}

// Per-communicator context handed to NCCL by v11+ init.
struct Ctx {
  static constexpr uint32_t kMagic = 0x58544350;  // "PCTX"
  uint32_t magic = kMagic;
  int trafficClass = -1;
};

void ncclSink(log::Level level, const char* file, int line, const char* msg) {
  ncclDebugLogger_t logger = global().logger;
  if (logger == nullptr) return;
  ncclDebugLogLevel l = level <= log::Level::kWarn ? NCCL_LOG_WARN
                        : level == log::Level::kInfo ? NCCL_LOG_INFO
                                                     : NCCL_LOG_TRACE;
  logger(l, NCCL_NET, file, line, "NET/PACT %s", msg);
}

std::shared_ptr<Net> net() {
  std::lock_guard lock(global().mu);
  return global().net;
}

template <typename T>
T* as(void* p) {
  return static_cast<T*>(p);
}

ncclResult_t fail(const char* fn, Status s) {
  if (s == Status::kOk) [[likely]] return ncclSuccess;
  if (isError(s)) PACT_DEBUG("%s returned %s", fn, statusName(s));
  return toNccl(s);
}

}  // namespace

ncclResult_t toNccl(Status s) {
  switch (s) {
    case Status::kOk:
    case Status::kInProgress: return ncclSuccess;
    case Status::kInvalidArgument: return ncclInvalidArgument;
    case Status::kNoMemory:
    case Status::kSystemError: return ncclSystemError;
    case Status::kRemoteError:
    case Status::kRefused:
    case Status::kTimeout:
    case Status::kTruncated:
    case Status::kCanceled: return ncclRemoteError;
    case Status::kUnsupported: return ncclInvalidUsage;
    case Status::kNotFound:
    case Status::kBusy: return ncclInvalidUsage;
    case Status::kEpochMismatch:  // the engine's outcomes: the plugin never produces them,
    case Status::kChecksum:       // but a peer's failure of any kind is remote to NCCL
    case Status::kRejected:
    case Status::kDeadline:
    case Status::kDuplicate:
    case Status::kOutOfRange:
    case Status::kStale:
    case Status::kIncomplete:
    case Status::kPeerStale: return ncclRemoteError;
    case Status::kNoResource:
    case Status::kInternal: return ncclInternalError;
  }
  return ncclInternalError;
}

char* intern(const std::string& s) {
  std::lock_guard lock(global().mu);
  return const_cast<char*>(global().interned.insert(s).first->c_str());
}

// NCCL's net API v8 and v9 pass no traffic class: a PACT_TC_<n> the user set applies to nothing.
static void noClassesNote(const Params& params) {
  std::string numbered;
  for (const auto& e : params.classes.entries())
    if (!e.name.empty() && std::isdigit(static_cast<unsigned char>(e.name[0])) && envIsSet(e.variable.c_str()))
      numbered += (numbered.empty() ? "" : ", ") + e.variable;
  if (!numbered.empty())
    PACT_WARN("%s set, but this NCCL uses net API v8 or v9, which passes no traffic class: every comm is of "
              "class DEFAULT (PACT_TC_DEFAULT). Classes need NCCL 2.26 or later (net API v10+) and "
              "ncclConfig_t.trafficClass on the communicator",
              numbered.c_str());
}

ncclResult_t init(void** ctx, int trafficClass, ncclDebugLogger_t logger, bool classes) {
  return guard("init", [&] {
    Global& g = global();
    std::lock_guard lock(g.mu);
    if (!g.params) g.params = Params::fromProcessEnv();
    const Result<Params>& params = *g.params;
    if (!params.ok()) {
      // The one-line error names the variable, its value and what is allowed.
      if (logger) logger(NCCL_LOG_WARN, NCCL_NET | NCCL_INIT, __FILE__, __LINE__, "NET/PACT %s",
                         params.error().message.c_str());
      else PACT_ERROR("%s", params.error().message.c_str());
      return ncclInvalidArgument;
    }
    if (logger) {
      g.logger = logger;
      log::setSink(ncclSink);
      log::setLevel(std::max(params->log_level, log::Level::kInfo));  // NCCL_DEBUG filters
    } else {
      log::setLevel(params->log_level);
    }
    if (!g.net) {
      auto n = Net::create(*params);
      if (!n.ok()) {
        PACT_ERROR("init: %s", n.error().message.c_str());
        return toNccl(n.status());
      }
      g.net = std::move(n.value());
      PACT_INFO("pact %s initialised: %d device(s)", PACT_VERSION, g.net->deviceCount());
      if (!classes) noClassesNote(*params);
      telemetry::startExporter({params->metrics_port, params->metrics_file, params->metrics_interval, params->metrics_per_comm != 0});
      timeline::configure(params->trace_file, static_cast<size_t>(params->trace_events));
    }
    ++g.refs;
    if (ctx) *ctx = new Ctx{Ctx::kMagic, trafficClass};
    return ncclSuccess;
  });
}

ncclResult_t finalize(void* ctx) {
  return guard("finalize", [&] {
    auto* c = as<Ctx>(ctx);
    if (c == nullptr || c->magic != Ctx::kMagic) return ncclInvalidArgument;
    c->magic = 0;
    delete c;
    Global& g = global();
    std::lock_guard lock(g.mu);
    // Comms still open keep their devices alive through shared ownership.
    if (--g.refs == 0) {
      telemetry::flushMetricsFile();  // the comms' and devices' last values
      std::string error;
      if (timeline::active() && !timeline::write("", &error)) PACT_WARN("PACT_TRACE_FILE: %s", error.c_str());
      g.net.reset();
    }
    return ncclSuccess;
  });
}

ncclResult_t devices(int* ndev) {
  return guard("devices", [&] {
    auto n = net();
    if (!n) return ncclInvalidUsage;
    *ndev = n->deviceCount();
    return ncclSuccess;
  });
}

ncclResult_t properties(int dev, net::Properties* out) {
  auto n = net();
  if (!n) return ncclInvalidUsage;
  return fail("getProperties", n->properties(dev, out));
}

ncclResult_t makeVDevice(int* d, int ndevs, const int* devs) {
  return guard("makeVDevice", [&] {
    auto n = net();
    if (!n) return ncclInvalidUsage;
    if (d == nullptr || devs == nullptr || ndevs < 1) return ncclInvalidArgument;
    return fail("makeVDevice", n->makeVDevice(std::vector<int>(devs, devs + ndevs), d));
  });
}

int ctxTrafficClass(void* ctx) {
  auto* c = as<Ctx>(ctx);
  return c != nullptr && c->magic == Ctx::kMagic ? c->trafficClass : -1;
}

ncclResult_t listen(int trafficClass, int dev, void* handle, void** listenComm) {
  return guard("listen", [&] {
    auto n = net();
    if (!n) return ncclInvalidUsage;
    net::ListenComm* lc = nullptr;
    Status s = n->listen(dev, trafficClass, handle, &lc);
    *listenComm = lc;
    return fail("listen", s);
  });
}

ncclResult_t connect(int trafficClass, int dev, void* handle, void** sendComm,
                     ncclNetDeviceHandle_v7_t** devComm) {
  return guard("connect", [&] {
    *sendComm = nullptr;
    if (devComm) *devComm = nullptr;  // host plugin: no device-side handle
    auto n = net();
    if (!n) return ncclInvalidUsage;
    net::SendComm* sc = nullptr;
    Status s = n->connect(dev, trafficClass, handle, &sc);
    *sendComm = sc;
    return fail("connect", s);
  });
}

ncclResult_t accept(void* listenComm, void** recvComm, ncclNetDeviceHandle_v7_t** devComm) {
  return guard("accept", [&] {
    *recvComm = nullptr;
    if (devComm) *devComm = nullptr;
    auto n = net();
    if (!n) return ncclInvalidUsage;
    net::RecvComm* rc = nullptr;
    Status s = n->accept(as<net::ListenComm>(listenComm), &rc);
    *recvComm = rc;
    return fail("accept", s);
  });
}

ncclResult_t regMr(void* comm, void* data, size_t size, int type, void** mhandle) {
  return regMrDmaBuf(comm, data, size, type, 0, -1, mhandle);
}

ncclResult_t regMrDmaBuf(void* comm, void* data, size_t size, int type, uint64_t offset, int fd,
                         void** mhandle) {
  return guard("regMr", [&] {
    *mhandle = nullptr;
    if (type != NCCL_PTR_HOST && type != NCCL_PTR_CUDA) {
      PACT_WARN("regMr: unknown memory type %d", type);
      return ncclInvalidArgument;
    }
    auto mt = type == NCCL_PTR_CUDA ? ucx::MemoryType::kCuda : ucx::MemoryType::kHost;
    net::MemHandle* mh = nullptr;
    Status s = Net::regMr(as<net::Comm>(comm), data, size, mt, fd, offset, &mh);
    if (s == Status::kOutOfRange) s = Status::kInvalidArgument;  // the caller's range, not the peer's
    *mhandle = mh;
    return fail("regMr", s);
  });
}

ncclResult_t deregMr(void* comm, void* mhandle) {
  return guard("deregMr", [&] {
    return fail("deregMr", Net::deregMr(as<net::Comm>(comm), as<net::MemHandle>(mhandle)));
  });
}

ncclResult_t isend(void* sendComm, void* data, size_t size, int tag, void* mhandle, void** request) {
  return guard("isend", [&] {
    *request = nullptr;  // never leave NCCL's 0x1 hint behind
    net::Request* r = nullptr;
    Status s = Net::isend(as<net::SendComm>(sendComm), data, size, tag,
                        as<net::MemHandle>(mhandle), &r);
    *request = r;
    timeline::posted(r, size);
    return fail("isend", s);
  });
}

ncclResult_t irecv(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles,
                   void** request) {
  return guard("irecv", [&] {
    *request = nullptr;  // the 0x1 hint is never handed back
    net::Request* r = nullptr;
    Status s = Net::irecv(as<net::RecvComm>(recvComm), n, data, sizes, tags,
                           reinterpret_cast<net::MemHandle**>(mhandles), &r);
    *request = r;
    if (r != nullptr && timeline::active()) {
      uint64_t bytes = 0;
      for (int i = 0; i < n; ++i) bytes += sizes[i];
      timeline::posted(r, bytes);
    }
    return fail("irecv", s);
  });
}

ncclResult_t isendInt(void* sendComm, void* data, int size, int tag, void* mhandle, void** request) {
  if (size < 0) {
    *request = nullptr;
    return ncclInvalidArgument;
  }
  return isend(sendComm, data, static_cast<size_t>(size), tag, mhandle, request);
}

ncclResult_t irecvInt(void* recvComm, int n, void** data, int* sizes, int* tags, void** mhandles,
                      void** request) {
  if (n < 1 || n > net::kMaxBuffers) {
    *request = nullptr;
    return ncclInvalidArgument;
  }
  size_t wide[net::kMaxBuffers];
  for (int i = 0; i < n; ++i) wide[i] = static_cast<size_t>(std::max(sizes[i], 0));
  return irecv(recvComm, n, data, wide, tags, mhandles, request);
}

ncclResult_t iflush(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request) {
  return guard("iflush", [&] {
    *request = nullptr;
    net::Request* r = nullptr;
    Status s = Net::iflush(as<net::RecvComm>(recvComm), n, data, sizes,
                            reinterpret_cast<net::MemHandle**>(mhandles), &r);
    *request = r;
    return fail("iflush", s);
  });
}

ncclResult_t test(void* request, int* done, int* sizes) {
  return guard("test", [&] {
    *done = 0;
    bool d = false;
    net::Ending ending;
    const bool record = profiler::active() || timeline::active();
    Status s = Net::test(as<net::Request>(request), &d, sizes, record ? &ending : nullptr);
    *done = d ? 1 : 0;
    const ncclResult_t r = fail("test", s);
    profiler::stop(ending, sizes, r);  // the request ended here: its profiler events and span too
    timeline::ended(ending, sizes, r);
    return r;
  });
}

ncclResult_t closeSend(void* sendComm) {
  return guard("closeSend", [&] {
    return fail("closeSend", Net::closeSend(as<net::SendComm>(sendComm)));
  });
}

ncclResult_t closeRecv(void* recvComm) {
  return guard("closeRecv", [&] {
    return fail("closeRecv", Net::closeRecv(as<net::RecvComm>(recvComm)));
  });
}

ncclResult_t closeListen(void* listenComm) {
  return guard("closeListen", [&] {
    return fail("closeListen", Net::closeListen(as<net::ListenComm>(listenComm)));
  });
}

std::shared_ptr<Net> activeNet() { return net(); }

}  // namespace pact::plugin
