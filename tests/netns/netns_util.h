// Helpers of the `netns` suite: running ci/netns.sh from the gtest process, and moving a forked
// peer into one of the namespaces it builds.
//
// Process model (as in the abi suite, see tests/abi/harness.h): the gtest process never opens the
// plugin. It builds the namespaces with `ci/netns.sh up ...`, forks two peers with PeerPair, and
// removes the namespaces in TearDown. Each peer calls enterNamespace() first, then sets its
// PACT_* / UCX_* variables, then opens the plugin, so that UCX and the plugin see only that
// namespace's links.
#pragma once

#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace pact::netns_test {

struct ScriptResult {
  bool timedOut = false;
  int exitCode = -1;  // exit status, or -1 when killed by a signal / timed out / not started
  std::string output;  // stdout and stderr together
};

// Path of ci/netns.sh from PACT_NETNS_SCRIPT (set by meson). Read once, in the gtest process,
// and removed from the environment so that peers do not hand an unknown PACT_* name to the
// plugin. Empty when unset.
const std::string& scriptPath();

// Runs `ci/netns.sh args...` with stdout+stderr captured, killed (its whole process group) when
// it runs past `timeout`.
ScriptResult runScript(const std::vector<std::string>& args,
                       std::chrono::milliseconds timeout = std::chrono::seconds(30));

// nullopt when `ci/netns.sh check` succeeded; otherwise why the suite cannot run here (the
// check's own message when it exits 77). Computed once per process. A check that fails in any
// other way is reported as a test failure by the caller, not as a skip: see checkFailure().
const std::optional<std::string>& unavailableReason();
// Non-empty when the check failed for a reason that is not "unavailable" (script missing, bad
// exit status): the test must fail with it.
const std::string& checkFailure();

// In a forked peer: join the named network namespace (/var/run/netns/NAME) and, as
// `ip netns exec` does, a private mount namespace with a sysfs of that network namespace
// (UCX lists its tcp devices from /sys/class/net, the plugin reads link facts there).
// `expectLink`: a link that must then be visible in /sys/class/net. Uses gtest assertions.
// The work is done by pact::netns::enterNamespace (perf/netns.h), shared with pact-perf.
void enterNamespace(const std::string& ns, const std::string& expectLink);

// /sys/class/net/<dev>/statistics/<counter> of the current namespace; ADD_FAILURE and 0 when
// unreadable. Only meaningful after enterNamespace.
uint64_t linkCounter(const std::string& dev, const std::string& counter);

// Sum of the `packets N` counters of the nftables table inet pact_loss in namespace A or B
// (the --loss rule). -1 with ADD_FAILURE when it cannot be read.
long long lossDrops(const std::string& side);

// Adaptive steering over pa0 (100 Mbit/s) and pa1 (1 Gbit/s), either face. The estimate measures
// what the rails deliver, so a CPU starved by other work (two cores shared with a build) flattens
// the split. run() moves one stream, checks it, and returns the rx bytes of {pa0, pa1}. Up to
// three runs: steering holds if one gives pa1 at least twice pa0's bytes (round-robin splits 1:1
// every time, so a steering that does not work fails all three). A run whose own checks failed
// ends the loop.
void expectFastRailFavoured(const std::function<std::array<uint64_t, 2>()>& run);

}  // namespace pact::netns_test
