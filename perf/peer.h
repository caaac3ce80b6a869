// Two-process plumbing shared by pact-perf scenarios: fork a peer before any plugin is opened,
// a blocking control channel over a socketpair, a watchdog, and fatal-error reporting.
//
// Every function here either succeeds or ends the process (die): a benchmark has no useful way to
// continue after its peer or the plugin failed. Each process is single-threaded.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace pact::perf {

// Name of an ncclResult_t value ("ncclInternalError"), or "ncclResult(N)" if unknown.
const char* resultName(int rc);

// Prints "<program>[rank R]: msg" to stderr and exits with status 1 (the peer is killed with it).
[[noreturn]] void die(const std::string& msg);

// Dies with "<what> failed: <resultName> (rc)" unless rc == 0.
void check(int rc, const char* what);

// Forks. Returns the rank of the calling process: 0 in the parent, 1 in the child. The child dies
// with its parent (PR_SET_PDEATHSIG). The control channel is ready afterwards in both.
int forkPeer();

// Parent only: waits for the child and returns true if it exited with status 0.
bool reapPeer();

int myRank();

// Blocking, whole-buffer control messages; die on EOF (the peer exited) or error.
void ctlSend(const void* data, size_t len);
void ctlRecv(void* data, size_t len);
void barrier();
// Waits up to timeout_ms (0: only looks) for the peer's next control message (or its exit) to be
// readable; true if it is. Lets a side poll the plugin and watch for the peer's word at once.
bool ctlReadable(int timeout_ms);

// Arms (or re-arms) the watchdog: if the process is still in the same phase after `seconds`, it
// prints the phase and exits with status 2. seconds == 0 disarms it. phase must be a literal.
void watchdog(unsigned seconds, const char* phase);

// Monotonic time in seconds.
double now();

}  // namespace pact::perf
