// Every counter of the registry in Prometheus' text exposition format (version 0.0.4), the body
// PACT_METRICS_PORT serves and PACT_METRICS_FILE holds:
//
//   # HELP pact_engine_committed_total transfers committed
//   # TYPE pact_engine_committed_total counter
//   pact_engine_committed_total{engine="prefill-0"} 1234
//
// One family per scope and counter, named pact_<scope>_<counter> (counters that only grow end in
// _total, gauges do not), with its HELP and TYPE once, before its samples. A series is a scope and
// a set of bounded labels (device, rail, class, peer, direction, engine, lane): every set that
// carries them summed, with what closed sets counted kept in (a counter never goes down). The
// plugin's comms are summed by those labels unless PACT_METRICS_PER_COMM asks for a series per
// comm. Families with no series are left out. docs/observability.md lists them and the labels.
#pragma once

#include <string>
#include <vector>

#include "telemetry/counters.h"

namespace pact::telemetry {

// The text for the registry's series, then the NIC counters of the devices its device sets
// name (nicText) and the TCP connections on them (tcp_info.h).
// perComm: each plugin comm (and its lanes) its own series, labelled comm="ID"; what closed comms
// counted under comm="closed".
std::string prometheusText(const Registry& registry, bool perComm = false);

// The kernel's counters of each device, beside pact's, labelled device="NAME": a network
// interface's /sys/class/net/NAME/statistics/* as pact_netdev_<file>_total, an RDMA port
// ("mlx5_0:1") its /sys/class/infiniband/mlx5_0/ports/1/{counters,hw_counters}/* as
// pact_ib_port_<file>_total and pact_ib_hw_<file>_total (as the kernel counts them: port_xmit_data
// and port_rcv_data in 4-byte words). What a device does not expose is left out. sysRoot: "/sys".
std::string nicText(const std::vector<std::string>& devices, const std::string& sysRoot = "/sys");

// A label value with \, " and newline escaped as the format asks.
std::string escapeLabelValue(const std::string& v);

}  // namespace pact::telemetry
