// Every counter of the registry in Prometheus' text exposition format (version 0.0.4), the body
// PACT_METRICS_PORT serves and PACT_METRICS_FILE holds:
//
//   # HELP pact_engine_committed_total transfers committed
//   # TYPE pact_engine_committed_total counter
//   pact_engine_committed_total{object="engine prefill-0",set="7"} 1234
//
// One family per scope and counter, named pact_<scope>_<counter> (counters that only grow end in
// _total, gauges do not), with its HELP and TYPE once, before its samples; one sample per live
// set, labelled with the set's object ("engine NAME", "send comm to PEER", "device NAME") and its
// process-unique id (two comms to one peer are two series). Families with no live set are left
// out. docs/observability.md lists them.
#pragma once

#include <string>
#include <vector>

#include "telemetry/counters.h"

namespace pact::telemetry {

// The text for every live set of the registry, then the NIC counters of the devices its device
// sets name (nicText) and the TCP connections on them (tcp_info.h).
std::string prometheusText(const Registry& registry);

// The kernel's counters of each device, beside pact's, labelled device="NAME": a network
// interface's /sys/class/net/NAME/statistics/* as pact_netdev_<file>_total, an RDMA port
// ("mlx5_0:1") its /sys/class/infiniband/mlx5_0/ports/1/{counters,hw_counters}/* as
// pact_ib_port_<file>_total and pact_ib_hw_<file>_total (as the kernel counts them: port_xmit_data
// and port_rcv_data in 4-byte words). What a device does not expose is left out. sysRoot: "/sys".
std::string nicText(const std::vector<std::string>& devices, const std::string& sysRoot = "/sys");

// A label value with \, " and newline escaped as the format asks.
std::string escapeLabelValue(const std::string& v);

}  // namespace pact::telemetry
