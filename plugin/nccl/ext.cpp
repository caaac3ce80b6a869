// The pact_* control API exported beside the NCCL tables (include/pact/nccl_ext.h).
#include "ucx/tcp_reset.h"
#include "pact/nccl_ext.h"

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <mutex>

#include "plugin/nccl/core.h"
#include "plugin/nccl/timeline.h"
#include "telemetry/exporter.h"
#include "net/comm.h"
#include "net/fence.h"

extern "C" __attribute__((visibility("default"))) int pact_comm_stats(void* comm, pact_comm_stats_t* out) {
  auto* c = static_cast<pact::net::Comm*>(comm);
  if (c == nullptr || out == nullptr || c->magic != pact::net::Comm::kMagic) return -1;
  std::lock_guard lock(c->dev().mutex());
  *out = pact_comm_stats_t{};
  using namespace pact::telemetry;
  const CounterSet& s = c->counters();
  out->messages = s.get(kMessages);
  out->pieces = s.get(kPieces);
  out->pieces_out_of_order = s.get(kPiecesOutOfOrder);
  out->messages_out_of_order = s.get(kMessagesOutOfOrder);
  out->unordered = c->channel().ordered ? 0 : 1;
  out->lanes = c->channel().ordered ? 1 : c->channel().lanes;
  out->chunk = c->channel().chunk;
  out->faults_injected = s.get(kCommFaultsInjected);
  out->retransmits = s.get(kRetransmits);
  out->duplicates_filtered = s.get(kDuplicatesFiltered);
  out->gpu_flushes = s.get(kGpuFlushes);
  out->gpu_flush_reads = s.get(kGpuFlushReads);
  if (c->isSend()) {
    const auto& lanes = static_cast<pact::net::SendComm*>(c)->lanes();
    for (size_t i = 0; i < lanes.size() && i < PACT_MAX_LANES; ++i) {
      out->lane_pieces[i] = lanes.stats(i).pieces;
      out->lane_bytes[i] = lanes.stats(i).bytes;
    }
  }
  return 0;
}

extern "C" __attribute__((visibility("default"))) int pact_comm_counters(void* comm, const char** names,
                                                                       uint64_t* values, size_t max) {
  auto* c = static_cast<pact::net::Comm*>(comm);
  if (c == nullptr || c->magic != pact::net::Comm::kMagic) return -1;
  std::lock_guard lock(c->dev().mutex());
  const pact::telemetry::CounterSet& s = c->counters();
  const auto counters = s.catalog().counters;
  for (size_t i = 0; i < counters.size() && i < max; ++i) {
    if (names != nullptr) names[i] = counters[i].name;
    if (values != nullptr) values[i] = s.get(i);
  }
  return static_cast<int>(counters.size());
}

namespace {
int contractError(const pact::net::Comm& c) {
  using pact::Status;
  using pact::telemetry::ErrorKind;
  switch (c.error()) {
    case Status::kOk: return PACT_COMM_OK;
    case Status::kEpochMismatch: return PACT_COMM_EPOCH;
    case Status::kChecksum: return PACT_COMM_CHECKSUM;
    case Status::kDeadline: return PACT_COMM_DEADLINE;
    case Status::kRejected: return PACT_COMM_VETOED;
    default:
      return c.failureKind() == ErrorKind::kPeerLost || c.failureKind() == ErrorKind::kPeerAbort
                 ? PACT_COMM_PEER
                 : PACT_COMM_OTHER;
  }
}
}  // namespace

namespace {
// The preamble and ending of a query that fills a versioned struct (struct_size first) for a comm:
// -1 for a dead comm, a null out or one too small for its first fields (below minSize); else
// fill(comm, v) under the device lock and only the fields that fit copied out.
template <typename T, typename Fill>
int queryComm(void* comm, T* out, size_t minSize, Fill&& fill) {
  auto* c = static_cast<pact::net::Comm*>(comm);
  if (c == nullptr || out == nullptr || c->magic != pact::net::Comm::kMagic || out->struct_size < minSize) return -1;
  std::lock_guard lock(c->dev().mutex());
  T v{};
  v.struct_size = static_cast<uint32_t>(std::min<size_t>(out->struct_size, sizeof v));
  fill(*c, v);
  std::memcpy(out, &v, v.struct_size);
  return 0;
}
}  // namespace

extern "C" __attribute__((visibility("default"))) int pact_comm_contract(void* comm, pact_comm_contract_t* out) {
  return queryComm(comm, out, offsetof(pact_comm_contract_t, retries), [](pact::net::Comm& cm, pact_comm_contract_t& v) {
    auto* c = &cm;
    const pact::transport::ChannelConfig& cfg = c->channel();
    using namespace pact::telemetry;
    const CounterSet& s = c->counters();
    v.verify = static_cast<int>(cfg.verify);
    v.retries = cfg.retries;
    v.timeout_us = static_cast<uint64_t>(cfg.timeout.count());
    v.sealed = cfg.sealed ? 1 : 0;
    v.priority = cfg.priority;
    if (c->isSend()) {
      if (const auto* credits = static_cast<pact::net::SendComm*>(c)->credits()) {
        v.credit_budget = credits->budget();
        v.credit_in_flight = credits->inFlight();
        v.credit_peak = credits->peak();
      }
    }
    v.credit_refusals = s.get(kCreditRefusals);
    if (c->isSend()) {
      const auto& lanes = static_cast<pact::net::SendComm*>(c)->lanes();
      v.priority_holds = lanes.holds();
      v.bytes_in_flight = lanes.inflight();
    }
    v.checksum_mismatches = s.get(kChecksumMismatches);
    v.retransmits = s.get(kRetransmits);
    v.error = contractError(*c);
    std::snprintf(v.reason, sizeof v.reason, "%s", c->failureReason().c_str());
  });
}

extern "C" __attribute__((visibility("default"))) int pact_comm_rails(void* comm, pact_comm_rails_t* out) {
  return queryComm(comm, out, offsetof(pact_comm_rails_t, watched), [](pact::net::Comm& cm, pact_comm_rails_t& v) {
    auto* c = &cm;
    const pact::transport::RailSet& rails = c->isSend() ? static_cast<pact::net::SendComm*>(c)->rails()
                                                    : static_cast<pact::net::RecvComm*>(c)->rails();
    v.watched = rails.active() ? 1 : 0;
    v.rails = rails.active() ? static_cast<int>(rails.size()) : 1;
    v.rails_up = rails.active() ? static_cast<int>(rails.usableCount()) : 1;
    using namespace pact::telemetry;
    const CounterSet& s = c->counters();
    v.failovers = s.get(kRailFailovers);
    v.recoveries = s.get(kRailRecoveries);
    v.pieces_resent = s.get(kRailResentPieces);
    v.bytes_resent = s.get(kRailResentBytes);
    v.stranded_receives = s.get(kRailStrandedReceives);
    for (size_t r = 0; r < PACT_MAX_RAILS; ++r) {
      v.rail_up[r] = rails.active() ? (r < rails.size() && rails.usable(r) ? 1 : 0) : (r == 0 ? 1 : 0);
      if (r < rails.size()) v.rail_down_us[r] = static_cast<uint64_t>(rails.downTime(r).count());
      if (c->isSend()) v.rail_bytes[r] = static_cast<pact::net::SendComm*>(c)->railBytes(r);
    }
  });
}

extern "C" __attribute__((visibility("default"))) int pact_rail_failover_available(char* why, size_t len) {
  if (why != nullptr && len != 0) why[0] = '\0';
  return 1;
}

extern "C" __attribute__((visibility("default"))) int pact_nccl_set_epoch(uint64_t epoch) {
  pact::net::Fence::process().setEpoch(epoch);
  return 0;
}

extern "C" __attribute__((visibility("default"))) uint64_t pact_nccl_epoch(void) {
  return pact::net::Fence::process().epoch();
}

extern "C" __attribute__((visibility("default"))) int pact_nccl_set_commit_hook(pact_nccl_commit_hook_fn hook,
                                                                                void* user) {
  if (hook == nullptr) {
    pact::net::Fence::process().setHook(nullptr);
    return 0;
  }
  pact::net::Fence::process().setHook([hook, user](const pact::net::MessageFacts& m) {
    pact_nccl_message_t msg{};
    msg.struct_size = sizeof msg;
    msg.comm = const_cast<void*>(m.comm);
    msg.peer = m.peer->c_str();
    msg.traffic_class = m.className->c_str();
    msg.buffer = m.buffer;
    msg.tag = m.tag;
    msg.bytes = m.bytes;
    msg.epoch = m.epoch;
    msg.verify = m.verify;
    msg.checksum = m.checksum;
    return hook(user, &msg);
  });
  return 0;
}

extern "C" __attribute__((visibility("default"))) uint64_t pact_faults_injected(void) {
  return pact::telemetry::processCounters().get(pact::telemetry::kPluginFaultsInjected);
}

extern "C" __attribute__((visibility("default"))) int pact_plugin_metrics_write(const char* path) {
  std::string error;
  if (pact::telemetry::writeMetricsFile(path != nullptr ? path : "", &error)) return 0;
  PACT_WARN("pact_plugin_metrics_write: %s", error.c_str());
  return -1;
}

extern "C" __attribute__((visibility("default"))) int pact_plugin_trace_write(const char* path) {
  std::string error;
  if (pact::plugin::timeline::write(path != nullptr ? path : "", &error)) return 0;
  PACT_WARN("pact_plugin_trace_write: %s", error.c_str());
  return -1;
}

extern "C" __attribute__((visibility("default"))) int pact_plugin_resources(pact_plugin_resources_t* out) {
  auto net = pact::plugin::activeNet();
  if (net == nullptr || out == nullptr) return -1;
  net->settle(std::chrono::milliseconds(1000));  // background teardown first (bounded)
  const auto r = net->resources();
  *out = pact_plugin_resources_t{r.comms, r.registrations, r.orphanedRequests};
  return 0;
}
