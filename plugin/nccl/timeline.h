// PACT_TRACE_FILE, the plugin's part: every isend and irecv from its post to the test that saw it
// end, as an async span ("isend" / "irecv") on the track of each lane it went over (one track
// per lane of the process), with comm, peer, bytes, pieces, lanes and result in its args. Up to
// PACT_TRACE_EVENTS requests are kept (the newest); they join the process's timeline
// (telemetry/timeline.h) and the file is written at the last finalize, at exit, and on demand
// (pact_plugin_trace_write). Off, nothing is recorded: one branch per request.
#pragma once

#include <cstddef>
#include <string>

#include "abi/net_common.h"
#include "net/request.h"

namespace pact::plugin::timeline {

// From init's parameters (the first init); empty path: off.
void configure(const std::string& path, size_t keep);
bool active();
// After isend/irecv posted `request` (bytes: the posted size, all buffers).
void posted(void* request, uint64_t bytes);
// A request ended (Net::test filled ending). sizes: what test reported (may be null).
void ended(const net::Ending& ending, const int* sizes, ncclResult_t result);
// The requests so far into the process's timeline, and the file written: to path, or to the
// configured one when path is empty. False and *error when tracing is off or the write failed.
bool write(const std::string& path, std::string* error);

}  // namespace pact::plugin::timeline
