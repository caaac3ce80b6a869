// PACT_TRACE_FILE: the engines' transfer traces as Chrome trace / Perfetto JSON (the Trace Event
// format: open it in ui.perfetto.dev or chrome://tracing). Every transfer is an async track of its
// phases, one span per state it passed through ("waiting for credit", "on the wire", "landed to
// verified", "verified to committed", ...), with the transfer's key, peer and role in the args;
// an abort is an instant event naming why. The spans come from the engine's trace ring
// (PACT_TRACE_EVENTS bounds what is kept), taken when the engine is destroyed; the file holds
// every engine of the process destroyed so far and is replaced whole each time. docs/observability.md.
#pragma once

#include <span>
#include <string>

#include "telemetry/trace.h"

namespace pact::engine {

// The trace events of one engine, turned into spans and handed to the process's timeline
// (telemetry/timeline.h: bounded to maxKept objects; telemetry::writeTimeline writes the file).
void collectTrace(const std::string& engineName, std::span<const telemetry::TraceEvent> events,
                  size_t maxKept);

// The phase a transfer is in while in state s, as the trace names it (exposed for the tests).
const char* phaseName(uint8_t state, uint8_t role);

}  // namespace pact::engine
