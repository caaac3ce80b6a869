// PACT_DIAG=1: what each comm cost and met, printed to stderr (one line a comm, "pact diag:")
// when the comm closes and, for the comms still open, when the process exits, with a summary
// line. What users of other plugins asked for in vain: the connect time split into the time
// inside the plugin and the time between NCCL's polls, the registrations (count, bytes, time,
// registration-cache hits), the request high-water mark against the comm's bound, messages,
// faults and retransmits. docs/observability.md.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include "common/clock.h"

namespace pact::net {

class Comm;

// The setup calls of one connect or accept, until its comm exists.
struct SetupClock {
  TimePoint first{};          // the first call
  Duration inside{};          // summed time inside the calls
  uint32_t calls = 0;
  // A call that entered at `entered` returns now.
  void returned(TimePoint entered) {
    if (calls++ == 0) first = entered;
    inside += now() - entered;
  }
};

struct CommDiag {
  SetupClock setup;            // the connect or accept calls that made it
  Duration setupTotal{};       // first call to the comm
  uint64_t registrations = 0;  // regMr / regMrDmaBuf on the comm
  uint64_t regBytes = 0;
  Duration regTime{};
  uint64_t regCacheHits = 0;   // registrations served by a region already mapped
  size_t requestsPeak = 0;     // most requests held at once
};

namespace diag {

// Set once by Net::create from PACT_DIAG; off until then.
void enable(bool on);
bool enabled();
// A comm that exists (counted and listed for the exit summary) and one that closes (its line
// printed, and it leaves the list). Both only while enabled.
void opened(const Comm& c);
void closed(const Comm& c);
// The comm's line (exposed for the tests); `when`: "closed", "open at exit".
std::string line(const Comm& c, const char* when);

}  // namespace diag
}  // namespace pact::net
