// pact-info --metrics SOURCE: reads a running process's metrics (http://HOST:PORT[/PATH], as
// PACT_METRICS_PORT serves them, or a PACT_METRICS_FILE) and prints them as a table, one block
// per object (engine, comm, device, process, and "nic DEVICE" for the kernel's counters),
// counters by name. A source that cannot be read, or
// text that is not the exposition format, is an error naming what was wrong (exit 2).
#pragma once

#include <cstdio>
#include <string>

namespace pact::perf {

int printMetrics(const std::string& source, std::FILE* out);

}  // namespace pact::perf
