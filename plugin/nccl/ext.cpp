// The pact_* control API exported beside the NCCL tables (include/pact/nccl_ext.h).
#include "pact/nccl_ext.h"

#include <mutex>

#include "plugin/nccl/core.h"
#include "plugin/nccl/timeline.h"
#include "telemetry/exporter.h"
#include "net/comm.h"

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
