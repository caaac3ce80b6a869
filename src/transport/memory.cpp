#include "transport/memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <mutex>

#include "pact_config.h"

namespace pact::transport {

MemorySupport decideMemory(const MemoryFacts& f) {
  MemorySupport s;
  if (!f.driver)
    s.cudaWhy = f.driverWhy.empty() ? "no usable CUDA driver" : f.driverWhy;
  else if (f.gpus <= 0)
    s.cudaWhy = "the CUDA driver sees no GPU";
  else if (!f.ucpCuda && !f.hostBacked)
    s.cudaWhy = "UCX " + f.ucxVersion + " lists no CUDA memory type (built without CUDA, or its "
                "cuda modules found no driver)";
  else
    s.ptrSupport |= kPtrCuda;

  if (!s.cuda())
    s.dmabufWhy = "no CUDA memory";
  else if (!f.ucxDmabufBuilt)
    s.dmabufWhy = "UCX " + f.ucxVersion + " headers have no dmabuf registration (UCX >= 1.14)";
  else if (!f.mdDmabuf)
    s.dmabufWhy = "no memory domain of the device's transports registers dmabuf fds (an RDMA NIC's does)";
  else if (!f.gpuDmabuf)
    s.dmabufWhy = "no GPU reports dmabuf support";
  else if (!f.driverExport)
    s.dmabufWhy = f.exportWhy.empty() ? "the driver cannot export a dmabuf" : f.exportWhy;
  else
    s.ptrSupport |= kPtrDmabuf;

  if (!s.cuda())
    s.flushMethod = "none (no CUDA memory)";
  else if (!f.rdma)
    s.flushMethod = "none (tcp and shared memory land GPU data through driver copies)";
  else
    s.flushMethod = f.gpuDirectRdma && f.hostFlush ? "driver" : "loopback read";
  return s;
}

bool ucpListsCuda(std::string* version) {
  static std::once_flag once;
  static bool cuda = false;
  static std::string text;
  std::call_once(once, [] {
    text = ucx::version().text();
    // A bare context, only to ask: what UCX can do with memory does not depend on the devices.
    if (auto ctx = ucx::Context::create("", "pact-probe"); ctx.ok())
      cuda = (ctx->memoryTypes() & UCS_BIT(UCS_MEMORY_TYPE_CUDA)) != 0;
  });
  if (version != nullptr) *version = text;
  return cuda;
}

MemoryFacts gatherMemoryFacts(const ucx::DeviceInfo& device, const cuda::Driver& driver) {
  MemoryFacts f;
  f.driver = driver.available();
  f.driverWhy = driver.why();
  f.gpus = f.driver ? driver.deviceCount() : 0;
  f.hostBacked = driver.hostBacked();
  for (int g = 0; g < f.gpus; ++g) {
    auto d = driver.device(g);
    if (!d.ok()) continue;
    f.gpuDmabuf = f.gpuDmabuf || d->dmabuf;
    f.gpuDirectRdma = f.gpuDirectRdma || d->gdrRdma;
    f.hostFlush = f.hostFlush || (d->gdrRdma && d->hostFlush());
  }
  f.driverExport = driver.canExportDmabuf(&f.exportWhy);
  f.ucpCuda = ucpListsCuda(&f.ucxVersion);
  f.ucxDmabufBuilt = PACT_UCX_HAVE_DMABUF != 0;
  for (const auto& md : device.domains) f.mdDmabuf = f.mdDmabuf || md.dmabuf;
  f.rdma = device.rdma;
  return f;
}

Status checkDmabuf(int fd, uint64_t offset, size_t size, std::string* why) {
  auto no = [&](std::string text, Status s = Status::kInvalidArgument) {
    *why = std::move(text);
    return s;
  };
  const std::string name = "dmabuf fd " + std::to_string(fd);
  if (fd < 0 || fcntl(fd, F_GETFD) < 0) return no(name + " is not an open file descriptor");
  struct stat st{};
  if (fstat(fd, &st) != 0) return no(name + ": fstat failed: " + std::strerror(errno), Status::kSystemError);
  // A dmabuf's inode carries the buffer's size; the kernel names its files "/dmabuf:..." (older
  // kernels "anon_inode:dmabuf").
  char link[256] = {};
  const std::string self = "/proc/self/fd/" + std::to_string(fd);
  const ssize_t n = readlink(self.c_str(), link, sizeof link - 1);
  const std::string target = n > 0 ? std::string(link, static_cast<size_t>(n)) : std::string();
  const bool dmabuf = target.rfind("/dmabuf:", 0) == 0 || target.find("dmabuf") != std::string::npos;
  if (!dmabuf) {
    // Not a dmabuf: at least a file that can be mapped (a memfd, the driver double's export).
    const long page = sysconf(_SC_PAGESIZE);
    void* p = mmap(nullptr, static_cast<size_t>(page), PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED)
      return no(name + " (" + (target.empty() ? "?" : target) + ") is neither a dmabuf nor a mappable file: " +
                std::strerror(errno));
    munmap(p, static_cast<size_t>(page));
  }
  const auto fdSize = static_cast<uint64_t>(st.st_size);
  if (offset > fdSize || size > fdSize - offset)
    return no(name + ": offset " + std::to_string(offset) + " + size " + std::to_string(size) +
                  " exceeds its size " + std::to_string(fdSize),
              Status::kOutOfRange);
  return Status::kOk;
}

}  // namespace pact::transport
