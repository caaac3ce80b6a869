#include "common/status.h"

namespace pact {

const char* statusName(Status s) {
  switch (s) {
    case Status::kOk: return "ok";
    case Status::kInProgress: return "in progress";
    case Status::kInvalidArgument: return "invalid argument";
    case Status::kNoMemory: return "out of memory";
    case Status::kNoResource: return "no resource";
    case Status::kRemoteError: return "remote error";
    case Status::kSystemError: return "system error";
    case Status::kInternal: return "internal error";
    case Status::kTimeout: return "timeout";
    case Status::kRefused: return "refused";
    case Status::kTruncated: return "message truncated";
    case Status::kCanceled: return "canceled";
    case Status::kUnsupported: return "unsupported";
    case Status::kNotFound: return "not found";
    case Status::kEpochMismatch: return "epoch mismatch";
    case Status::kChecksum: return "checksum mismatch";
    case Status::kRejected: return "rejected";
    case Status::kDeadline: return "deadline passed";
    case Status::kDuplicate: return "duplicate";
    case Status::kOutOfRange: return "out of range";
    case Status::kStale: return "stale generation";
    case Status::kBusy: return "busy";
    case Status::kIncomplete: return "incomplete";
    case Status::kPeerStale: return "peer stale";
  }
  return "unknown status";
}

}  // namespace pact
