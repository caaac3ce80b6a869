// GPU memory through the NCCL ABI, on the CUDA driver TEST DOUBLE (tests/cuda_double, named by
// PACT_CUDA_DRIVER in meson): ptrSupport, regMr with NCCL_PTR_CUDA, regMrDmaBuf and its checks,
// transfers into "device" buffers, and when iflush flushes (driver call or loopback read).
// The double's device memory is host memory: these tests prove pact's decisions and byte paths,
// not that a real GPU sees the bytes (ci/gpu-check.sh does that on a GPU machine; docs/gpu.md).
// Every case runs in its own child: the variables it sets are read at the plugin's init.
#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>

#include "pact/nccl_ext.h"
#include "tests/abi/harness.h"
#include "tests/common/scoped_env.h"

namespace pact::abi_test {
namespace {

// The double, as the test child reaches it: the same library instance the plugin loads (same
// path), so allocations and counters are shared.
class DoubleGpu {
 public:
  explicit DoubleGpu(const std::string& config) {
    const char* path = std::getenv("PACT_CUDA_DRIVER");
    lib_ = path ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : nullptr;
    if (lib_ == nullptr) {
      ADD_FAILURE() << "PACT_CUDA_DRIVER does not name the driver double";
      return;
    }
    reinterpret_cast<void (*)(const char*)>(sym("pact_cuda_double_configure"))(config.c_str());
    reinterpret_cast<int (*)(unsigned)>(sym("cuInit"))(0);
    void* ctx = nullptr;
    reinterpret_cast<int (*)(void**, int)>(sym("cuDevicePrimaryCtxRetain"))(&ctx, 0);
    reinterpret_cast<int (*)(void*)>(sym("cuCtxPushCurrent_v2"))(ctx);  // allocations on device 0
  }
  void* alloc(size_t n) {
    unsigned long long p = 0;
    EXPECT_EQ(reinterpret_cast<int (*)(unsigned long long*, size_t)>(sym("cuMemAlloc_v2"))(&p, n), 0);
    return reinterpret_cast<void*>(p);
  }
  void free(void* p) {
    EXPECT_EQ(reinterpret_cast<int (*)(unsigned long long)>(sym("cuMemFree_v2"))(
                  reinterpret_cast<unsigned long long>(p)),
              0);
  }
  int exportDmabuf(void* p, size_t n) {
    int fd = -1;
    EXPECT_EQ(reinterpret_cast<int (*)(void*, unsigned long long, size_t, int, unsigned long long)>(
                  sym("cuMemGetHandleForAddressRange"))(&fd, reinterpret_cast<unsigned long long>(p), n, 1, 0),
              0);
    return fd;
  }
  long flushes() { return reinterpret_cast<long (*)()>(sym("pact_cuda_double_flushes"))(); }
  long copies() { return reinterpret_cast<long (*)()>(sym("pact_cuda_double_copies"))(); }

 private:
  void* sym(const char* name) {
    void* s = dlsym(lib_, name);
    EXPECT_NE(s, nullptr) << name;
    return s;
  }
  void* lib_ = nullptr;
};

// One message from src (mhSrc) into dst (mhDst) over loopback comms, tested in one thread.
void moveOne(NetPlugin& plugin, void* sendComm, void* recvComm, void* src, void* mhSrc, void* dst,
             void* mhDst, size_t size) {
  Deadline deadline(kOpTimeout);
  void* rreq = nullptr;
  void* sreq = nullptr;
  size_t cap = size;
  int tag = kTag;
  ASSERT_NO_FATAL_FAILURE(postRecv(plugin, recvComm, 1, &dst, &cap, &tag, &mhDst, deadline, &rreq));
  ASSERT_NO_FATAL_FAILURE(postSend(plugin, sendComm, src, size, kTag, mhSrc, deadline, &sreq));
  expectComplete(plugin, sreq, deadline, "send");
  Completion rc = expectComplete(plugin, rreq, deadline, "receive");
  EXPECT_EQ(rc.sizes[0], static_cast<int>(size));
}

struct Loopback {
  std::unique_ptr<NetPlugin> plugin;
  void* send = nullptr;
  void* recv = nullptr;
  explicit Loopback(int version) : plugin(openPlugin(version)) {
    if (plugin) connectLoopback(*plugin, 0, false, &send, &recv);
  }
  ~Loopback() {
    if (!plugin) return;
    if (send) {
      EXPECT_EQ(plugin->closeSend(send), loader::kSuccess);
    }
    if (recv) {
      EXPECT_EQ(plugin->closeRecv(recv), loader::kSuccess);
    }
  }
};

// In a child: the plugin at `version` with loopback comms and the double's GPU 0, then body.
void withLoopbackGpu(const char* name, int version, const std::string& gpuConfig,
                     const std::function<void(NetPlugin&, Loopback&, DoubleGpu&)>& body) {
  runInChild(name, [&] {
    DoubleGpu gpu(gpuConfig);  // first: the plugin reads the device facts when it loads the driver
    Loopback lb(version);
    ASSERT_TRUE(lb.plugin && lb.send && lb.recv);
    body(*lb.plugin, lb, gpu);
  });
}

class Gpu : public ::testing::TestWithParam<int> {};

// ptrSupport of device 0 in a child that sets var=value before it opens the plugin.
void expectPtrSupport(int version, const char* var, const char* value, int expected) {
  runInChild(var, [=] {
    const test::ScopedEnv env(var, value);
    auto plugin = openPlugin(version);
    ASSERT_TRUE(plugin);
    loader::Properties p;
    ASSERT_EQ(plugin->getProperties(0, &p), loader::kSuccess);
    EXPECT_EQ(p.ptrSupport, expected) << var << "=" << value;
    EXPECT_TRUE(plugin->hasRegMrDmaBuf()) << "regMrDmaBuf is in every table (v8..v12)";
  });
}

TEST_P(Gpu, PtrSupportFollowsTheDriverAndUcx) {
  // The double's memory is host memory UCX can move; no memory domain of lo registers dmabuf fds
  // (only an RDMA NIC's does), so no DMABUF, with either UCX.
  expectPtrSupport(GetParam(), "PACTTEST_CUDA_DOUBLE", "gpus=1", loader::kPtrHost | loader::kPtrCuda);
  expectPtrSupport(GetParam(), "PACT_CUDA_DRIVER", "libpact-no-such-cuda-driver.so.1", loader::kPtrHost);
}

TEST_P(Gpu, RegMrCudaAndDmabufChecks) {
  withLoopbackGpu("registration", GetParam(), "gpus=1", [](NetPlugin& plugin, Loopback& lb, DoubleGpu& gpu) {
    const size_t n = 1 << 20;
    void* dev = gpu.alloc(n);
    void* mh = nullptr;
    ASSERT_EQ(plugin.regMr(lb.recv, dev, n, loader::kPtrCuda, &mh), loader::kSuccess);
    EXPECT_EQ(plugin.deregMr(lb.recv, mh), loader::kSuccess);

    HostBuffer host(n);
    mh = reinterpret_cast<void*>(0x1);
    EXPECT_EQ(plugin.regMr(lb.recv, host.data(), n, loader::kPtrCuda, &mh), loader::kInvalidArgument)
        << "host memory passed as CUDA memory";
    EXPECT_EQ(mh, nullptr);

    // A valid dmabuf: registered, the fd closed at once (as NCCL does), then used.
    int fd = gpu.exportDmabuf(dev, n);
    ASSERT_GE(fd, 0);
    void* dmh = nullptr;
    ASSERT_EQ(plugin.regMrDmaBuf(lb.recv, dev, n, loader::kPtrCuda, 0, fd, &dmh), loader::kSuccess);
    close(fd);
    HostBuffer src(n);
    fillPattern(src.data(), n, 77);
    void* smh = nullptr;
    ASSERT_EQ(plugin.regMr(lb.send, src.data(), n, loader::kPtrHost, &smh), loader::kSuccess);
    ASSERT_NO_FATAL_FAILURE(moveOne(plugin, lb.send, lb.recv, src.data(), smh, dev, dmh, n));
    EXPECT_TRUE(matchesPattern(dev, n, 77)) << "bytes in the dmabuf-registered device buffer";
    EXPECT_EQ(plugin.deregMr(lb.recv, dmh), loader::kSuccess);
    EXPECT_EQ(plugin.deregMr(lb.send, smh), loader::kSuccess);

    // The checks, each refused with no handle.
    auto refused = [&](const char* what, uint64_t offset, int badFd, size_t size) {
      void* h = reinterpret_cast<void*>(0x1);
      EXPECT_EQ(plugin.regMrDmaBuf(lb.recv, dev, size, loader::kPtrCuda, offset, badFd, &h),
                loader::kInvalidArgument)
          << what;
      EXPECT_EQ(h, nullptr) << what;
    };
    fd = gpu.exportDmabuf(dev, n);
    refused("offset out of range", n, fd, 4096);
    refused("size larger than the fd", 0, fd, n + 4096);
    int pipeFds[2];
    ASSERT_EQ(pipe(pipeFds), 0);
    refused("a fd that cannot be mapped (a pipe)", 0, pipeFds[0], 4096);
    close(pipeFds[0]);
    close(pipeFds[1]);
    close(fd);
    refused("a closed fd", 0, fd, 4096);
    gpu.free(dev);
  });
}

TEST_P(Gpu, TransfersIntoDeviceBuffersAreByteExact) {
  withLoopbackGpu("transfers", GetParam(), "gpus=1", [](NetPlugin& plugin, Loopback& lb, DoubleGpu& gpu) {
    for (size_t size : {size_t{4096}, size_t{4} << 20}) {
      SCOPED_TRACE(size);
      void* devSrc = gpu.alloc(size);
      void* devDst = gpu.alloc(size);
      fillPattern(devSrc, size, size);
      std::memset(devDst, kPoison, size);
      void* smh = nullptr;
      void* rmh = nullptr;
      ASSERT_EQ(plugin.regMr(lb.send, devSrc, size, loader::kPtrCuda, &smh), loader::kSuccess);
      ASSERT_EQ(plugin.regMr(lb.recv, devDst, size, loader::kPtrCuda, &rmh), loader::kSuccess);
      ASSERT_NO_FATAL_FAILURE(moveOne(plugin, lb.send, lb.recv, devSrc, smh, devDst, rmh, size));
      EXPECT_TRUE(matchesPattern(devDst, size, size)) << "device to device";
      EXPECT_EQ(plugin.deregMr(lb.send, smh), loader::kSuccess);
      EXPECT_EQ(plugin.deregMr(lb.recv, rmh), loader::kSuccess);
      gpu.free(devSrc);
      gpu.free(devDst);
    }
  });
}

// verify on device buffers: each side reads its checks through the driver's copies into its
// staging buffer (the CPU never reads device memory), and the transfer completes byte-exact.
TEST_P(Gpu, VerifiedTransfersOfDeviceBuffersReadTheirChecksThroughTheDriver) {
  runInChild("verify", [v = GetParam()] {
    const test::ScopedEnv env("PACT_TC_DEFAULT", "unordered,chunk=1M,verify=crc32c");
    DoubleGpu gpu("gpus=1");
    Loopback lb(v);
    ASSERT_TRUE(lb.plugin && lb.send && lb.recv);
    NetPlugin& plugin = *lb.plugin;
    constexpr size_t kSize = (3 << 20) + 5;  // 4 pieces, each read through the 1 MiB staging buffer
    void* devSrc = gpu.alloc(kSize);
    void* devDst = gpu.alloc(kSize);
    fillPattern(devSrc, kSize, 9);
    std::memset(devDst, kPoison, kSize);
    void *smh = nullptr, *rmh = nullptr;
    ASSERT_EQ(plugin.regMr(lb.send, devSrc, kSize, loader::kPtrCuda, &smh), loader::kSuccess);
    ASSERT_EQ(plugin.regMr(lb.recv, devDst, kSize, loader::kPtrCuda, &rmh), loader::kSuccess);
    const long before = gpu.copies();
    Deadline deadline(kOpTimeout);
    void *rreq = nullptr, *sreq = nullptr;
    size_t cap = kSize;
    int tag = kTag;
    void* dst = devDst;
    ASSERT_NO_FATAL_FAILURE(postRecv(plugin, lb.recv, 1, &dst, &cap, &tag, &rmh, deadline, &rreq));
    ASSERT_NO_FATAL_FAILURE(postSend(plugin, lb.send, devSrc, kSize, kTag, smh, deadline, &sreq));
    // A verified send completes at the receiver's verdict: both tested in turn, as NCCL's proxy does.
    for (int sendDone = 0, recvDone = 0, size = 0; sendDone == 0 || recvDone == 0;) {
      ASSERT_FALSE(deadline.expired()) << "send " << sendDone << " receive " << recvDone;
      if (recvDone == 0) {
        ASSERT_EQ(plugin.test(rreq, &recvDone, &size), loader::kSuccess);
        if (recvDone != 0) {
          EXPECT_EQ(size, static_cast<int>(kSize));
        }
      }
      if (sendDone == 0) {
        ASSERT_EQ(plugin.test(sreq, &sendDone, nullptr), loader::kSuccess);
      }
    }
    EXPECT_TRUE(matchesPattern(devDst, kSize, 9));
    EXPECT_GE(gpu.copies() - before, 8) << "4 pieces checked on each side through the driver";
    EXPECT_EQ(plugin.deregMr(lb.send, smh), loader::kSuccess);
    EXPECT_EQ(plugin.deregMr(lb.recv, rmh), loader::kSuccess);
    gpu.free(devSrc);
    gpu.free(devDst);
  });
}

// iflush: request, driver flushes and loopback reads as PACT_GPU_FLUSH and the device decide.
struct FlushCase {
  const char* name;
  const char* mode;    // PACT_GPU_FLUSH
  const char* gpu;     // the double's configuration
  bool cuda;           // the receive buffer is device memory
  bool request;        // iflush hands back a request
  long driverFlushes;  // the double's count
  uint64_t reads;      // gpu_flush_reads
};

class Flush : public ::testing::TestWithParam<FlushCase> {};

TEST_P(Flush, FlushesExactlyWhenItMust) {
  const FlushCase c = GetParam();
  test::ScopedEnv mode("PACT_GPU_FLUSH", c.mode);  // the child inherits it
  withLoopbackGpu(c.name, 12, c.gpu, [&c](NetPlugin& plugin, Loopback& lb, DoubleGpu& gpu) {
    const size_t n = 64 << 10;
    HostBuffer src(n), hostDst(n);
    void* dst = c.cuda ? gpu.alloc(n) : hostDst.data();
    void* smh = nullptr;
    void* rmh = nullptr;
    ASSERT_EQ(plugin.regMr(lb.send, src.data(), n, loader::kPtrHost, &smh), loader::kSuccess);
    ASSERT_EQ(plugin.regMr(lb.recv, dst, n, c.cuda ? loader::kPtrCuda : loader::kPtrHost, &rmh),
              loader::kSuccess);
    ASSERT_NO_FATAL_FAILURE(moveOne(plugin, lb.send, lb.recv, src.data(), smh, dst, rmh, n));
    const long before = gpu.flushes();
    int size = static_cast<int>(n);
    void* req = reinterpret_cast<void*>(0x1);
    ASSERT_EQ(plugin.iflush(lb.recv, 1, &dst, &size, &rmh, &req), loader::kSuccess);
    EXPECT_EQ(req != nullptr, c.request);
    if (req != nullptr) expectComplete(plugin, req, Deadline(kOpTimeout), "flush");
    EXPECT_EQ(gpu.flushes() - before, c.driverFlushes);
    const pact_comm_stats_t s = statsOf(plugin, lb.recv);
    EXPECT_EQ(s.gpu_flushes, static_cast<uint64_t>(c.driverFlushes));
    EXPECT_EQ(s.gpu_flush_reads, c.reads);
    // Nothing received (size 0): never a flush.
    size = 0;
    req = reinterpret_cast<void*>(0x1);
    ASSERT_EQ(plugin.iflush(lb.recv, 1, &dst, &size, &rmh, &req), loader::kSuccess);
    EXPECT_EQ(req, nullptr);
    EXPECT_EQ(plugin.deregMr(lb.send, smh), loader::kSuccess);
    EXPECT_EQ(plugin.deregMr(lb.recv, rmh), loader::kSuccess);
    if (c.cuda) gpu.free(dst);
  });
}

INSTANTIATE_TEST_SUITE_P(
    Modes, Flush,
    ::testing::Values(
        // tcp and shared memory land GPU data through driver copies: auto does nothing.
        FlushCase{"AutoOverTcp", "auto", "gpus=1", true, false, 0, 0},
        FlushCase{"AlwaysWithTheDriversFlush", "always", "gpus=1,gdr=1,flush=1", true, false, 1, 0},
        FlushCase{"AlwaysWithoutIt", "always", "gpus=1,gdr=1,flush=0", true, true, 0, 1},
        FlushCase{"AlwaysNoGpuDirect", "always", "gpus=1,gdr=0,flush=1", true, true, 0, 1},
        FlushCase{"HostMemory", "always", "gpus=1", false, false, 0, 0},
        FlushCase{"Never", "never", "gpus=1", true, false, 0, 0}),
    [](const ::testing::TestParamInfo<FlushCase>& i) { return std::string(i.param.name); });

INSTANTIATE_TEST_SUITE_P(Versions, Gpu, ::testing::Values(8, 12), versionName);

}  // namespace
}  // namespace pact::abi_test
