// The process's timeline (PACT_TRACE_FILE): Chrome trace / Perfetto JSON ("Trace Event format":
// open it in ui.perfetto.dev or chrome://tracing). Its sources hand in their event objects when
// they end or when asked: each destroyed engine its transfers (engine/trace_file.h), the plugin
// its requests (plugin/nccl/timeline.h). Bounded: past maxKept objects in all, the oldest
// sources go (counted in the file as otherData.sources_dropped). Thread-safe; its state is never
// destroyed, so a write at exit still works after static destructors ran.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace pact::telemetry {

// A process-unique track (the Trace Event format's tid) for a source's events.
int timelineTrack();
// A source's objects. replaceKey non-empty: they replace what that key handed in before (a
// source that is written more than once, like the plugin on demand and at exit).
void addToTimeline(std::vector<std::string> objects, size_t maxKept, const std::string& replaceKey = "");
// Writes every kept object to path (FILE.tmp.PID, then rename); false and *error on a failure.
bool writeTimeline(const std::string& path, std::string* error);

// JSON string contents with ", \ and control characters escaped.
std::string jsonEscape(const std::string& s);
// Nanoseconds as the format's microsecond timestamp ("12.345").
std::string timelineUs(uint64_t ns);

}  // namespace pact::telemetry
