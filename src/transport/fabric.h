// Fabric: the UCX side of one face instance (the plugin's Net, or one Engine). It owns the
// network devices the face may use and one DeviceCtx (UCP context + worker per rail, with its
// registration cache) per distinct (device, service) setting, opened on first use: classes whose
// profiles map to equal UCX settings share one. Neither face creates UCX contexts or workers of
// its own; they ask their Fabric.
//
// Thread-safe: open/makeVDevice may run on NCCL's service thread while another thread reads
// device facts. The DeviceCtx it hands out is shared (shared_ptr) with the comms, transfers and
// memory handles that use it, so it lives until the last of them is gone.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "transport/params.h"
#include "transport/device_ctx.h"
#include "transport/service.h"
#include "ucx/devices.h"

namespace pact::transport {

class Fabric {
 public:
  // The device UCX chooses itself (no PACT_NET_DEVICES match): open(kAnyDevice, ...).
  static constexpr int kAnyDevice = -1;

  // Discovers the devices of PACT_NET_DEVICES and checks every class of the table against each
  // (a class with fallback=fail on a device without its service is the error, naming both).
  // features: the UCP_FEATURE_* bits of every context this fabric opens (the plugin uses tags;
  // the engine active messages and wakeup). face names it in logs ("plugin", "engine e1").
  // eagerWhole: a class's contexts carry its `eager` offers as whole active messages (the
  // engine; serviceFor's eagerWhole).
  static Result<std::unique_ptr<Fabric>> create(const Params& params, uint64_t features,
                                                std::string face, bool eagerWhole = false);
  Fabric(const Fabric&) = delete;
  Fabric& operator=(const Fabric&) = delete;

  const Params& params() const { return params_; }
  int deviceCount() const;
  // A copy: makeVDevice may grow the list from another thread. kAnyDevice: an unnamed device.
  ucx::DeviceInfo deviceInfo(int dev) const;
  // Fuses distinct physical devices into a virtual one appended to the list; *dev is its index.
  Status makeVDevice(const std::vector<int>& members, int* dev);

  // The context serving a class (its profile, named className in messages) on dev.
  Result<std::shared_ptr<DeviceCtx>> open(int dev, const Profile& profile, std::string_view className);

  // Every context opened so far.
  std::vector<std::shared_ptr<DeviceCtx>> opened() const;

 private:
  Fabric(const Params& params, uint64_t features, std::string face, bool eagerWhole)
      : params_(params), features_(features), face_(std::move(face)), eagerWhole_(eagerWhole) {}
  const ucx::DeviceInfo& infoLocked(int dev) const;

  Params params_;
  uint64_t features_;
  std::string face_;
  bool eagerWhole_ = false;
  ucx::DeviceInfo any_;  // kAnyDevice
  mutable std::mutex mu_;  // guards devices_ growth, opened_ and warned_
  std::vector<ucx::DeviceInfo> devices_;
  // (dev, contextKey)
  std::map<std::pair<int, std::string>, std::shared_ptr<DeviceCtx>> opened_;
  std::set<std::string> warned_;  // class/device pairs whose fallback was already reported
};

}  // namespace pact::transport
