#include "cuda/driver.h"

#include <dlfcn.h>

#include <cstdio>
#include <map>
#include <mutex>

#include "common/log.h"
#include "cuda/abi.h"

namespace pact::cuda {

namespace {
using namespace abi;

template <typename F>
F resolve(void* lib, const char* name) {
  return reinterpret_cast<F>(dlsym(lib, name));
}
}  // namespace

struct Driver::Api {
  CUresult (*init)(unsigned) = nullptr;
  CUresult (*driverGetVersion)(int*) = nullptr;
  CUresult (*deviceGetCount)(int*) = nullptr;
  CUresult (*deviceGet)(CUdevice*, int) = nullptr;
  CUresult (*deviceGetAttribute)(int*, int, CUdevice) = nullptr;
  CUresult (*deviceGetPciBusId)(char*, int, CUdevice) = nullptr;
  CUresult (*pointerGetAttribute)(void*, int, CUdeviceptr) = nullptr;
  CUresult (*memGetHandleForAddressRange)(void*, CUdeviceptr, size_t, int, unsigned long long) = nullptr;
  CUresult (*flushGpuDirectRdmaWrites)(int, int) = nullptr;
  CUresult (*ctxPushCurrent)(CUcontext) = nullptr;
  CUresult (*ctxPopCurrent)(CUcontext*) = nullptr;
  CUresult (*memcpyHtoD)(CUdeviceptr, const void*, size_t) = nullptr;
  CUresult (*memcpyDtoH)(void*, CUdeviceptr, size_t) = nullptr;
  CUresult (*primaryCtxRetain)(CUcontext*, CUdevice) = nullptr;
  CUresult (*memAlloc)(CUdeviceptr*, size_t) = nullptr;
  CUresult (*memFree)(CUdeviceptr) = nullptr;
  CUresult (*getErrorString)(CUresult, const char**) = nullptr;

  std::string error(const char* call, CUresult r) const {
    const char* text = nullptr;
    if (getErrorString == nullptr || getErrorString(r, &text) != kSuccess || text == nullptr)
      text = "unknown error";
    return std::string(call) + " failed: " + text + " (CUresult " + std::to_string(r) + ")";
  }
  // Runs f with the context owning addr current (the calling thread's context is restored).
  template <typename F>
  Status inContextOf(const void* addr, const char* call, F f) const {
    CUcontext ctx = nullptr;
    CUresult r = pointerGetAttribute(&ctx, kPtrContext, reinterpret_cast<CUdeviceptr>(addr));
    if (r != kSuccess || ctx == nullptr) {
      PACT_WARN("cuda: %s: %p is not device memory the driver knows: %s", call, addr,
                error("cuPointerGetAttribute", r).c_str());
      return Status::kInvalidArgument;
    }
    if ((r = ctxPushCurrent(ctx)) != kSuccess) {
      PACT_WARN("cuda: %s", error("cuCtxPushCurrent", r).c_str());
      return Status::kInternal;
    }
    r = f();
    CUcontext popped = nullptr;
    (void)ctxPopCurrent(&popped);
    if (r != kSuccess) {
      PACT_WARN("cuda: %s", error(call, r).c_str());
      return Status::kInternal;
    }
    return Status::kOk;
  }
};

const Driver& Driver::instance(const std::string& path) {
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<Driver>> loaded;
  const std::string name = path.empty() ? "libcuda.so.1" : path;
  std::lock_guard lock(mu);
  std::unique_ptr<Driver>& d = loaded[name];
  if (d == nullptr) d.reset(new Driver(name));
  return *d;
}

Driver::~Driver() = default;

Driver::Driver(const std::string& path) : path_(path) {
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* e = dlerror();
    why_ = "no CUDA driver (" + path + ": " + (e ? e : "not found") + ")";
    PACT_INFO("cuda: %s; host memory only", why_.c_str());
    return;
  }
  api_ = std::make_unique<Api>();
  Api* a = api_.get();
  a->init = resolve<decltype(a->init)>(lib, "cuInit");
  a->driverGetVersion = resolve<decltype(a->driverGetVersion)>(lib, "cuDriverGetVersion");
  a->deviceGetCount = resolve<decltype(a->deviceGetCount)>(lib, "cuDeviceGetCount");
  a->deviceGet = resolve<decltype(a->deviceGet)>(lib, "cuDeviceGet");
  a->deviceGetAttribute = resolve<decltype(a->deviceGetAttribute)>(lib, "cuDeviceGetAttribute");
  a->deviceGetPciBusId = resolve<decltype(a->deviceGetPciBusId)>(lib, "cuDeviceGetPCIBusId");
  a->pointerGetAttribute = resolve<decltype(a->pointerGetAttribute)>(lib, "cuPointerGetAttribute");
  a->memGetHandleForAddressRange =
      resolve<decltype(a->memGetHandleForAddressRange)>(lib, "cuMemGetHandleForAddressRange");
  a->flushGpuDirectRdmaWrites =
      resolve<decltype(a->flushGpuDirectRdmaWrites)>(lib, "cuFlushGPUDirectRDMAWrites");
  a->ctxPushCurrent = resolve<decltype(a->ctxPushCurrent)>(lib, "cuCtxPushCurrent_v2");
  a->ctxPopCurrent = resolve<decltype(a->ctxPopCurrent)>(lib, "cuCtxPopCurrent_v2");
  a->memcpyHtoD = resolve<decltype(a->memcpyHtoD)>(lib, "cuMemcpyHtoD_v2");
  a->memcpyDtoH = resolve<decltype(a->memcpyDtoH)>(lib, "cuMemcpyDtoH_v2");
  a->primaryCtxRetain = resolve<decltype(a->primaryCtxRetain)>(lib, "cuDevicePrimaryCtxRetain");
  a->memAlloc = resolve<decltype(a->memAlloc)>(lib, "cuMemAlloc_v2");
  a->memFree = resolve<decltype(a->memFree)>(lib, "cuMemFree_v2");
  a->getErrorString = resolve<decltype(a->getErrorString)>(lib, "cuGetErrorString");
  hostBacked_ = dlsym(lib, "pact_cuda_double_host_backed") != nullptr;

  // The calls every use needs; the others are checked where they are used.
  const char* missing = !a->init                  ? "cuInit"
                        : !a->driverGetVersion    ? "cuDriverGetVersion"
                        : !a->deviceGetCount      ? "cuDeviceGetCount"
                        : !a->deviceGet           ? "cuDeviceGet"
                        : !a->deviceGetAttribute  ? "cuDeviceGetAttribute"
                        : !a->pointerGetAttribute ? "cuPointerGetAttribute"
                        : !a->ctxPushCurrent      ? "cuCtxPushCurrent_v2"
                        : !a->ctxPopCurrent       ? "cuCtxPopCurrent_v2"
                        : !a->memcpyHtoD          ? "cuMemcpyHtoD_v2"
                        : !a->memcpyDtoH          ? "cuMemcpyDtoH_v2"
                                                  : nullptr;
  if (missing != nullptr) {
    why_ = path + " lacks " + missing;
    PACT_INFO("cuda: %s; host memory only", why_.c_str());
    return;
  }
  CUresult r = a->init(0);
  if (r == kNoDevice) {
    why_ = "the CUDA driver sees no device";
    PACT_INFO("cuda: %s; host memory only", why_.c_str());
    return;
  }
  if (r != kSuccess) {
    why_ = a->error("cuInit", r);
    PACT_INFO("cuda: %s; host memory only", why_.c_str());
    return;
  }
  if ((r = a->driverGetVersion(&version_)) != kSuccess || (r = a->deviceGetCount(&deviceCount_)) != kSuccess) {
    why_ = a->error("cuDriverGetVersion/cuDeviceGetCount", r);
    PACT_INFO("cuda: %s; host memory only", why_.c_str());
    return;
  }
  if (deviceCount_ == 0) {
    why_ = "the CUDA driver sees no device";
    PACT_INFO("cuda: %s; host memory only", why_.c_str());
    return;
  }
  usable_ = true;
  // What a device can do does not change while the process lives: read once (iflush asks).
  for (int g = 0; g < deviceCount_; ++g) devices_.push_back(readDevice(g));
  PACT_INFO("cuda: driver %d.%d at %s, %d device(s)%s", version_ / 1000, version_ % 1000 / 10,
            path.c_str(), deviceCount_, hostBacked_ ? " (the test double: device memory is host memory)" : "");
}

Result<DeviceFacts> Driver::device(int ordinal) const {
  if (!usable_) return Error{Status::kUnsupported, why_};
  if (ordinal < 0 || ordinal >= deviceCount_)
    return Error{Status::kInvalidArgument, "CUDA device " + std::to_string(ordinal) + " does not exist (" +
                                               std::to_string(deviceCount_) + " devices)"};
  return devices_[static_cast<size_t>(ordinal)];
}

DeviceFacts Driver::readDevice(int ordinal) const {
  DeviceFacts f;
  f.ordinal = ordinal;
  CUdevice dev = 0;
  if (api().deviceGet(&dev, ordinal) != kSuccess) return f;  // every capability: no
  // An attribute an older driver does not know reads as "no".
  auto attr = [&](int a) {
    int v = 0;
    return api().deviceGetAttribute(&v, a, dev) == kSuccess ? v : 0;
  };
  f.dmabuf = attr(kAttrDmabufSupported) != 0;
  f.gdrRdma = attr(kAttrGdrSupported) != 0;
  f.flushOptions = attr(kAttrGdrFlushOptions);
  char bus[32] = {};
  if (api().deviceGetPciBusId != nullptr && api().deviceGetPciBusId(bus, sizeof bus, dev) == kSuccess)
    f.pciBusId = bus;
  return f;
}

Result<PointerFacts> Driver::pointer(const void* addr) const {
  PointerFacts f;
  if (!usable_) return f;
  const auto p = reinterpret_cast<CUdeviceptr>(addr);
  unsigned type = 0;
  if (api().pointerGetAttribute(&type, kPtrMemoryType, p) != kSuccess) return f;  // host memory
  f.device = type == kMemoryTypeDevice;
  if (!f.device) return f;
  int ordinal = -1;
  unsigned long long id = 0;
  CUdeviceptr start = 0;
  size_t size = 0;
  CUresult r = api().pointerGetAttribute(&ordinal, kPtrDeviceOrdinal, p);
  if (r == kSuccess) r = api().pointerGetAttribute(&id, kPtrBufferId, p);
  if (r == kSuccess) r = api().pointerGetAttribute(&start, kPtrRangeStart, p);
  if (r == kSuccess) r = api().pointerGetAttribute(&size, kPtrRangeSize, p);
  if (r != kSuccess) return Error{Status::kInternal, api().error("cuPointerGetAttribute", r)};
  f.ordinal = ordinal;
  f.bufferId = id;
  f.rangeStart = static_cast<uintptr_t>(start);
  f.rangeSize = size;
  return f;
}

// Whether a call needing driver `need` (and its entry point) can be made, and why not.
bool Driver::callable(int need, const void* entry, const char* name, std::string* why) const {
  std::string no;
  if (!usable_)
    no = why_;
  else if (version_ < need)
    no = "the driver is older than " + std::to_string(need / 1000) + "." + std::to_string(need % 1000 / 10);
  else if (entry == nullptr)
    no = path_ + " lacks " + name;
  if (!no.empty() && why != nullptr) *why = no;
  return no.empty();
}

bool Driver::canExportDmabuf(std::string* why) const {
  return callable(kVersionDmabuf, usable_ ? reinterpret_cast<const void*>(api().memGetHandleForAddressRange) : nullptr,
                  "cuMemGetHandleForAddressRange", why);
}

Result<int> Driver::exportDmabuf(const void* addr, size_t length) const {
  std::string why;
  if (!canExportDmabuf(&why)) return Error{Status::kUnsupported, why};
  int fd = -1;
  CUresult r = api().memGetHandleForAddressRange(&fd, reinterpret_cast<CUdeviceptr>(addr), length,
                                                 kHandleDmabufFd, 0);
  if (r != kSuccess || fd < 0)
    return Error{Status::kUnsupported, api().error("cuMemGetHandleForAddressRange", r)};
  return fd;
}

bool Driver::canFlush(std::string* why) const {
  return callable(kVersionFlush, usable_ ? reinterpret_cast<const void*>(api().flushGpuDirectRdmaWrites) : nullptr,
                  "cuFlushGPUDirectRDMAWrites", why);
}

Status Driver::flushRdmaWrites(const void* addr) const {
  if (!canFlush()) return Status::kUnsupported;
  return api().inContextOf(addr, "cuFlushGPUDirectRDMAWrites", [&] {
    return api().flushGpuDirectRdmaWrites(kFlushTargetCurrentCtx, kFlushToOwner);
  });
}

Status Driver::copyToDevice(void* dst, const void* src, size_t length) const {
  if (!usable_) return Status::kUnsupported;
  return api().inContextOf(dst, "cuMemcpyHtoD", [&] {
    return api().memcpyHtoD(reinterpret_cast<CUdeviceptr>(dst), src, length);
  });
}

Status Driver::copyToHost(void* dst, const void* src, size_t length) const {
  if (!usable_) return Status::kUnsupported;
  return api().inContextOf(src, "cuMemcpyDtoH", [&] {
    return api().memcpyDtoH(dst, reinterpret_cast<CUdeviceptr>(src), length);
  });
}

Result<void*> Driver::allocate(int ordinal, size_t length) const {
  if (!usable_) return Error{Status::kUnsupported, why_};
  if (!api().primaryCtxRetain || !api().memAlloc || !api().memFree)
    return Error{Status::kUnsupported, path_ + " lacks cuDevicePrimaryCtxRetain/cuMemAlloc_v2/cuMemFree_v2"};
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  CUresult r = api().deviceGet(&dev, ordinal);
  if (r == kSuccess) r = api().primaryCtxRetain(&ctx, dev);  // kept: the allocation lives in it
  if (r != kSuccess) return Error{Status::kInternal, api().error("cuDevicePrimaryCtxRetain", r)};
  if ((r = api().ctxPushCurrent(ctx)) != kSuccess) return Error{Status::kInternal, api().error("cuCtxPushCurrent", r)};
  CUdeviceptr p = 0;
  r = api().memAlloc(&p, length);
  CUcontext popped = nullptr;
  (void)api().ctxPopCurrent(&popped);
  if (r != kSuccess) return Error{Status::kNoMemory, api().error("cuMemAlloc", r)};
  return reinterpret_cast<void*>(p);
}

Status Driver::release(void* addr) const {
  if (!usable_ || api().memFree == nullptr) return Status::kUnsupported;
  return api().inContextOf(addr, "cuMemFree", [&] { return api().memFree(reinterpret_cast<CUdeviceptr>(addr)); });
}

}  // namespace pact::cuda
