#include "net/net.h"

#include <sys/resource.h>

#include <algorithm>

#include "common/log.h"

namespace pact::net {

namespace {

template <typename T>
bool valid(const T* p) {
  return p != nullptr && p->magic == T::kMagic;
}

}  // namespace

Result<std::shared_ptr<Net>> Net::create(const Params& params) {
  std::shared_ptr<Net> net(new Net(params));
  // PACT_FAULT for the plugin: a process on a skewed epoch (its peers refuse it) and one that
  // dies by SIGKILL after kill_after; the data-path faults go to each comm (channelFor).
  if (params.fault.active()) {
    PACT_WARN("fault injection active: %s", params.fault.describe().c_str());
    net->params_.epoch += params.fault.epochSkew;
    armKillAfter(params.fault);
  }
  auto fabric = transport::Fabric::create(net->params_, UCP_FEATURE_TAG, "plugin");
  if (!fabric.ok()) return fabric.error();
  net->fabric_ = std::move(fabric.value());
  if (net->fabric_->deviceCount() == 0)
    PACT_WARN("no usable network device (PACT_NET_DEVICES=%s); name lo to use loopback",
              params.net_devices.empty() ? "" : params.net_devices.front().c_str());
  return net;
}

Net::~Net() = default;

int Net::deviceCount() const { return fabric_->deviceCount(); }

Status Net::makeVDevice(const std::vector<int>& members, int* dev) {
  return fabric_->makeVDevice(members, dev);
}

Result<std::shared_ptr<DeviceCtx>> Net::device(int dev, int trafficClass) {
  const std::string cls = trafficClass < 0 ? "DEFAULT" : std::to_string(trafficClass);
  return fabric_->open(dev, params_.classes.forNccl(trafficClass), cls);
}

Result<uint32_t> Net::allocTagSpace(const DeviceCtx& d) {
  std::lock_guard lock(tagMu_);
  uint32_t& next = nextTagSpace_.try_emplace(&d, 1).first->second;
  if (next >= tag::kSpaces)
    return Error{Status::kNoResource, "device " + d.info().name + ": all 65535 receive tag spaces used"};
  return next++;
}

Net::Resources Net::resources() const {
  Resources r;
  for (const auto& d : fabric_->opened()) {
    r.comms += static_cast<int64_t>(d->counters().get(telemetry::kLiveComms));
    r.registrations += static_cast<int64_t>(d->counters().get(telemetry::kLiveMemHandles));
    std::lock_guard devLock(d->mutex());
    r.orphanedRequests += static_cast<int64_t>(d->orphanedRequests());
  }
  return r;
}

ChannelConfig Net::channelFor(int trafficClass) const {
  const Profile& p = params_.classes.forNccl(trafficClass);
  ChannelConfig c;
  c.ordered = p.order == Order::kOrdered;
  c.lanes = p.lanes;
  c.chunk = p.chunk;
  c.steering = p.steer == Steer::kAdaptive ? Steering::kAdaptive : Steering::kRoundRobin;
  c.retries = p.retries;
  c.fault = params_.fault;
  return c;
}

Status Net::properties(int dev, Properties* out) const {
  if (dev < 0 || dev >= fabric_->deviceCount()) return Status::kInvalidArgument;
  const ucx::DeviceInfo d = fabric_->deviceInfo(dev);
  rlimit nofile{};
  getrlimit(RLIMIT_NOFILE, &nofile);
  Properties p;
  p.name = d.name;
  p.pciPath = d.pciPath;
  p.guid = d.guid;
  p.ptrSupport = kPtrHost;
  p.regIsGlobal = 1;  // the registration cache serves any comm on the device
  p.forceFlush = 0;
  p.speedMbps = d.speedMbps;
  p.port = d.port;
  p.latencyUs = d.latencyUs;
  // Each comm holds one control socket plus UCX's own descriptors.
  p.maxComms = static_cast<int>(std::max<rlim_t>(1, std::min<rlim_t>(nofile.rlim_cur / 4, 1 << 20)));
  p.maxRecvs = params_.max_recvs;
  p.vDevs = d.memberIndices.empty() ? std::vector<int>{dev} : d.memberIndices;
  p.maxP2pBytes = size_t{1} << 40;  // NCCL's ceiling; UCX messages are 64-bit sized
  p.maxCollBytes = size_t{1} << 40;
  *out = std::move(p);
  return Status::kOk;
}

Status Net::regMr(Comm* comm, void* data, size_t size, ucx::MemoryType type, int dmabufFd,
                  uint64_t dmabufOffset, MemHandle** out) {
  *out = nullptr;
  if (!valid(comm)) return Status::kInvalidArgument;
  std::vector<std::shared_ptr<ucx::Region>> regions;
  for (size_t i = 0; i < comm->dev().rails(); ++i) {
    auto region = comm->dev().rail(i).cache->acquire({data, size, type, dmabufFd, dmabufOffset});
    if (!region.ok()) {
      PACT_WARN("regMr %p+%zu on %s: %s", data, size, comm->dev().info().name.c_str(),
                region.error().message.c_str());
      return region.status();
    }
    regions.push_back(std::move(region.value()));
  }
  auto* mh = new MemHandle{MemHandle::kMagic, comm->devPtr(), std::move(regions),
                          reinterpret_cast<uintptr_t>(data), size};
  comm->dev().counters().addShared(telemetry::kLiveMemHandles);
  *out = mh;
  return Status::kOk;
}

Status Net::deregMr(Comm* comm, MemHandle* mh) {
  if (mh == nullptr) return Status::kOk;
  if (!valid(mh)) return Status::kInvalidArgument;
  // After deregMr NCCL may free the buffer: a receive that UCX still holds (one a failed comm
  // cancelled while its rendezvous was under way) must not write into it afterwards.
  if (valid(comm)) {
    std::lock_guard lock(comm->dev().mutex());
    comm->drainRange(mh->base, mh->size);
  }
  mh->dev->counters().subShared(telemetry::kLiveMemHandles);
  delete mh;  // the region unmaps when its last handle is gone
  return Status::kOk;
}

Status Net::isend(SendComm* comm, void* data, size_t size, int tag, MemHandle* mh, Request** out) {
  if (!valid(comm)) return Status::kInvalidArgument;
  std::lock_guard lock(comm->dev().mutex());
  return comm->isend(data, size, tag, mh, out);
}

Status Net::irecv(RecvComm* comm, int n, void** data, const size_t* sizes, const int* tags,
                  MemHandle** mhs, Request** out) {
  if (!valid(comm)) return Status::kInvalidArgument;
  std::lock_guard lock(comm->dev().mutex());
  return comm->irecv(n, data, sizes, tags, mhs, out);
}

Status Net::iflush(RecvComm* comm, int, void**, const int*, MemHandle**, Request** out) {
  *out = nullptr;
  return valid(comm) ? comm->error() : Status::kInvalidArgument;
}

Status Net::test(Request* r, bool* done, int* sizes) {
  *done = false;
  if (!valid(r) || !r->inUse || !valid(r->comm)) return Status::kInvalidArgument;
  Comm* comm = r->comm;
  std::lock_guard lock(comm->dev().mutex());
  return comm->test(r, done, sizes);
}

namespace {
// Shuts a comm down and frees it, under its device's mutex (kept alive past the delete).
template <typename C>
Status closeComm(C* comm) {
  if (comm == nullptr) return Status::kOk;
  if (!valid(comm)) return Status::kInvalidArgument;
  auto dev = comm->devPtr();
  std::lock_guard lock(dev->mutex());
  comm->shutdown();
  delete comm;
  return Status::kOk;
}
}  // namespace

Status Net::closeSend(SendComm* comm) { return closeComm(comm); }
Status Net::closeRecv(RecvComm* comm) { return closeComm(comm); }

}  // namespace pact::net
