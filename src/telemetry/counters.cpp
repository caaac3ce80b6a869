#include "telemetry/counters.h"

#include <algorithm>

#include "common/shrink.h"
#include "telemetry/shared.h"

namespace pact::telemetry {

namespace {

constexpr CounterInfo kEngineInfo[] = {
    {"committed", "transfers committed"},
    {"aborted", "transfers ended in an error"},
    {"retried", "attempts started again (checksum, missing pieces)"},
    {"duplicates_dropped", "duplicate offers, pieces, Dones and committed keys dropped"},
    {"stale_rejected", "pieces, offers and chunks of another epoch, attempt or older generation"},
    {"out_of_range", "pieces or blocks refused for lying outside their range"},
    {"checksum_failures", "attempts whose payload check failed"},
    {"open_registrations", "registered memory regions", true},
    {"open_transfers", "transfers not yet freed", true},
    {"staged_bytes", "receiver: bytes advertised and not yet final", true},
    {"peak_staged_bytes", "receiver: the most bytes ever staged at once", true},
    {"credit_budget", "receiver: the total credit budget", true},
    {"credit_stall_ns", "receiver: time matched transfers waited for credit"},
    {"bytes_received", "payload bytes landed"},
    {"bytes_sent", "payload bytes handed to the transport"},
    {"faults_injected", "PACT_FAULT faults this engine applied"},
    {"rail_failovers", "rails to a peer taken out (docs/reliability.md, \"Rail failover\")"},
    {"rail_recoveries", "rails to a peer taken back after an outage"},
    {"rail_resent_pieces", "pieces sent again because the rail they went over was taken out"},
    {"rail_resent_bytes", "bytes of those pieces"},
    {"rail_down_us", "time rails to peers spent out, counted as each comes back (us)"},
};
static_assert(std::size(kEngineInfo) == kEngineCounters);

constexpr CounterInfo kCommInfo[] = {
    {"messages", "requests completed"},
    {"bytes", "payload bytes of those requests: sent (send comm) or received (receive comm)"},
    {"pieces", "UCX operations completed"},
    {"pieces_out_of_order", "receive: a piece landed before a lower piece of its message"},
    {"messages_out_of_order", "a message completed while an earlier one was in flight"},
    {"faults_injected", "PACT_FAULT decisions applied to this comm"},
    {"retransmits", "send: pieces sent again (a lost attempt, or a check that did not match)"},
    {"duplicates_filtered", "receive: copies of consumed pieces drained from UCX's unexpected queue"},
    {"gpu_flushes", "receive: iflush calls the CUDA driver's GPUDirect RDMA flush served"},
    {"gpu_flush_reads", "receive: 1-byte loopback reads iflush posted to flush CUDA buffers"},
    {"checksum_mismatches", "receive: pieces whose check did not match the sender's (verify)"},
    {"credit_refusals", "send: isend calls answered with a NULL request because the class's credits to the peer were spent"},
    {"priority_holds", "send: times the comm stood back (held its waiting pieces) because a higher class had work to the same peer"},
    {"rail_failovers", "times a rail of the comm was taken out (rail failover: no probe answered and no data for PACT_RAIL_TIMEOUT, or an endpoint failed)"},
    {"rail_recoveries", "times an out rail of the comm was taken back"},
    {"rail_resent_pieces", "send: pieces sent again on another rail after a failover"},
    {"rail_resent_bytes", "send: bytes of those pieces"},
    {"rail_down_us", "time the comm's rails spent out, counted as each comes back (us)"},
    {"rail_stranded_receives", "receive: messages reported while UCX still held a copy of a piece stranded on an out rail (left to UCX)"},
};
static_assert(std::size(kCommInfo) == kCommCounters);

constexpr CounterInfo kLaneInfo[] = {
    {"pieces", "pieces of the send comm given to this lane"},
    {"bytes", "bytes of the send comm given to this lane"},
};
static_assert(std::size(kLaneInfo) == kLaneCounters);

constexpr CounterInfo kDeviceInfo[] = {
    {"comms", "open comms on this device context", true},
    {"registrations", "open memory registrations on this device context", true},
    {"endpoints", "UCX endpoints to peer workers, shared by every comm to that peer", true},
    {"closing_endpoints", "endpoint closes UCX is carrying out in the background", true},
    {"closes_abandoned", "background closes given up past their bound (logged)"},
    {"requests", "requests taken from the context's request slab: in flight on its comms, or orphans of closed comms UCX still holds", true},
};
static_assert(std::size(kDeviceInfo) == kDeviceCounters);

constexpr const char* kErrorsDoc =
    "comms of the class that failed (plugin) or transfers that aborted (engines), by kind";
constexpr CounterInfo kClassInfo[] = {
    {"messages_sent", "plugin: send requests completed; engines: transfers sent and committed"},
    {"messages_received", "plugin: receive requests completed; engines: transfers received and committed"},
    {"bytes_sent", "payload bytes of those sends"},
    {"bytes_received", "payload bytes of those receives"},
    {"retransmits", "plugin: lost attempts sent again; engines: attempts started again (checksum, missing pieces)"},
    {"faults_injected", "PACT_FAULT decisions applied to the class's traffic"},
    {"errors", kErrorsDoc, false, "peer_lost"},
    {"errors", kErrorsDoc, false, "peer_abort"},
    {"errors", kErrorsDoc, false, "transport"},
    {"errors", kErrorsDoc, false, "retries"},
    {"errors", kErrorsDoc, false, "refused"},
    {"errors", kErrorsDoc, false, "deadline"},
    {"errors", kErrorsDoc, false, "out_of_range"},
    {"errors", kErrorsDoc, false, "canceled"},
    {"errors", kErrorsDoc, false, "other"},
};
static_assert(std::size(kClassInfo) == kClassCounters);

constexpr CounterInfo kProcessInfo[] = {
    {"plugin_faults_injected", "PACT_FAULT decisions the plugin applied, closed comms included"},
    {"sessions", "control connections to peer processes (one per peer, every comm multiplexed)", true},
    {"channels", "comms carried by the sessions, closing ones included", true},
};
static_assert(std::size(kProcessInfo) == kProcessCounters);

}  // namespace

const Catalog kEngineCatalog{Scope::kEngine, kEngineInfo};
const Catalog kCommCatalog{Scope::kComm, kCommInfo};
const Catalog kLaneCatalog{Scope::kLane, kLaneInfo};
const Catalog kDeviceCatalog{Scope::kDevice, kDeviceInfo};
const Catalog kProcessCatalog{Scope::kProcess, kProcessInfo};
const Catalog kClassCatalog{Scope::kClass, kClassInfo};

const char* errorKindName(ErrorKind k) {
  return kClassInfo[classError(k)].kind;
}

CounterSet& classCounters(std::string_view face, std::string_view name) {
  // Never destroyed, like processCounters (the plugin's comms count into them while statics go),
  // and one per process (shared.h): the engines of libpact.so and of the Python extension share
  // "engine class KV".
  Shared& sh = shared();
  const std::string object = std::string(face) + " class " + std::string(name);
  std::lock_guard lock(sh.classMu);
  auto& s = sh.classes[object];
  if (s == nullptr) s = new CounterSet(kClassCatalog, object, {{"face", std::string(face)}, {"class", std::string(name)}});
  return *s;
}

const char* scopeName(Scope s) {
  switch (s) {
    case Scope::kProcess: return "process";
    case Scope::kDevice: return "device";
    case Scope::kClass: return "class";
    case Scope::kComm: return "comm";
    case Scope::kPeer: return "peer";
    case Scope::kEngine: return "engine";
    case Scope::kLane: return "lane";
  }
  return "?";
}

CounterSet::CounterSet(const Catalog& catalog, std::string object, Labels labels, uint64_t comm)
    : catalog_(sharedCatalog(catalog)), object_(std::move(object)), labels_(std::move(labels)), comm_(comm),
      values_(std::make_unique<std::atomic<uint64_t>[]>(catalog.counters.size())) {
  for (size_t i = 0; i < catalog.counters.size(); ++i) values_[i].store(0, std::memory_order_relaxed);
  Registry::process().add(this);
}

CounterSet::~CounterSet() { Registry::process().remove(this); }

void CounterSet::raise(size_t i, uint64_t v) {
  uint64_t cur = values_[i].load(std::memory_order_relaxed);
  while (cur < v && !values_[i].compare_exchange_weak(cur, v, std::memory_order_relaxed)) {
  }
}

std::vector<uint64_t> CounterSet::values() const {
  std::vector<uint64_t> out(catalog_.counters.size());
  for (size_t i = 0; i < out.size(); ++i) out[i] = get(i);
  return out;
}

Registry& Registry::process() {
  // Never destroyed (shared.h): sets owned by static objects (the plugin's Net, its device
  // contexts) are destroyed at exit in an order the registry cannot know, and each unregisters
  // itself then.
  return shared().registry;
}

void Registry::add(CounterSet* s) {
  std::lock_guard lock(mu_);
  s->id_ = nextId_++;
  s->slot_ = sets_.size();
  sets_.push_back(s);
}

void Registry::remove(CounterSet* s) {
  // Constant time (a process may hold 100,000 comms): the last set takes the slot.
  std::lock_guard lock(mu_);
  Retired& r = retired_[{s->catalog().scope, s->labels_}];
  if (r.values.empty()) r = Retired{&s->catalog(), s->comm() != 0, std::vector<uint64_t>(s->catalog().counters.size())};
  for (size_t i = 0; i < r.values.size(); ++i)
    if (!s->catalog().counters[i].gauge) r.values[i] += s->get(i);
  CounterSet* last = sets_.back();
  sets_[s->slot_] = last;
  last->slot_ = s->slot_;
  sets_.pop_back();
  shrinkIfSparse(sets_);
}

void Registry::forEach(const Scope* scope, const std::function<void(const CounterSet&)>& f) const {
  std::lock_guard lock(mu_);
  for (const CounterSet* s : sets_)
    if (scope == nullptr || s->catalog().scope == *scope) f(*s);
}

void Registry::forEachRetired(const std::function<void(const Labels&, const Retired&)>& f) const {
  std::lock_guard lock(mu_);
  for (const auto& [key, r] : retired_) f(key.second, r);
}

uint64_t Registry::total(Scope scope, size_t i) const {
  uint64_t sum = 0;
  forEach(&scope, [&](const CounterSet& s) { sum += s.get(i); });
  return sum;
}

std::span<const Catalog* const> Registry::catalogs() {
  static const Catalog* const all[] = {&kProcessCatalog, &kDeviceCatalog, &kClassCatalog,
                                       &kCommCatalog, &kLaneCatalog, &kEngineCatalog};
  return all;
}

CounterSet& processCounters() {
  // Never destroyed: the plugin's Net (a static) counts its sessions while it is destroyed at exit.
  // One per copy of pact (shared.h), named by the object that holds it.
  static CounterSet* const s = new CounterSet(kProcessCatalog, "process (" + copyName() + ")", {{"copy", copyName()}});
  return *s;
}

}  // namespace pact::telemetry
