// pact-gpu-memory-check: GPU memory through the plugin ABI on the CUDA driver it finds
// (PACT_CUDA_DRIVER, default libcuda.so.1), for ci/gpu-check.sh on a GPU machine:
//   1. the driver's facts of GPU 0; device memory allocated; a dmabuf of it exported and checked;
//   2. the plugin (its path as the first argument) opened at ABI v12: ptrSupport must carry
//      NCCL_PTR_CUDA;
//   3. loopback comms; the device buffer registered with regMrDmaBuf (the fd closed right after,
//      as NCCL does), a host buffer sent into it, iflush (PACT_GPU_FLUSH=always: the driver's
//      flush or the loopback read), the bytes copied back from the device and compared;
//   4. device to device: the device buffer sent into a second one, compared on the host.
// Prints one line per step and "GPU-MEMORY PASS" or "GPU-MEMORY FAIL: <why>". Exit 0 pass, 77 no
// usable driver or GPU (skipped), 1 failed. Runs in CI on the driver TEST DOUBLE as well (meson
// test gpu-memory-check-double), which proves the program, not the GPU.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cuda/driver.h"
#include "plugin/loader/net_plugin.h"
#include "transport/memory.h"

namespace {

using pact::loader::NetPlugin;
using Clock = std::chrono::steady_clock;

int failed(const std::string& why) {
  std::printf("GPU-MEMORY FAIL: %s\n", why.c_str());
  return 1;
}

uint8_t patternAt(size_t i, unsigned seed) { return static_cast<uint8_t>((i * 2654435761u + seed) >> 7); }

// Tests a request until done; false on error or after 20 s.
bool complete(NetPlugin& plugin, void* req, int* size = nullptr) {
  const auto end = Clock::now() + std::chrono::seconds(20);
  int done = 0, sizes[8] = {};
  while (!done && Clock::now() < end)
    if (plugin.test(req, &done, sizes) != pact::loader::kSuccess) return false;
  if (size) *size = sizes[0];
  return done != 0;
}

bool moveOne(NetPlugin& plugin, void* sc, void* rc, void* src, void* smh, void* dst, void* rmh, size_t n) {
  void* rreq = nullptr;
  void* sreq = nullptr;
  size_t cap = n;
  int tag = 1;
  const auto end = Clock::now() + std::chrono::seconds(20);
  while (rreq == nullptr && Clock::now() < end)
    if (plugin.irecv(rc, 1, &dst, &cap, &tag, &rmh, &rreq) != pact::loader::kSuccess) return false;
  while (sreq == nullptr && Clock::now() < end)
    if (plugin.isend(sc, src, n, 1, smh, &sreq) != pact::loader::kSuccess) return false;
  int got = 0;
  return rreq && sreq && complete(plugin, sreq) && complete(plugin, rreq, &got) && got == static_cast<int>(n);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s PLUGIN.so [BYTES]\n", argv[0]);
    return 2;
  }
  const size_t n = argc > 2 ? std::strtoull(argv[2], nullptr, 0) : (8u << 20);
  setenv("PACT_GPU_FLUSH", "always", 0);
  const char* path = std::getenv("PACT_CUDA_DRIVER");
  const pact::cuda::Driver& d = pact::cuda::Driver::instance(path ? path : "");
  if (!d.available()) {
    std::printf("GPU-MEMORY SKIP: %s\n", d.why().c_str());
    return 77;
  }
  auto facts = d.device(0);
  if (!facts.ok()) return failed(facts.error().message);
  std::printf("driver %d.%d at %s%s, GPU 0 %s: dmabuf %d, GPUDirect RDMA %d, flush options %#x\n",
              d.version() / 1000, d.version() % 1000 / 10, d.path().c_str(),
              d.hostBacked() ? " (TEST DOUBLE)" : "", facts->pciBusId.c_str(), facts->dmabuf,
              facts->gdrRdma, facts->flushOptions);

  auto devA = d.allocate(0, n);
  auto devB = d.allocate(0, n);
  if (!devA.ok() || !devB.ok()) return failed("cuMemAlloc: " + (devA.ok() ? devB : devA).error().message);
  int fd = -1;
  if (auto e = d.exportDmabuf(*devA, n); e.ok()) {
    fd = *e;
    std::string why;
    const pact::Status s = pact::transport::checkDmabuf(fd, 0, n, &why);
    char link[128] = {};
    (void)readlink(("/proc/self/fd/" + std::to_string(fd)).c_str(), link, sizeof link - 1);
    std::printf("dmabuf export: fd %d (%s), pact's check: %s\n", fd, link, s == pact::Status::kOk ? "ok" : why.c_str());
    if (s != pact::Status::kOk) return failed("a dmabuf the driver exported fails pact's check: " + why);
  } else {
    std::printf("dmabuf export: no (%s); registering with regMr instead\n", e.error().message.c_str());
  }

  std::string error;
  auto plugin = NetPlugin::open(argv[1], 12, &error);
  if (!plugin) return failed("open " + std::string(argv[1]) + ": " + error);
  if (plugin->init() != pact::loader::kSuccess) return failed("init");
  pact::loader::Properties props;
  if (plugin->getProperties(0, &props) != pact::loader::kSuccess) return failed("getProperties");
  std::printf("device 0 %s: ptrSupport %#x\n", props.name.c_str(), props.ptrSupport);
  if ((props.ptrSupport & pact::loader::kPtrCuda) == 0)
    return failed("the plugin does not report NCCL_PTR_CUDA (pact-info says why)");

  char handle[pact::loader::kHandleSize] = {};
  void* lc = nullptr;
  void* sc = nullptr;
  void* rc = nullptr;
  if (plugin->listen(0, handle, &lc) != pact::loader::kSuccess) return failed("listen");
  const auto end = Clock::now() + std::chrono::seconds(20);
  while ((sc == nullptr || rc == nullptr) && Clock::now() < end) {
    if (sc == nullptr && plugin->connect(0, handle, &sc) != pact::loader::kSuccess) return failed("connect");
    if (rc == nullptr && plugin->accept(lc, &rc) != pact::loader::kSuccess) return failed("accept");
  }
  plugin->closeListen(lc);
  if (sc == nullptr || rc == nullptr) return failed("loopback connect/accept did not finish in 20 s");

  std::vector<uint8_t> host(n), back(n);
  for (size_t i = 0; i < n; ++i) host[i] = patternAt(i, 1);
  void* hostMh = nullptr;
  void* aMh = nullptr;
  void* bMh = nullptr;
  if (plugin->regMr(sc, host.data(), n, pact::loader::kPtrHost, &hostMh) != pact::loader::kSuccess)
    return failed("regMr host");
  const int reg = fd >= 0 ? plugin->regMrDmaBuf(rc, *devA, n, pact::loader::kPtrCuda, 0, fd, &aMh)
                          : plugin->regMr(rc, *devA, n, pact::loader::kPtrCuda, &aMh);
  if (fd >= 0) close(fd);  // NCCL closes it right after the call
  if (reg != pact::loader::kSuccess) return failed(fd >= 0 ? "regMrDmaBuf of device memory" : "regMr CUDA");
  std::printf("registered device memory (%s)\n", fd >= 0 ? "regMrDmaBuf, fd closed after" : "regMr");

  const auto t0 = Clock::now();
  if (!moveOne(*plugin, sc, rc, host.data(), hostMh, *devA, aMh, n)) return failed("host -> device transfer");
  int size = static_cast<int>(n);
  void* data = *devA;
  void* freq = nullptr;
  if (plugin->iflush(rc, 1, &data, &size, &aMh, &freq) != pact::loader::kSuccess) return failed("iflush");
  if (freq != nullptr && !complete(*plugin, freq)) return failed("the iflush request did not complete");
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  if (d.copyToHost(back.data(), *devA, n) != pact::Status::kOk) return failed("cuMemcpyDtoH");
  if (back != host) return failed("bytes in device memory differ from what was sent");
  std::printf("host -> device %zu bytes + iflush (%s): %.2f ms, bytes checked\n", n,
              freq ? "loopback read" : "driver flush", ms);

  if (plugin->regMr(sc, *devA, n, pact::loader::kPtrCuda, &bMh) != pact::loader::kSuccess) return failed("regMr CUDA (send)");
  void* dstMh = nullptr;
  if (plugin->regMr(rc, *devB, n, pact::loader::kPtrCuda, &dstMh) != pact::loader::kSuccess) return failed("regMr CUDA (recv)");
  if (!moveOne(*plugin, sc, rc, *devA, bMh, *devB, dstMh, n)) return failed("device -> device transfer");
  std::fill(back.begin(), back.end(), 0);
  if (d.copyToHost(back.data(), *devB, n) != pact::Status::kOk || back != host)
    return failed("device -> device: bytes differ");
  std::printf("device -> device %zu bytes: bytes checked\n", n);

  plugin->deregMr(sc, hostMh);
  plugin->deregMr(rc, aMh);
  plugin->deregMr(sc, bMh);
  plugin->deregMr(rc, dstMh);
  plugin->closeSend(sc);
  plugin->closeRecv(rc);
  plugin->finalize();
  (void)d.release(*devA);
  (void)d.release(*devB);
  std::printf("GPU-MEMORY PASS\n");
  return 0;
}
