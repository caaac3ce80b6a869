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
  }
  return "unknown status";
}

}  // namespace pact
