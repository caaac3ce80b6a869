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

#include "telemetry/counters.h"

namespace pact::telemetry {

// The text for every live set of the registry.
std::string prometheusText(const Registry& registry);

// A label value with \, " and newline escaped as the format asks.
std::string escapeLabelValue(const std::string& v);

}  // namespace pact::telemetry
