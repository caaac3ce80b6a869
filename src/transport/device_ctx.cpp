#include "transport/device_ctx.h"

#include "common/log.h"
#include "transport/channel.h"

namespace pact::transport {

Result<std::shared_ptr<DeviceCtx>> DeviceCtx::open(const ucx::DeviceInfo& info, const Params& params) {
  std::shared_ptr<DeviceCtx> d(new DeviceCtx(info, params));
  auto ctx = ucx::Context::create(info.ucxDevices(), "pact-" + info.name);
  if (!ctx.ok()) return ctx.error();
  d->context_ = std::move(ctx.value());
  auto worker = ucx::Worker::create(d->context_);
  if (!worker.ok()) return worker.error();
  d->worker_ = std::move(worker.value());
  d->cache_ = std::make_unique<ucx::RegCache>(d->context_.get());
  PACT_INFO("device %s opened: ucx worker address %zu bytes", info.name.c_str(),
            d->worker_.address().size());
  return d;
}

void DeviceCtx::adoptOrphans(std::unique_ptr<RequestPool> pool) {
  std::erase_if(orphans_, [](const std::unique_ptr<RequestPool>& p) {
    bool busy = false;
    p->forEachInUse([&](Request& r) { busy = busy || !r.done(); });
    return !busy;
  });
  if (pool) orphans_.push_back(std::move(pool));
}

Result<uint32_t> DeviceCtx::allocTagSpace() {
  if (nextTagSpace_ >= tag::kSpaces)
    return Error{Status::kNoResource, "device " + info_.name + ": all 65535 receive tag spaces used"};
  return nextTagSpace_++;
}

}  // namespace pact::transport
