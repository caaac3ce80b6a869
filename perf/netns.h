// Moving the calling process into a named network namespace (one that `ip netns add` made, e.g.
// pactA / pactB from ci/netns.sh), the way `ip netns exec` does. Shared by `pact-perf p2p
// --netns` and the netns test suite (tests/netns/netns_util.h), so the logic exists once.
#pragma once

#include <string>

namespace pact::netns {

// Joins /var/run/netns/<ns> (setns CLONE_NEWNET), then a private mount namespace with a freshly
// mounted sysfs of that network namespace: sysfs shows the namespace of whoever mounted it, and
// UCX lists its tcp devices from /sys/class/net (the plugin reads link facts there too). Mount
// changes do not propagate back to the host (/ is made a recursive slave first).
// `expectLink`, when not empty: a link that must then be visible in /sys/class/net.
// Call it in a single-threaded process (setns of a network namespace and unshare(CLONE_NEWNS)
// need that), before opening anything that caches network state (UCX, the plugin).
// Returns an empty string on success, otherwise what failed (with strerror).
std::string enterNamespace(const std::string& ns, const std::string& expectLink = "");

}  // namespace pact::netns
