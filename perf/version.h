// --version of pact's tools: pact's release, the UCX it runs on (and was built against), the NCCL
// net plugin tables the plugin exports and the engine's C API version.
#pragma once

#include <ucp/api/ucp.h>

#include <string>

#include "pact/pact.h"
#include "pact_config.h"

namespace pact::perf {

inline std::string versionText(const char* tool) {
  unsigned major = 0, minor = 0, release = 0;
  ucp_get_version(&major, &minor, &release);
  return std::string(tool) + " " + PACT_VERSION + "\nUCX " + std::to_string(major) + "." + std::to_string(minor) +
         "." + std::to_string(release) + " (built against " + std::to_string(UCP_API_MAJOR) + "." +
         std::to_string(UCP_API_MINOR) + ")\nNCCL net plugin: ncclNetPlugin_v" + std::to_string(PACT_NET_ABI_OLDEST) +
         " to ncclNetPlugin_v" + std::to_string(PACT_NET_ABI_NEWEST) + " (libnccl-net-pact.so)\nengine C API: v" +
         std::to_string(PACT_API_VERSION);
}

}  // namespace pact::perf
