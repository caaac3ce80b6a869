// Service mapping: from a traffic class's profile and a device to the UCX settings of the class's
// UCP context (docs/traffic-classes.md has the table). Classes whose settings are equal share one
// context/worker per device (equal ServiceConfig::key).
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "transport/profile.h"
#include "common/status.h"
#include "ucx/devices.h"

namespace pact::transport {

struct ServiceConfig {
  // UCX settings without the UCX_ prefix, in a fixed order (TLS, IB_TRAFFIC_CLASS, IB_SL), for
  // ucx::Context::create. A key the user set in the environment (UCX_<KEY>) is left out: the
  // user's value wins.
  std::vector<std::pair<std::string, std::string>> ucxSettings;
  // Equal key = the classes share one UCP context/worker on a device. "ucx-default" when there
  // are no settings, else the settings as "K=V;K=V".
  std::string key;
  // One line: what the class asked and what UCX is told (for logs and pact-info).
  std::string summary;
  // Non-empty when the device cannot give what the class asked (fallback=tcp): the caller logs
  // it once per class as a warning.
  std::string fallbackWarning;
};

// className names the class in messages ("DEFAULT", "3", "KV"). eagerWhole: the face sends the
// class's `eager` offers as whole active messages (the engine; not the plugin), so the tcp
// segments are sized to hold one. yields: another class of the process has a higher priority
// (transport/priority.h), so over tcp this context's socket send buffer is bounded to
// kYieldingSndbuf: bytes the kernel already took would otherwise sit in front of the higher
// class's for as long as they take to drain (up to 4 MiB, 32 ms at 1 Gbit/s). Fails
// (kUnsupported) when the device has no transport of the asked service family and the profile
// says fallback=fail.
inline constexpr uint64_t kYieldingSndbuf = 128 << 10;
Result<ServiceConfig> serviceFor(const Profile& profile, const ucx::DeviceInfo& device,
                                 std::string_view className, bool eagerWhole = false, bool yields = false);

// What tells a class's UCP context apart on a device (transport::Fabric keys on it; pact-info
// prints it): the asked service and the UCX settings, "<service>|<ServiceConfig::key>". On a host
// without RDMA, classes that asked different services fall back to the same transports but keep
// their own context (their own workers and connections).
std::string contextKey(const Profile& profile, const ServiceConfig& config);

struct ClassService {
  ClassTable::Entry entry;
  ServiceConfig config;
};
// serviceFor every class of the table (ClassTable::entries() order); the first error wins.
Result<std::vector<ClassService>> servicesFor(const ClassTable& classes,
                                              const ucx::DeviceInfo& device);

// The transports UCX actually selects with config on device: creates a context with those
// settings, two workers and an endpoint between them, flushes it (wire-up; bounded to about 1 s),
// and returns one line per lane of ucp_ep_print_info, each "<view> lane[i]: <tl>/<dev> (<uses>)":
// view "remote" is probed with shared memory and self excluded (what a peer on another host
// gets), view "same-host" with the settings as they are. Everything is released before return.
Result<std::string> probeTransports(const ucx::DeviceInfo& device, const ServiceConfig& config);

}  // namespace pact::transport
