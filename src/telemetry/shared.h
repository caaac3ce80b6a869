// The telemetry state a process shares between its copies of pact. The core is a static library
// linked into every object that uses it (the NCCL plugin, libpact.so, the Python extension, pact's
// executables), so a process that loads NCCL's pact plugin and the engine library holds two copies
// of the core, each with its own statics. The counter registry, the class sets, the exporter's
// claim (who serves PACT_METRICS_PORT and writes PACT_METRICS_FILE), the timeline
// (PACT_TRACE_FILE) and what the TCP connections retransmitted are meant to be one per process:
// the first copy that needs them creates them on the heap, never destroyed, and publishes them
// through its exported pact_telemetry_join_v1; a later copy of the same build looks through the
// loaded objects for that symbol and adopts what another copy published. A copy of another build
// (a different layout or catalogue: the fingerprint differs) keeps its own state and says so at
// INFO.
//
// Nothing shared points into a copy's own memory: the catalogs are copied onto the heap, so a copy
// may leave the process (NCCL's dlclose of the plugin) while the others go on; the sets it
// destroyed are gone with it, those never destroyed (its process set, class sets) stay readable,
// and an exporter it ran stops then (the next copy to start one serves again).
#pragma once

#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "telemetry/counters.h"

namespace pact::telemetry {

// The timeline's sources (telemetry/timeline.cpp).
struct TimelineState {
  struct Source {
    std::string key;
    std::vector<std::string> objects;
  };
  std::mutex mu;
  std::deque<Source> sources;  // oldest first
  size_t kept = 0, dropped = 0;
  int tracks = 0;
};

// What the TCP connections of the process retransmitted (telemetry/tcp_info.cpp): the totals must
// not depend on which copy writes the text.
struct TcpSeen {
  std::mutex mu;
  std::map<std::string, uint64_t> closedRetransmits;                // per device
  std::map<unsigned long, std::pair<std::string, uint64_t>> open;  // inode -> device, retransmits
};

// Whether an exporter runs in the process and where (telemetry/exporter.cpp). The exporter itself
// (its thread) belongs to the copy that started it.
struct ExportClaim {
  std::mutex mu;
  bool running = false;
  std::string address, file;
  bool perComm = false;  // PACT_METRICS_PER_COMM of the copy that started it
};

struct Shared {
  Registry registry;
  TimelineState timeline;
  ExportClaim claim;
  TcpSeen tcp;
  // The class sets by object ("plugin class 3", "engine class KV"): one per process, whichever
  // copy counts into it (telemetry::classCounters).
  std::mutex classMu;
  std::map<std::string, CounterSet*, std::less<>> classes;
  // The catalogs every set points at, copied onto the heap by the copy that created the state, so
  // that no set refers to a copy's text (which goes when that copy is unloaded). Indexed by Scope.
  std::deque<std::string> texts;
  std::deque<std::vector<CounterInfo>> infos;
  std::vector<Catalog> catalogs;
};

// The process's state: adopted from another copy of this build, or this copy's own.
Shared& shared();
// The shared copy of a scope's catalog (what CounterSet keeps); catalog's own when it has none.
const Catalog& sharedCatalog(const Catalog& catalog);
// The file name of the object that holds this copy ("libnccl-net-pact.so", "pact-info").
std::string copyName();
// Whether this copy adopted another's state; *from: the object it came from.
bool sharedIsAdopted(std::string* from = nullptr);

}  // namespace pact::telemetry

// Exported by every object that holds a copy (default visibility; executables through
// --export-dynamic-symbol): this copy's state when it has one and fingerprint is its build's,
// else null, with *mismatch set when the builds differ.
extern "C" void* pact_telemetry_join_v1(const char* fingerprint, int* mismatch);
