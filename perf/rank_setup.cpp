// --netns / --env-a / --env-b of the two-process scenarios; see rank_setup.h.
#include "rank_setup.h"

#include "netns.h"
#include "peer.h"

#include <unistd.h>

#include <cstdlib>

namespace pact::perf {

void checkRankSetup(const RankSetup& setup) {
  if (!setup.netns.empty()) {
    if (setup.netns.size() != 2) die("--netns takes two namespaces: A,B");
    for (const std::string& ns : setup.netns) {
      if (ns.empty() || ns.find('/') != std::string::npos ||
          access(("/var/run/netns/" + ns).c_str(), F_OK) != 0) {
        die("--netns: no network namespace '" + ns + "' (/var/run/netns/" + ns +
            "; build it first, e.g. ci/netns.sh up)");
      }
    }
  }
  for (const auto* list : {&setup.env_a, &setup.env_b}) {
    for (const std::string& kv : *list) {
      const size_t eq = kv.find('=');
      if (eq == 0 || eq == std::string::npos) {
        die(std::string(list == &setup.env_a ? "--env-a" : "--env-b") +
            ": expected KEY=VALUE, got '" + kv + "'");
      }
    }
  }
}

void enterRankSetup(const RankSetup& setup, int rank) {
  if (!setup.netns.empty()) {
    const std::string err = netns::enterNamespace(setup.netns[static_cast<size_t>(rank)]);
    if (!err.empty()) die("--netns: " + err);
  }
  for (const std::string& kv : rank == 0 ? setup.env_a : setup.env_b) {
    const size_t eq = kv.find('=');
    if (setenv(kv.substr(0, eq).c_str(), kv.substr(eq + 1).c_str(), 1) != 0) {
      die("setenv " + kv.substr(0, eq) + " failed");
    }
  }
}

}  // namespace pact::perf
