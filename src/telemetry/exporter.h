// The process's metrics exporter (PACT_METRICS_PORT, PACT_METRICS_FILE): one thread that serves
// GET /metrics over HTTP/1.0 on its listening socket and rewrites the metrics file every interval
// and once more when the exporter stops (at exit). The body is prometheusText() of the process
// registry (per comm as the starting copy's config says). Started once per process by the first plugin init or engine, in whichever copy of pact
// that is (telemetry/shared.h: the plugin and the engine library share one); later starts keep it.
#pragma once

#include <chrono>
#include <string>

namespace pact::telemetry {

struct ExportConfig {
  std::string listen;  // "HOST:PORT" ("[V6]:PORT"), empty: no endpoint
  std::string file;    // empty: no file
  std::chrono::microseconds interval{10'000'000};  // file rewrites; 0: only at exit
  bool perComm = false;  // a series per plugin comm (PACT_METRICS_PER_COMM)
};

// Starts the exporter unless one runs already or the config asks for nothing. A socket that
// cannot be bound (a port in use) is a WARN naming the address, and the file (if any) still goes.
void startExporter(const ExportConfig& config);

// Rewrites the metrics file now (when one is configured): an engine or the plugin calls it just
// before its counters go, so a batch job's file ends with them.
void flushMetricsFile();

// The text now, into path (empty: PACT_METRICS_FILE's); false and *error when there is no file
// or it cannot be written (pact_plugin_metrics_write).
bool writeMetricsFile(const std::string& path, std::string* error);

// Stops the exporter (its thread joined, the file written a last time) if one runs; a later
// startExporter may start another. Static destruction does the same at exit.
void stopExporter();

// Where the endpoint listens ("127.0.0.1:41234", the kernel's port when 0 was asked), or empty.
std::string exporterAddress();

}  // namespace pact::telemetry
