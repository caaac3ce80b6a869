#include "transport/fabric.h"

#include <algorithm>

#include "common/log.h"

namespace pact::transport {

Result<std::unique_ptr<Fabric>> Fabric::create(const Params& params, uint64_t features,
                                               std::string face, bool eagerWhole) {
  std::unique_ptr<Fabric> f(new Fabric(params, features, std::move(face), eagerWhole));
  auto devs = ucx::discoverDevices(params.net_devices);
  if (!devs.ok()) return devs.error();
  f->devices_ = std::move(devs.value());
  // A class that must not fall back fails here, naming the class and the device.
  for (const auto& d : f->devices_) {
    auto services = servicesFor(params.classes, d);
    if (!services.ok()) return services.error();
  }
  return f;
}

int Fabric::deviceCount() const {
  std::lock_guard lock(mu_);
  return static_cast<int>(devices_.size());
}

const ucx::DeviceInfo& Fabric::infoLocked(int dev) const {
  return dev == kAnyDevice ? any_ : devices_[static_cast<size_t>(dev)];
}

ucx::DeviceInfo Fabric::deviceInfo(int dev) const {
  std::lock_guard lock(mu_);
  if (dev != kAnyDevice && (dev < 0 || static_cast<size_t>(dev) >= devices_.size())) return {};
  return infoLocked(dev);
}

Status Fabric::makeVDevice(const std::vector<int>& members, int* dev) {
  std::lock_guard lock(mu_);
  std::vector<const ucx::DeviceInfo*> ports;
  for (int m : members) {
    const bool physical = m >= 0 && static_cast<size_t>(m) < devices_.size() &&
                          devices_[static_cast<size_t>(m)].members.empty();
    if (!physical || std::count(members.begin(), members.end(), m) > 1) {
      PACT_WARN("makeVDevice: member %d is not a distinct physical device", m);
      return Status::kInvalidArgument;
    }
    ports.push_back(&devices_[static_cast<size_t>(m)]);
  }
  if (ports.empty() || ports.size() > 8) {
    PACT_WARN("makeVDevice: %zu members; 1 to 8 are allowed", ports.size());
    return Status::kInvalidArgument;
  }
  devices_.push_back(ucx::fuseDevices(ports, members));
  *dev = static_cast<int>(devices_.size() - 1);
  PACT_INFO("%s: virtual device %d = %s (%d Mbps)", face_.c_str(), *dev,
            devices_.back().name.c_str(), devices_.back().speedMbps);
  return Status::kOk;
}

Result<std::shared_ptr<DeviceCtx>> Fabric::open(int dev, const Profile& profile,
                                                std::string_view className) {
  std::lock_guard lock(mu_);
  if (dev != kAnyDevice && (dev < 0 || static_cast<size_t>(dev) >= devices_.size()))
    return Error{Status::kInvalidArgument, "device index " + std::to_string(dev) + " out of range"};
  const ucx::DeviceInfo& info = infoLocked(dev);
  auto svc = serviceFor(profile, info, className, eagerWhole_, params_.classes.yields(profile));
  if (!svc.ok()) return svc.error();
  if (!svc->fallbackWarning.empty() &&
      warned_.insert(std::string(className) + "/" + info.name).second)
    PACT_WARN("%s", svc->fallbackWarning.c_str());
  // Keyed by the asked service too (contextKey): a bulk class never queues another class's
  // messages behind its own on a host where both fall back to TCP.
  const std::string key = contextKey(profile, *svc);
  auto& slot = opened_[{dev, key}];
  if (!slot) {
    auto d = DeviceCtx::open(info, params_, svc->ucxSettings, features_, key);
    if (!d.ok()) return d.error();
    slot = std::move(d.value());
    PACT_INFO("%s: device %s: UCX context for service %s", face_.c_str(),
              info.name.empty() ? "(ucx default)" : info.name.c_str(), svc->summary.c_str());
  }
  return slot;
}

std::vector<std::shared_ptr<DeviceCtx>> Fabric::opened() const {
  std::lock_guard lock(mu_);
  std::vector<std::shared_ptr<DeviceCtx>> out;
  for (const auto& [key, d] : opened_) out.push_back(d);
  return out;
}

}  // namespace pact::transport
