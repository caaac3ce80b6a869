// The counter registry: every counter of the process, by scope (process, device, class, comm,
// peer, engine) and object, in one place. An object that counts (an engine, a comm, a device)
// owns a CounterSet: its scope's catalog (a fixed table of named, documented counters) and their
// values, registered from construction to destruction. Writers bump a counter by its index:
// add/sub/set for a set whose writers the owner serializes (its lock: a plain load and store, no
// atomic read-modify-write on the data path), addShared/subShared where threads race; readers
// (pact_stats,
// pact_comm_stats, pact_plugin_resources, pact-info, the exporters to come) find live sets by
// scope and read them by index or name. Catalogs are the documentation: pact-info prints them.
//
// Thread-safe. The process registry is never destroyed, so a set may be owned by a static. It is
// one per process, shared by every copy of pact loaded in it (telemetry/shared.h): the plugin's
// and the engine library's sets are in one registry.
#pragma once

#include <atomic>
#include <compare>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace pact::telemetry {

enum class Scope : uint8_t { kProcess, kDevice, kClass, kComm, kPeer, kEngine, kLane };
const char* scopeName(Scope s);

struct CounterInfo {
  const char* name;  // snake_case, as the C structs and exporters name it
  const char* doc;
  bool gauge = false;  // a level that goes up and down (else a count that only grows)
  // Non-null: one series of a family whose counters share name and doc, told apart by the label
  // kind="<kind>" (the class scope's errors by kind); they stand next to each other in a catalog.
  const char* kind = nullptr;
};

// A label of a set's series in the metrics. Only values from bounded sets: a device, a rail, a
// class, a peer's host, a direction, an engine's name, a lane number (docs/observability.md,
// "Labels and cardinality"); never an address with a port or an id.
struct Label {
  std::string key, value;
  auto operator<=>(const Label&) const = default;
};
using Labels = std::vector<Label>;

// The counters of one scope, in the order of that scope's index enum.
struct Catalog {
  Scope scope;
  std::span<const CounterInfo> counters;
};

class CounterSet {
 public:
  // object: what it counts ("engine prefill-0", "send comm to 10.0.0.2:4242", "device mlx5_0"),
  // for people (pact-info, logs). labels: what its series carry in the metrics; sets with equal
  // labels are one series, their values summed. comm: the id of the plugin comm the set counts
  // (a lane's), the comm label of PACT_METRICS_PER_COMM's series; a comm set is its own.
  // catalog() is then the process's shared copy of catalog (the same counters, in heap memory
  // that outlives the copy of pact that created the set).
  CounterSet(const Catalog& catalog, std::string object, Labels labels = {}, uint64_t comm = 0);
  ~CounterSet();
  CounterSet(const CounterSet&) = delete;
  CounterSet& operator=(const CounterSet&) = delete;

  // One writer at a time (the owner's lock).
  void add(size_t i, uint64_t n = 1) { set(i, get(i) + n); }
  void sub(size_t i, uint64_t n = 1) { set(i, get(i) - n); }
  // Writers on several threads.
  void addShared(size_t i, uint64_t n = 1) { values_[i].fetch_add(n, std::memory_order_relaxed); }
  void subShared(size_t i, uint64_t n = 1) { values_[i].fetch_sub(n, std::memory_order_relaxed); }
  void set(size_t i, uint64_t v) { values_[i].store(v, std::memory_order_relaxed); }
  // set(max(get(i), v)): a peak.
  void raise(size_t i, uint64_t v);
  uint64_t get(size_t i) const { return values_[i].load(std::memory_order_relaxed); }
  // Every value in catalog order.
  std::vector<uint64_t> values() const;

  const Catalog& catalog() const { return catalog_; }
  const std::string& object() const { return object_; }
  const Labels& labels() const { return labels_; }
  // The plugin comm it counts (comm's or this set's own id for a comm set), or 0.
  uint64_t comm() const { return comm_ != 0 || catalog_.scope != Scope::kComm ? comm_ : id_; }
  // Unique in the process for its whole life (1, 2, ...), across copies of pact: tells two sets of
  // one object name apart.
  uint64_t id() const { return id_; }

 private:
  friend class Registry;
  const Catalog& catalog_;
  std::string object_;
  Labels labels_;
  uint64_t comm_ = 0;
  std::unique_ptr<std::atomic<uint64_t>[]> values_;
  uint64_t id_ = 0;
  size_t slot_ = 0;  // its index in the registry
};

// Every live CounterSet of the process.
class Registry {
 public:
  static Registry& process();
  // Calls f(set) for each live set of scope (any scope when null), under the registry's lock:
  // f must not create or destroy sets.
  void forEach(const Scope* scope, const std::function<void(const CounterSet&)>& f) const;
  // The sum of counter i over the live sets of a scope.
  uint64_t total(Scope scope, size_t i) const;
  // Every catalog that exists, for documentation (pact-info --counters).
  static std::span<const Catalog* const> catalogs();

  // What the sets gone from the registry counted, summed by scope and labels: counters only (a
  // gauge's level goes with its set), so that a series never goes down when a comm closes. As
  // many entries as label sets ever seen, which the labels keep bounded.
  struct Retired {
    const Catalog* catalog;  // the shared one (it outlives every copy of pact)
    bool ofComm = false;  // counted plugin comms (PACT_METRICS_PER_COMM shows it as comm="closed")
    std::vector<uint64_t> values;
  };
  // Calls f(labels, retired) for each, under the registry's lock (with forEach's rule).
  void forEachRetired(const std::function<void(const Labels&, const Retired&)>& f) const;

 private:
  friend class CounterSet;
  void add(CounterSet* s);
  void remove(CounterSet* s);

  mutable std::mutex mu_;
  std::vector<CounterSet*> sets_;
  std::map<std::pair<Scope, Labels>, Retired> retired_;
  uint64_t nextId_ = 1;
};

// ---- the catalogs of the scopes that count today ------------------------------------------------

// An engine (pact_stats_t, in this order: pact_stats copies them one to one).
enum EngineCounter : size_t {
  kCommitted, kAborted, kRetried, kDuplicatesDropped, kStaleRejected, kOutOfRange,
  kChecksumFailures, kOpenRegistrations, kOpenTransfers, kStagedBytes, kPeakStagedBytes,
  kCreditBudget, kCreditStallNs, kBytesReceived, kBytesSent, kFaultsInjected,
  kEngineRailFailovers, kEngineRailRecoveries, kEngineRailResentPieces, kEngineRailResentBytes, kEngineRailDownUs,
  kEngineCounters
};
extern const Catalog kEngineCatalog;

// A comm of the NCCL plugin.
enum CommCounter : size_t {
  kMessages, kCommBytes, kPieces, kPiecesOutOfOrder, kMessagesOutOfOrder, kCommFaultsInjected, kRetransmits,
  kDuplicatesFiltered, kGpuFlushes, kGpuFlushReads, kChecksumMismatches, kCreditRefusals,
  kPriorityHolds, kRailFailovers, kRailRecoveries, kRailResentPieces, kRailResentBytes, kRailDownUs,
  kRailStrandedReceives, kCommCounters
};
extern const Catalog kCommCatalog;

// A lane of a plugin send comm that stripes over several (an unordered class): its share.
enum LaneCounter : size_t { kLanePieces, kLaneBytes, kLaneCounters };
extern const Catalog kLaneCatalog;

// A device context (one per device and service) of the plugin.
enum DeviceCounter : size_t {
  kLiveComms, kLiveMemHandles, kLiveEndpoints, kClosingEndpoints, kClosesAbandoned, kRequests,
  kDeviceCounters
};
extern const Catalog kDeviceCatalog;

// Why a plugin comm failed, or an engine transfer aborted: the kind label of the class scope's
// errors family (docs/observability.md).
enum class ErrorKind : uint8_t {
  kPeerLost,    // the peer process died or was declared gone (no goodbye, PACT_ERR_PEER_STALE)
  kPeerAbort,   // the peer failed or closed the comm, or its engine aborted the transfer
  kTransport,   // UCX reported an error on an endpoint or operation
  kRetries,     // attempts spent: lost pieces past the class's retries, checksum, incomplete
  kRefused,     // the receiver refused it: a piece, the commit hook, another epoch, stale, duplicate
  kDeadline,    // a deadline or timeout passed
  kOutOfRange,  // larger than the posted buffer, or outside a registration or its advertised range
  kCanceled,    // the application released or closed it first
  kOther,
};
inline constexpr size_t kErrorKinds = 9;
const char* errorKindName(ErrorKind k);

// A traffic class of the plugin (NCCL's trafficClass: "plugin class 3") or of the process's engines
// ("engine class KV"), over its life in the process: every comm or transfer of the class.
enum ClassCounter : size_t {
  kClassMessagesSent, kClassMessagesReceived, kClassBytesSent, kClassBytesReceived,
  kClassRetransmits, kClassFaultsInjected, kClassErrors,  // kClassErrors + ErrorKind: one per kind
  kClassCounters = kClassErrors + kErrorKinds
};
extern const Catalog kClassCatalog;
// The set of a class ("plugin" or "engine", the class's name), created on first use and never
// destroyed; its writers are on many threads (addShared).
CounterSet& classCounters(std::string_view face, std::string_view name);
inline size_t classError(ErrorKind k) { return kClassErrors + static_cast<size_t>(k); }

// The plugin's process-wide counters.
enum ProcessCounter : size_t { kPluginFaultsInjected, kSessions, kChannels, kProcessCounters };
extern const Catalog kProcessCatalog;
// The process-wide set (created on first use, lives as long as the registry).
CounterSet& processCounters();

}  // namespace pact::telemetry
